package sim_test

import (
	"context"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/ecs"
	"github.com/aws/aws-sdk-go-v2/service/ecs/types"

	simprov "github.com/capstanhq/capstan/internal/provision/sim"
	"github.com/capstanhq/capstan/internal/server"
	"github.com/capstanhq/capstan/internal/testenv"
)

// eventually polls cond every 100ms until it holds or timeout passes.
func eventually(t *testing.T, what string, timeout time.Duration, cond func() (bool, error)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ok, err := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s (last error: %v)", timeout, what, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// A task on a managed capacity provider gets a hollow instance from the
// sim provisioner: the real agent registers with its own credential,
// starts the critical daemon, then the task. Killing the instance makes
// the server retire it, and the provisioner forgets it.
func TestHollowInstanceLifecycle(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	srv := testenv.StartServerWith(t, func(c *server.Config) {
		c.Provisioner = "sim"
		c.SimProvisionDelay = 50 * time.Millisecond
		c.NewSimProvisioner = simprov.Factory
	})
	prov, ok := srv.Provisioner.(*simprov.Provisioner)
	if !ok {
		t.Fatalf("provisioner is %T", srv.Provisioner)
	}
	c := ecs.New(ecs.Options{Region: "us-east-1", BaseEndpoint: aws.String(srv.URL),
		Credentials: credentials.NewStaticCredentialsProvider(srv.Config.AdminKeyID, srv.Config.AdminSecret, "")})

	if _, err := c.CreateCluster(ctx, &ecs.CreateClusterInput{ClusterName: aws.String("sim")}); err != nil {
		t.Fatal(err)
	}
	cp, err := c.CreateCapacityProvider(ctx, &ecs.CreateCapacityProviderInput{Name: aws.String("hollow"), Cluster: aws.String("sim"),
		ManagedInstancesProvider: &types.CreateManagedInstancesProviderConfiguration{
			InfrastructureRoleArn: aws.String("arn:aws:iam::123456789012:role/capstan"),
			InstanceLaunchTemplate: &types.InstanceLaunchTemplate{Ec2InstanceProfileArn: aws.String("arn:aws:iam::123456789012:instance-profile/capstan"),
				NetworkConfiguration: &types.ManagedInstancesNetworkConfiguration{Subnets: []string{"sim"}},
				InstanceRequirements: &types.InstanceRequirementsRequest{VCpuCount: &types.VCpuCountRangeRequest{Min: aws.Int32(2)},
					MemoryMiB: &types.MemoryMiBRequest{Min: aws.Int32(2048)}}}}})
	if err != nil {
		t.Fatal(err)
	}
	td, err := c.RegisterDaemonTaskDefinition(ctx, &ecs.RegisterDaemonTaskDefinitionInput{Family: aws.String("agent"),
		ContainerDefinitions: []types.DaemonContainerDefinition{{Name: aws.String("agent"), Image: aws.String("example/agent:1"), Memory: aws.Int32(64)}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.CreateDaemon(ctx, &ecs.CreateDaemonInput{DaemonName: aws.String("agent"), ClusterArn: aws.String("sim"),
		DaemonTaskDefinitionArn: td.DaemonTaskDefinitionArn, CapacityProviderArns: []string{aws.ToString(cp.CapacityProvider.CapacityProviderArn)},
		Critical: aws.Bool(true)}); err != nil {
		t.Fatal(err)
	}
	app, err := c.RegisterTaskDefinition(ctx, &ecs.RegisterTaskDefinitionInput{Family: aws.String("app"),
		ContainerDefinitions: []types.ContainerDefinition{{Name: aws.String("app"), Image: aws.String("example/app:1"), Memory: aws.Int32(256)}}})
	if err != nil {
		t.Fatal(err)
	}
	run, err := c.RunTask(ctx, &ecs.RunTaskInput{Cluster: aws.String("sim"), TaskDefinition: app.TaskDefinition.TaskDefinitionArn,
		CapacityProviderStrategy: []types.CapacityProviderStrategyItem{{CapacityProvider: aws.String("hollow")}}})
	if err != nil || len(run.Tasks) != 1 {
		t.Fatalf("run task: %v %v", run, err)
	}
	taskArn := aws.ToString(run.Tasks[0].TaskArn)
	var task types.Task
	eventually(t, "the app task RUNNING on a hollow instance", 90*time.Second, func() (bool, error) {
		out, err := c.DescribeTasks(ctx, &ecs.DescribeTasksInput{Cluster: aws.String("sim"), Tasks: []string{taskArn}})
		if err != nil || len(out.Tasks) != 1 {
			return false, err
		}
		task = out.Tasks[0]
		return aws.ToString(task.LastStatus) == "RUNNING", nil
	})
	handles := prov.Handles()
	if len(handles) != 1 {
		t.Fatalf("provisioner has %d instances, want 1", len(handles))
	}
	h := handles[0]
	if got := prov.InstanceArn(h); got != aws.ToString(task.ContainerInstanceArn) {
		t.Fatalf("hollow instance registered as %q, task runs on %q", got, aws.ToString(task.ContainerInstanceArn))
	}
	ci, err := c.DescribeContainerInstances(ctx, &ecs.DescribeContainerInstancesInput{Cluster: aws.String("sim"),
		ContainerInstances: []string{prov.InstanceArn(h)}})
	if err != nil || len(ci.ContainerInstances) != 1 {
		t.Fatalf("describe instance: %v", err)
	}
	inst := ci.ContainerInstances[0]
	if aws.ToString(inst.Status) != "ACTIVE" || !inst.AgentConnected || aws.ToString(inst.CapacityProviderName) != "hollow" {
		t.Fatalf("instance %s status %s connected %v provider %s", aws.ToString(inst.ContainerInstanceArn), aws.ToString(inst.Status),
			inst.AgentConnected, aws.ToString(inst.CapacityProviderName))
	}
	// The daemon and the app run as simulated containers on that host.
	rt, _ := prov.Runtime(h)
	cs, err := rt.List(ctx, map[string]string{"com.capstan.instance": prov.InstanceArn(h)})
	if err != nil {
		t.Fatal(err)
	}
	running := map[string]bool{}
	for _, ct := range cs {
		if ct.State == "running" {
			running[ct.Image] = true
		}
	}
	if !running["example/agent:1"] || !running["example/app:1"] || !running["capstan/pause:sim"] {
		t.Fatalf("running images on the host: %v", running)
	}

	if err := prov.Kill(h); err != nil {
		t.Fatal(err)
	}
	if alive, _ := prov.Alive(ctx, h); alive {
		t.Fatal("a killed instance is alive")
	}
	eventually(t, "the killed instance retired and forgotten", 90*time.Second, func() (bool, error) {
		out, err := c.DescribeContainerInstances(ctx, &ecs.DescribeContainerInstancesInput{Cluster: aws.String("sim"),
			ContainerInstances: []string{aws.ToString(inst.ContainerInstanceArn)}})
		if err != nil || len(out.ContainerInstances) != 1 {
			return false, err
		}
		_, known := prov.Runtime(h)
		return aws.ToString(out.ContainerInstances[0].Status) == "INACTIVE" && !known, nil
	})
}
