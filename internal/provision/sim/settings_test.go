package sim_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/ecs"
	"github.com/aws/aws-sdk-go-v2/service/ecs/types"
	"github.com/aws/smithy-go"

	"github.com/capstanhq/capstan/internal/provision/agentenv"
	simprov "github.com/capstanhq/capstan/internal/provision/sim"
	"github.com/capstanhq/capstan/internal/server"
	"github.com/capstanhq/capstan/internal/testenv"
)

// A capacity provider's agent settings (capstan:agent-env: tags) reach the
// agent of an instance launched for it, over the server's --agent-env;
// Capstan's own settings stay; a setting the agent refuses is refused at
// CreateCapacityProvider and TagResource with nothing written.
func TestCapacityProviderAgentSettings(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	srv := testenv.StartServerWith(t, func(c *server.Config) {
		c.Provisioner = "sim"
		c.SimProvisionDelay = 50 * time.Millisecond
		c.NewSimProvisioner = simprov.Factory
		c.CheckAgentSettings = agentenv.Check // as capstan server gives it
		c.AgentEnv = map[string]string{"ECS_IMAGE_PULL_BEHAVIOR": "always", "ECS_CONTAINER_STOP_TIMEOUT": "40s"}
	})
	prov := srv.Provisioner.(*simprov.Provisioner)
	c := ecs.New(ecs.Options{Region: "us-east-1", BaseEndpoint: aws.String(srv.URL),
		Credentials: credentials.NewStaticCredentialsProvider(srv.Config.AdminKeyID, srv.Config.AdminSecret, "")})
	if _, err := c.CreateCluster(ctx, &ecs.CreateClusterInput{ClusterName: aws.String("sim")}); err != nil {
		t.Fatal(err)
	}
	create := func(name string, tags ...types.Tag) (*ecs.CreateCapacityProviderOutput, error) {
		return c.CreateCapacityProvider(ctx, &ecs.CreateCapacityProviderInput{Name: aws.String(name), Cluster: aws.String("sim"), Tags: tags,
			ManagedInstancesProvider: &types.CreateManagedInstancesProviderConfiguration{
				InfrastructureRoleArn: aws.String("arn:aws:iam::123456789012:role/capstan"),
				InstanceLaunchTemplate: &types.InstanceLaunchTemplate{Ec2InstanceProfileArn: aws.String("arn:aws:iam::123456789012:instance-profile/capstan"),
					NetworkConfiguration: &types.ManagedInstancesNetworkConfiguration{Subnets: []string{"sim"}},
					InstanceRequirements: &types.InstanceRequirementsRequest{VCpuCount: &types.VCpuCountRangeRequest{Min: aws.Int32(2)},
						MemoryMiB: &types.MemoryMiBRequest{Min: aws.Int32(2048)}}}}})
	}
	tag := func(k, v string) types.Tag { return types.Tag{Key: aws.String(k), Value: aws.String(v)} }
	refused := func(err error, want ...string) {
		t.Helper()
		var ae smithy.APIError
		if !errors.As(err, &ae) || ae.ErrorCode() != "InvalidParameterException" {
			t.Fatalf("want an InvalidParameterException, got %v", err)
		}
		for _, w := range want {
			if !strings.Contains(ae.ErrorMessage(), w) {
				t.Fatalf("message %q does not say %q", ae.ErrorMessage(), w)
			}
		}
	}

	_, err := create("bad", tag("team", "a"), tag("capstan:agent-env:ECS_IMAGE_PULL_BEHAVIOR", "sometimes"))
	refused(err, "tags[1]", "ECS_IMAGE_PULL_BEHAVIOR", "sometimes")
	_, err = create("bad", tag("capstan:agent-env:ECS_CLUSTER", "other"))
	refused(err, "tags[0].key", "ECS_CLUSTER", "cannot be changed")
	out, err := c.DescribeCapacityProviders(ctx, &ecs.DescribeCapacityProvidersInput{CapacityProviders: []string{"bad"}})
	if err != nil || len(out.CapacityProviders) != 0 {
		t.Fatalf("a refused capacity provider was written: %+v %v", out, err)
	}

	cp, err := create("hollow", tag("capstan:agent-env:ECS_IMAGE_PULL_BEHAVIOR", "prefer-cached"))
	if err != nil {
		t.Fatal(err)
	}
	arn := cp.CapacityProvider.CapacityProviderArn
	_, err = c.TagResource(ctx, &ecs.TagResourceInput{ResourceArn: arn, Tags: []types.Tag{tag("capstan:agent-env:ECS_LOGLEVEL", "debug"),
		tag("capstan:agent-env:ECS_NO_SUCH_THING", "1")}})
	refused(err, "tags[1]", "ECS_NO_SUCH_THING", "does not know")
	tags, err := c.ListTagsForResource(ctx, &ecs.ListTagsForResourceInput{ResourceArn: arn})
	if err != nil || len(tags.Tags) != 1 {
		t.Fatalf("a refused TagResource changed the tags: %+v %v", tags, err)
	}
	if _, err := c.TagResource(ctx, &ecs.TagResourceInput{ResourceArn: arn, Tags: []types.Tag{tag("capstan:agent-env:ECS_LOGLEVEL", "debug")}}); err != nil {
		t.Fatal(err)
	}

	app, err := c.RegisterTaskDefinition(ctx, &ecs.RegisterTaskDefinitionInput{Family: aws.String("app"),
		ContainerDefinitions: []types.ContainerDefinition{{Name: aws.String("app"), Image: aws.String("example/app:1"), Memory: aws.Int32(256)}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.RunTask(ctx, &ecs.RunTaskInput{Cluster: aws.String("sim"), TaskDefinition: app.TaskDefinition.TaskDefinitionArn,
		CapacityProviderStrategy: []types.CapacityProviderStrategyItem{{CapacityProvider: aws.String("hollow")}}}); err != nil {
		t.Fatal(err)
	}
	var env map[string]string
	eventually(t, "an instance launched", 90*time.Second, func() (bool, error) {
		hs := prov.Handles()
		if len(hs) == 0 {
			return false, nil
		}
		env, _ = prov.Env(hs[0])
		return true, nil
	})
	for k, want := range map[string]string{
		"ECS_IMAGE_PULL_BEHAVIOR":    "prefer-cached", // the provider's wins over the server's
		"ECS_CONTAINER_STOP_TIMEOUT": "40s",           // the server's
		"ECS_LOGLEVEL":               "debug",         // tagged later, before the launch
		"ECS_CLUSTER":                "sim",
		"ECS_DISABLE_PRIVILEGED":     "true",
	} {
		if env[k] != want {
			t.Errorf("agent env %s=%q, want %q", k, env[k], want)
		}
	}
}
