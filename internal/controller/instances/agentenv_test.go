package instances_test

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ecs"
	"github.com/aws/aws-sdk-go-v2/service/ecs/types"

	"github.com/capstanhq/capstan/internal/provision/local"
	"github.com/capstanhq/capstan/internal/server"
	"github.com/capstanhq/capstan/internal/testenv"
)

// A setting the server is given for its agents (capstan server
// --agent-env) reaches the agent process a local instance runs.
func TestAgentEnvReachesProvisionedAgent(t *testing.T) {
	rt := testenv.RequireDocker(t)
	bin := testenv.CapstanBinary(t)
	srv := testenv.StartServerWith(t, func(c *server.Config) {
		c.Provisioner, c.AgentBinary = "local", bin
		c.AgentEnv = map[string]string{"ECS_IMAGE_PULL_BEHAVIOR": "prefer-cached"}
	})
	dir := filepath.Join(srv.Config.DataDir, "instances")
	t.Cleanup(func() {
		srv.Stop()
		p, err := local.New(bin, dir, rt, slog.New(slog.DiscardHandler))
		if err != nil {
			return
		}
		handles, _ := p.Handles()
		for _, h := range handles {
			p.Terminate(context.Background(), h)
		}
	})
	c := srv.ECS()
	ctx := context.Background()
	if _, err := c.CreateCluster(ctx, &ecs.CreateClusterInput{ClusterName: aws.String("env")}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.CreateCapacityProvider(ctx, &ecs.CreateCapacityProviderInput{Name: aws.String("mi"), Cluster: aws.String("env"),
		ManagedInstancesProvider: &types.CreateManagedInstancesProviderConfiguration{
			InfrastructureRoleArn: aws.String("arn:aws:iam::123456789012:role/capstan"),
			InstanceLaunchTemplate: &types.InstanceLaunchTemplate{Ec2InstanceProfileArn: aws.String("arn:aws:iam::123456789012:instance-profile/capstan"),
				NetworkConfiguration: &types.ManagedInstancesNetworkConfiguration{Subnets: []string{"local"}},
				InstanceRequirements: &types.InstanceRequirementsRequest{VCpuCount: &types.VCpuCountRangeRequest{Min: aws.Int32(1)},
					MemoryMiB: &types.MemoryMiBRequest{Min: aws.Int32(1024)}}}}}); err != nil {
		t.Fatal(err)
	}
	td, err := c.RegisterTaskDefinition(ctx, &ecs.RegisterTaskDefinitionInput{Family: aws.String("job"),
		ContainerDefinitions: []types.ContainerDefinition{{Name: aws.String("job"), Image: aws.String(testenv.BusyboxImage(t)),
			Memory: aws.Int32(32), Command: []string{"sleep", "30"}}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.RunTask(ctx, &ecs.RunTaskInput{Cluster: aws.String("env"), TaskDefinition: td.TaskDefinition.TaskDefinitionArn,
		CapacityProviderStrategy: []types.CapacityProviderStrategyItem{{CapacityProvider: aws.String("mi")}}}); err != nil {
		t.Fatal(err)
	}
	// The agent process's environment, read from /proc while it runs.
	deadline := time.Now().Add(90 * time.Second)
	for {
		pids, _ := filepath.Glob(filepath.Join(dir, "*", "pid"))
		for _, p := range pids {
			pid, _ := os.ReadFile(p)
			env, _ := os.ReadFile(filepath.Join("/proc", strings.TrimSpace(string(pid)), "environ"))
			if slices.Contains(strings.Split(string(env), "\x00"), "ECS_IMAGE_PULL_BEHAVIOR=prefer-cached") {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no provisioned agent runs with ECS_IMAGE_PULL_BEHAVIOR=prefer-cached (instances: %v)", pids)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
