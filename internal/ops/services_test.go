package ops_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ecs"
	"github.com/aws/aws-sdk-go-v2/service/ecs/types"

	"github.com/capstanhq/capstan/internal/testenv"
)

// svcFixture is a cluster with a task definition and no instances: the
// API side of services, and what the controller does without capacity.
type svcFixture struct {
	c   *ecs.Client
	td1 string
	td2 string
}

func newSvcFixture(t *testing.T) *svcFixture {
	t.Helper()
	srv := testenv.StartServer(t, "")
	f := &svcFixture{c: srv.ECS()}
	if _, err := f.c.CreateCluster(context.Background(), &ecs.CreateClusterInput{ClusterName: aws.String("apps")}); err != nil {
		t.Fatal(err)
	}
	f.td1 = f.register(t)
	f.td2 = f.register(t)
	return f
}

func (f *svcFixture) register(t *testing.T) string {
	t.Helper()
	out, err := f.c.RegisterTaskDefinition(context.Background(), &ecs.RegisterTaskDefinitionInput{
		Family:               aws.String("web"),
		ContainerDefinitions: []types.ContainerDefinition{{Name: aws.String("web"), Image: aws.String("busybox"), Memory: aws.Int32(128)}},
	})
	if err != nil {
		t.Fatal(err)
	}
	return aws.ToString(out.TaskDefinition.TaskDefinitionArn)
}

func (f *svcFixture) create(t *testing.T, name string, mod func(*ecs.CreateServiceInput)) *types.Service {
	t.Helper()
	in := &ecs.CreateServiceInput{Cluster: aws.String("apps"), ServiceName: aws.String(name), TaskDefinition: aws.String(f.td1), DesiredCount: aws.Int32(0)}
	if mod != nil {
		mod(in)
	}
	out, err := f.c.CreateService(context.Background(), in)
	if err != nil {
		t.Fatalf("create service %s: %v", name, err)
	}
	return out.Service
}

func (f *svcFixture) describe(t *testing.T, name string) types.Service {
	t.Helper()
	out, err := f.c.DescribeServices(context.Background(), &ecs.DescribeServicesInput{Cluster: aws.String("apps"), Services: []string{name}})
	if err != nil || len(out.Services) != 1 {
		t.Fatalf("describe %s: %+v %v", name, out, err)
	}
	return out.Services[0]
}

func svcEventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(25 * time.Millisecond)
	}
}

func TestServiceCreateDescribeList(t *testing.T) {
	ctx := context.Background()
	f := newSvcFixture(t)
	s := f.create(t, "web", func(in *ecs.CreateServiceInput) {
		in.Tags = []types.Tag{{Key: aws.String("team"), Value: aws.String("shop")}}
		in.PlacementConstraints = []types.PlacementConstraint{{Type: types.PlacementConstraintTypeDistinctInstance}}
	})
	if got, want := aws.ToString(s.ServiceArn), "arn:aws:ecs:us-east-1:123456789012:service/apps/web"; got != want {
		t.Fatalf("arn %s, want %s", got, want)
	}
	dc := s.DeploymentConfiguration
	if aws.ToString(s.Status) != "ACTIVE" || s.LaunchType != types.LaunchTypeEc2 || s.SchedulingStrategy != types.SchedulingStrategyReplica ||
		aws.ToInt32(dc.MinimumHealthyPercent) != 100 || aws.ToInt32(dc.MaximumPercent) != 200 || aws.ToString(s.TaskDefinition) != f.td1 {
		t.Fatalf("service: %+v", s)
	}
	if len(s.Deployments) != 1 || aws.ToString(s.Deployments[0].Status) != "PRIMARY" || !strings.HasPrefix(aws.ToString(s.Deployments[0].Id), "ecs-svc/") ||
		s.Deployments[0].RolloutState != types.DeploymentRolloutStateInProgress {
		t.Fatalf("deployments: %+v", s.Deployments)
	}
	// Nothing to run: the controller completes the rollout at once.
	svcEventually(t, "rollout COMPLETED", func() bool {
		d := f.describe(t, "web")
		return d.Deployments[0].RolloutState == types.DeploymentRolloutStateCompleted
	})
	d := f.describe(t, "web")
	if d.Tags != nil || len(d.PlacementConstraints) != 1 || len(d.Events) == 0 || !strings.Contains(aws.ToString(d.Events[0].Message), "(service web) has reached a steady state.") {
		t.Fatalf("describe without tags: tags %v constraints %v events %+v", d.Tags, d.PlacementConstraints, d.Events)
	}
	withTags, err := f.c.DescribeServices(ctx, &ecs.DescribeServicesInput{Cluster: aws.String("apps"), Services: []string{"web", "nope"},
		Include: []types.ServiceField{types.ServiceFieldTags}})
	if err != nil || len(withTags.Services) != 1 || len(withTags.Services[0].Tags) != 1 || len(withTags.Failures) != 1 ||
		aws.ToString(withTags.Failures[0].Reason) != "MISSING" || aws.ToString(withTags.Failures[0].Arn) != "arn:aws:ecs:us-east-1:123456789012:service/apps/nope" {
		t.Fatalf("describe with tags: %+v %v", withTags, err)
	}
	// A service ARN names its cluster: no cluster parameter is needed.
	byArn, err := f.c.DescribeServices(ctx, &ecs.DescribeServicesInput{Services: []string{aws.ToString(s.ServiceArn)}})
	if err != nil || len(byArn.Services) != 1 {
		t.Fatalf("describe by ARN: %+v %v", byArn, err)
	}

	f.create(t, "api", nil)
	f.create(t, "worker", nil)
	var all []string
	pages := 0
	p := ecs.NewListServicesPaginator(f.c, &ecs.ListServicesInput{Cluster: aws.String("apps"), MaxResults: aws.Int32(2)})
	for p.HasMorePages() {
		pg, err := p.NextPage(ctx)
		if err != nil {
			t.Fatal(err)
		}
		pages++
		all = append(all, pg.ServiceArns...)
	}
	if len(all) != 3 || pages != 2 {
		t.Fatalf("list: %v in %d pages", all, pages)
	}
	for lt, want := range map[types.LaunchType]int{types.LaunchTypeEc2: 3, types.LaunchTypeFargate: 0} {
		out, err := f.c.ListServices(ctx, &ecs.ListServicesInput{Cluster: aws.String("apps"), LaunchType: lt})
		if err != nil || len(out.ServiceArns) != want {
			t.Fatalf("list %s: %v %v", lt, out, err)
		}
	}
}

func TestServiceCreateRefusals(t *testing.T) {
	ctx := context.Background()
	f := newSvcFixture(t)
	cp := createCapacityProvider(t, f.c, "apps", "apps-mi")
	cases := []struct {
		name string
		mod  func(*ecs.CreateServiceInput)
		code string
	}{
		{"daemon strategy", func(in *ecs.CreateServiceInput) { in.SchedulingStrategy = types.SchedulingStrategyDaemon }, "UnsupportedFeatureException"},
		{"awsvpc configuration for a bridge definition", func(in *ecs.CreateServiceInput) {
			in.NetworkConfiguration = &types.NetworkConfiguration{AwsvpcConfiguration: &types.AwsVpcConfiguration{Subnets: []string{"subnet-1"}}}
		}, "InvalidParameterException"},
		{"load balancer", func(in *ecs.CreateServiceInput) {
			in.LoadBalancers = []types.LoadBalancer{{ContainerName: aws.String("web"), ContainerPort: aws.Int32(80), TargetGroupArn: aws.String("arn:aws:elasticloadbalancing:us-east-1:123456789012:targetgroup/x/1")}}
		}, "UnsupportedFeatureException"},
		{"service registry", func(in *ecs.CreateServiceInput) {
			in.ServiceRegistries = []types.ServiceRegistry{{RegistryArn: aws.String("arn:aws:servicediscovery:us-east-1:123456789012:service/srv-1")}}
		}, "UnsupportedFeatureException"},
		{"fargate with a definition Fargate cannot run", func(in *ecs.CreateServiceInput) { in.LaunchType = types.LaunchTypeFargate }, "InvalidParameterException"},
		{"external launch type", func(in *ecs.CreateServiceInput) { in.LaunchType = types.LaunchTypeExternal }, "UnsupportedFeatureException"},
		{"circuit breaker", func(in *ecs.CreateServiceInput) {
			in.DeploymentConfiguration = &types.DeploymentConfiguration{DeploymentCircuitBreaker: &types.DeploymentCircuitBreaker{Enable: true, Rollback: true}}
		}, "UnsupportedFeatureException"},
		{"launch type and strategy", func(in *ecs.CreateServiceInput) {
			in.LaunchType = types.LaunchTypeEc2
			in.CapacityProviderStrategy = []types.CapacityProviderStrategyItem{{CapacityProvider: aws.String("apps-mi")}}
		}, "InvalidParameterException"},
		{"unknown capacity provider", func(in *ecs.CreateServiceInput) {
			in.CapacityProviderStrategy = []types.CapacityProviderStrategyItem{{CapacityProvider: aws.String("nope")}}
		}, "InvalidParameterException"},
		{"minimum above 100", func(in *ecs.CreateServiceInput) {
			in.DeploymentConfiguration = &types.DeploymentConfiguration{MinimumHealthyPercent: aws.Int32(150)}
		}, "InvalidParameterException"},
		{"maximum below 100", func(in *ecs.CreateServiceInput) {
			in.DeploymentConfiguration = &types.DeploymentConfiguration{MaximumPercent: aws.Int32(50)}
		}, "InvalidParameterException"},
		{"negative desired", func(in *ecs.CreateServiceInput) { in.DesiredCount = aws.Int32(-1) }, "InvalidParameterException"},
		{"no desired count", func(in *ecs.CreateServiceInput) { in.DesiredCount = nil }, "InvalidParameterException"},
		{"bad placement", func(in *ecs.CreateServiceInput) {
			in.PlacementStrategy = []types.PlacementStrategy{{Type: types.PlacementStrategyTypeBinpack, Field: aws.String("disk")}}
		}, "InvalidParameterException"},
		{"bad name", func(in *ecs.CreateServiceInput) { in.ServiceName = aws.String("no spaces") }, "InvalidParameterException"},
		{"unknown task definition", func(in *ecs.CreateServiceInput) { in.TaskDefinition = aws.String("nothing:1") }, "ClientException"},
		{"unknown cluster", func(in *ecs.CreateServiceInput) { in.Cluster = aws.String("nowhere") }, "ClusterNotFoundException"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			in := &ecs.CreateServiceInput{Cluster: aws.String("apps"), ServiceName: aws.String("web"), TaskDefinition: aws.String(f.td1), DesiredCount: aws.Int32(1)}
			tc.mod(in)
			_, err := f.c.CreateService(ctx, in)
			if code := apiCode(t, err); code != tc.code {
				t.Fatalf("got %s (%v), want %s", code, err, tc.code)
			}
		})
	}
	out, err := f.c.ListServices(ctx, &ecs.ListServicesInput{Cluster: aws.String("apps")})
	if err != nil || len(out.ServiceArns) != 0 {
		t.Fatalf("a refused create left a service: %v %v", out, err)
	}

	// A managed-instances capacity provider of the cluster is recorded.
	s := f.create(t, "mi", func(in *ecs.CreateServiceInput) {
		in.CapacityProviderStrategy = []types.CapacityProviderStrategyItem{{CapacityProvider: aws.String(cp), Weight: 1}}
	})
	if s.LaunchType != "" || len(s.CapacityProviderStrategy) != 1 || aws.ToString(s.CapacityProviderStrategy[0].CapacityProvider) != "apps-mi" ||
		len(s.Deployments[0].CapacityProviderStrategy) != 1 {
		t.Fatalf("strategy: launchType %q %+v", s.LaunchType, s.CapacityProviderStrategy)
	}
}

func TestServiceCreateIdempotency(t *testing.T) {
	ctx := context.Background()
	f := newSvcFixture(t)
	tok := func(in *ecs.CreateServiceInput) { in.ClientToken = aws.String("token-1") }
	a := f.create(t, "web", tok)
	b := f.create(t, "web", tok)
	if aws.ToString(a.Deployments[0].Id) != aws.ToString(b.Deployments[0].Id) {
		t.Fatalf("a retried create made a new deployment: %s then %s", aws.ToString(a.Deployments[0].Id), aws.ToString(b.Deployments[0].Id))
	}
	_, err := f.c.CreateService(ctx, &ecs.CreateServiceInput{Cluster: aws.String("apps"), ServiceName: aws.String("web"),
		TaskDefinition: aws.String(f.td1), DesiredCount: aws.Int32(5), ClientToken: aws.String("token-1")})
	if code := apiCode(t, err); code != "InvalidParameterException" {
		t.Fatalf("same token, other input: %s", code)
	}
	_, err = f.c.CreateService(ctx, &ecs.CreateServiceInput{Cluster: aws.String("apps"), ServiceName: aws.String("web"),
		TaskDefinition: aws.String(f.td1), DesiredCount: aws.Int32(0)})
	if code := apiCode(t, err); code != "InvalidParameterException" {
		t.Fatalf("existing name: %s", code)
	}
}

func TestServiceUpdateAndDelete(t *testing.T) {
	ctx := context.Background()
	f := newSvcFixture(t)
	s := f.create(t, "web", nil)
	first := aws.ToString(s.Deployments[0].Id)

	up, err := f.c.UpdateService(ctx, &ecs.UpdateServiceInput{Cluster: aws.String("apps"), Service: aws.String("web"), DesiredCount: aws.Int32(3),
		DeploymentConfiguration: &types.DeploymentConfiguration{MinimumHealthyPercent: aws.Int32(50)}})
	if err != nil {
		t.Fatal(err)
	}
	dc := up.Service.DeploymentConfiguration
	if up.Service.DesiredCount != 3 || len(up.Service.Deployments) != 1 || up.Service.Deployments[0].DesiredCount != 3 ||
		aws.ToInt32(dc.MinimumHealthyPercent) != 50 || aws.ToInt32(dc.MaximumPercent) != 200 {
		t.Fatalf("scale: %+v", up.Service)
	}
	// No instances: the controller says why it cannot place.
	svcEventually(t, "placement failure event", func() bool {
		for _, e := range f.describe(t, "web").Events {
			if strings.Contains(aws.ToString(e.Message), "(service web) was unable to place a task because no container instance met all of its requirements. Reason: No Container Instances were found in your cluster.") {
				return true
			}
		}
		return false
	})

	up, err = f.c.UpdateService(ctx, &ecs.UpdateServiceInput{Cluster: aws.String("apps"), Service: aws.String("web"), TaskDefinition: aws.String(f.td2)})
	if err != nil {
		t.Fatal(err)
	}
	deps := up.Service.Deployments
	if len(deps) != 2 || aws.ToString(deps[0].Status) != "PRIMARY" || aws.ToString(deps[0].TaskDefinition) != f.td2 ||
		aws.ToString(deps[1].Status) != "ACTIVE" || aws.ToString(deps[1].Id) != first || aws.ToString(up.Service.TaskDefinition) != f.td2 {
		t.Fatalf("new deployment: %+v", deps)
	}
	// The old deployment has no tasks: it leaves the list.
	svcEventually(t, "old deployment gone", func() bool { return len(f.describe(t, "web").Deployments) == 1 })
	forced, err := f.c.UpdateService(ctx, &ecs.UpdateServiceInput{Cluster: aws.String("apps"), Service: aws.String("web"), ForceNewDeployment: true})
	if err != nil || aws.ToString(forced.Service.Deployments[0].Id) == aws.ToString(deps[0].Id) || aws.ToString(forced.Service.Deployments[0].TaskDefinition) != f.td2 {
		t.Fatalf("force new deployment: %+v %v", forced, err)
	}

	_, err = f.c.UpdateService(ctx, &ecs.UpdateServiceInput{Cluster: aws.String("apps"), Service: aws.String("nope"), DesiredCount: aws.Int32(1)})
	if code := apiCode(t, err); code != "ServiceNotFoundException" {
		t.Fatalf("update unknown: %s", code)
	}
	_, err = f.c.ListTasks(ctx, &ecs.ListTasksInput{Cluster: aws.String("apps"), ServiceName: aws.String("nope")})
	if code := apiCode(t, err); code != "ServiceNotFoundException" {
		t.Fatalf("list tasks of unknown service: %s", code)
	}
	if lt, err := f.c.ListTasks(ctx, &ecs.ListTasksInput{Cluster: aws.String("apps"), ServiceName: aws.String("web")}); err != nil || len(lt.TaskArns) != 0 {
		t.Fatalf("list tasks of web: %v %v", lt, err)
	}

	_, err = f.c.DeleteService(ctx, &ecs.DeleteServiceInput{Cluster: aws.String("apps"), Service: aws.String("web")})
	if code := apiCode(t, err); code != "InvalidParameterException" {
		t.Fatalf("delete while scaled up: %s", code)
	}
	del, err := f.c.DeleteService(ctx, &ecs.DeleteServiceInput{Cluster: aws.String("apps"), Service: aws.String("web"), Force: aws.Bool(true)})
	if err != nil || aws.ToString(del.Service.Status) != "DRAINING" || del.Service.DesiredCount != 0 {
		t.Fatalf("force delete: %+v %v", del, err)
	}
	_, err = f.c.UpdateService(ctx, &ecs.UpdateServiceInput{Cluster: aws.String("apps"), Service: aws.String("web"), DesiredCount: aws.Int32(1)})
	if code := apiCode(t, err); code != "ServiceNotActiveException" && code != "ServiceNotFoundException" {
		t.Fatalf("update while deleting: %s", code)
	}
	w := ecs.NewServicesInactiveWaiter(f.c, func(o *ecs.ServicesInactiveWaiterOptions) {
		o.MinDelay, o.MaxDelay = 50*time.Millisecond, 200*time.Millisecond
	})
	if err := w.Wait(ctx, &ecs.DescribeServicesInput{Cluster: aws.String("apps"), Services: []string{"web"}}, 20*time.Second); err != nil {
		t.Fatalf("services-inactive waiter: %v", err)
	}
	_, err = f.c.UpdateService(ctx, &ecs.UpdateServiceInput{Cluster: aws.String("apps"), Service: aws.String("web"), DesiredCount: aws.Int32(1)})
	if code := apiCode(t, err); code != "ServiceNotActiveException" {
		t.Fatalf("update inactive: %s", code)
	}
	_, err = f.c.DeleteService(ctx, &ecs.DeleteServiceInput{Cluster: aws.String("apps"), Service: aws.String("web")})
	if code := apiCode(t, err); code != "ServiceNotFoundException" {
		t.Fatalf("delete twice: %s", code)
	}
	if out, err := f.c.ListServices(ctx, &ecs.ListServicesInput{Cluster: aws.String("apps")}); err != nil || len(out.ServiceArns) != 0 {
		t.Fatalf("an inactive service is listed: %v %v", out, err)
	}
	// The name is free again, with a fresh history.
	again := f.create(t, "web", nil)
	if aws.ToString(again.Status) != "ACTIVE" || len(again.Events) != 0 {
		t.Fatalf("re-create: %+v", again)
	}
}
