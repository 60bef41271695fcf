package e2e

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ecs"
	"github.com/aws/aws-sdk-go-v2/service/ecs/types"

	"github.com/capstanhq/capstan/internal/server"
	"github.com/capstanhq/capstan/internal/testenv"
)

// newManagedFleet is a fleet whose server provisions local instances.
func newManagedFleet(t *testing.T) *fleet {
	t.Helper()
	rt := testenv.RequireDocker(t)
	bin := testenv.CapstanBinary(t)
	srv := testenv.StartServerWith(t, func(c *server.Config) {
		c.Provisioner, c.AgentBinary = "local", bin
		c.AgentEnv = map[string]string{"ECS_IMAGE_PULL_BEHAVIOR": "prefer-cached", "ECS_CONTAINER_STOP_TIMEOUT": "5s"}
	})
	f := &fleet{t: t, srv: srv, c: srv.ECS(), rt: rt, image: testenv.BusyboxImage(t), cluster: "managed"}
	if _, err := f.c.CreateCluster(context.Background(), &ecs.CreateClusterInput{ClusterName: aws.String(f.cluster)}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// Instances are processes of this test: terminate what is left.
		dir := filepath.Join(srv.Config.DataDir, "instances")
		entries, _ := os.ReadDir(dir)
		for _, e := range entries {
			if b, err := os.ReadFile(filepath.Join(dir, e.Name(), "pid")); err == nil {
				killPid(string(b))
			}
		}
	})
	return f
}

func (f *fleet) managedCapacityProvider(name string, scaleInAfter int32) string {
	f.t.Helper()
	out, err := f.c.CreateCapacityProvider(context.Background(), &ecs.CreateCapacityProviderInput{Name: aws.String(name), Cluster: aws.String(f.cluster),
		ManagedInstancesProvider: &types.CreateManagedInstancesProviderConfiguration{
			InfrastructureRoleArn: aws.String("arn:aws:iam::123456789012:role/capstan"),
			InfrastructureOptimization: &types.InfrastructureOptimization{ScaleInAfter: aws.Int32(scaleInAfter)},
			InstanceLaunchTemplate: &types.InstanceLaunchTemplate{Ec2InstanceProfileArn: aws.String("arn:aws:iam::123456789012:instance-profile/capstan"),
				NetworkConfiguration: &types.ManagedInstancesNetworkConfiguration{Subnets: []string{"local"}},
				InstanceRequirements: &types.InstanceRequirementsRequest{VCpuCount: &types.VCpuCountRangeRequest{Min: aws.Int32(1)},
					MemoryMiB: &types.MemoryMiBRequest{Min: aws.Int32(1024)}}}}})
	if err != nil {
		f.t.Fatal(err)
	}
	return aws.ToString(out.CapacityProvider.CapacityProviderArn)
}

// TestManagedInstanceLifecycle: RunTask on an empty managed-instances
// capacity provider provisions an instance; its critical daemon starts
// before the task; once idle the instance is scaled in and terminated with
// nothing left behind.
func TestManagedInstanceLifecycle(t *testing.T) {
	ctx := context.Background()
	f := newManagedFleet(t)
	cp := f.managedCapacityProvider("auto", 3)
	f.daemon("agentd", cp, true, "sh", "-c", "trap 'exit 0' TERM; while true; do sleep 1; done")
	td := f.register("job", f.container("job", "sh", "-c", "trap 'exit 0' TERM; while true; do sleep 1; done"))
	out, err := f.c.RunTask(ctx, &ecs.RunTaskInput{Cluster: aws.String(f.cluster), TaskDefinition: aws.String(td),
		CapacityProviderStrategy: []types.CapacityProviderStrategyItem{{CapacityProvider: aws.String("auto")}}})
	if err != nil || len(out.Tasks) != 1 {
		t.Fatalf("run on an empty capacity provider: %+v %v", out, err)
	}
	if s := aws.ToString(out.Tasks[0].LastStatus); s != "PROVISIONING" {
		t.Fatalf("task waiting for capacity is %s", s)
	}
	arn := aws.ToString(out.Tasks[0].TaskArn)
	app := f.waitStatus(arn, "RUNNING", 120*time.Second)
	inst := aws.ToString(app.ContainerInstanceArn)
	ci := f.instance(inst)
	if aws.ToString(ci.CapacityProviderName) != "auto" || aws.ToString(ci.Status) != "ACTIVE" {
		t.Fatalf("instance: %+v", ci)
	}
	dts := f.daemonTasks("agentd", "RUNNING")
	if len(dts) != 1 || aws.ToString(dts[0].ContainerInstanceArn) != inst || !dts[0].StartedAt.Before(*app.StartedAt) {
		t.Fatalf("daemon tasks %+v, app started %v", dts, app.StartedAt)
	}
	if _, err := f.c.StopTask(ctx, &ecs.StopTaskInput{Cluster: aws.String(f.cluster), Task: aws.String(arn)}); err != nil {
		t.Fatal(err)
	}
	// Idle for scaleInAfter (3 s): drained, daemons last, deregistered, terminated.
	eventually(t, 90*time.Second, "idle instance scaled in", func() bool { return aws.ToString(f.instance(inst).Status) == "INACTIVE" })
	eventually(t, 60*time.Second, "terminated instance leaves no containers", func() bool {
		cs, err := f.rt.List(ctx, map[string]string{"com.capstan.instance": inst})
		return err == nil && len(cs) == 0
	})
}
