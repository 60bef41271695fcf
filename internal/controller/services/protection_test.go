package services_test

import (
	"context"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ecs"
	"github.com/aws/aws-sdk-go-v2/service/ecs/types"
)

// A protected service task stays on a draining instance (so the instance
// is not emptied) while its replacement starts elsewhere; once protection
// is removed it moves like the others.
func TestDrainingKeepsProtectedTasks(t *testing.T) {
	ctx := context.Background()
	r := newRig(t)
	a, _ := r.agent(t)
	b, _ := r.agent(t)
	td := r.register(t, "web")
	if _, err := r.c.CreateService(ctx, &ecs.CreateServiceInput{Cluster: aws.String("apps"), ServiceName: aws.String("web"),
		TaskDefinition: aws.String(td), DesiredCount: aws.Int32(2)}); err != nil {
		t.Fatal(err)
	}
	r.steady(t, "web", 2)
	onA := func() []string {
		var out []string
		for _, x := range r.tasks(t, "web", "RUNNING") {
			if aws.ToString(x.ContainerInstanceArn) == a {
				out = append(out, aws.ToString(x.TaskArn))
			}
		}
		return out
	}
	protected := onA()
	if len(protected) != 1 {
		t.Fatalf("%d service tasks on a, want 1", len(protected))
	}
	if _, err := r.c.UpdateTaskProtection(ctx, &ecs.UpdateTaskProtectionInput{Cluster: aws.String("apps"), Tasks: protected, ProtectionEnabled: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := r.c.UpdateContainerInstancesState(ctx, &ecs.UpdateContainerInstancesStateInput{Cluster: aws.String("apps"),
		ContainerInstances: []string{a}, Status: types.ContainerInstanceStatusDraining}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "a replacement running on b", func() bool {
		n := 0
		for _, x := range r.tasks(t, "web", "RUNNING") {
			if aws.ToString(x.ContainerInstanceArn) == b && aws.ToString(x.LastStatus) == "RUNNING" {
				n++
			}
		}
		return n == 2
	})
	time.Sleep(time.Second) // passes of the controller that must leave it
	if got := onA(); len(got) != 1 || got[0] != protected[0] {
		t.Fatalf("the protected task left the draining instance: on a %v", got)
	}
	if _, err := r.c.UpdateTaskProtection(ctx, &ecs.UpdateTaskProtectionInput{Cluster: aws.String("apps"), Tasks: protected, ProtectionEnabled: false}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the unprotected task off the draining instance", func() bool { return len(onA()) == 0 })
	r.steady(t, "web", 2)
}
