package ops_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ecs"
	"github.com/aws/aws-sdk-go-v2/service/ecs/types"

	"github.com/capstanhq/capstan/internal/testenv"
)

// daemonFixture is a cluster with a managed-instances capacity provider and
// a registered daemon task definition.
type daemonFixture struct {
	srv     *testenv.Server
	c       *ecs.Client
	cluster string
	cp      string
	td      string
}

func newDaemonFixture(t *testing.T) *daemonFixture {
	t.Helper()
	ctx := context.Background()
	srv := testenv.StartServer(t, "")
	f := &daemonFixture{srv: srv, c: srv.ECS()}
	cl, err := f.c.CreateCluster(ctx, &ecs.CreateClusterInput{ClusterName: aws.String("fleet")})
	if err != nil {
		t.Fatal(err)
	}
	f.cluster = aws.ToString(cl.Cluster.ClusterArn)
	f.cp = createCapacityProvider(t, f.c, "fleet", "fleet-mi")
	f.td = registerDaemonTD(t, f.c, "monitoring-agent")
	return f
}

func createCapacityProvider(t *testing.T, c *ecs.Client, cluster, name string) string {
	t.Helper()
	out, err := c.CreateCapacityProvider(context.Background(), &ecs.CreateCapacityProviderInput{
		Name:    aws.String(name),
		Cluster: aws.String(cluster),
		ManagedInstancesProvider: &types.CreateManagedInstancesProviderConfiguration{
			InfrastructureRoleArn: aws.String("arn:aws:iam::123456789012:role/capstan"),
			InstanceLaunchTemplate: &types.InstanceLaunchTemplate{
				Ec2InstanceProfileArn: aws.String("arn:aws:iam::123456789012:instance-profile/capstan"),
				NetworkConfiguration:  &types.ManagedInstancesNetworkConfiguration{Subnets: []string{"subnet-local"}},
			},
		},
	})
	if err != nil {
		t.Fatalf("create capacity provider: %v", err)
	}
	return aws.ToString(out.CapacityProvider.CapacityProviderArn)
}

func registerDaemonTD(t *testing.T, c *ecs.Client, family string) string {
	t.Helper()
	out, err := c.RegisterDaemonTaskDefinition(context.Background(), &ecs.RegisterDaemonTaskDefinitionInput{
		Family: aws.String(family),
		Cpu:    aws.String("1024"),
		Memory: aws.String("512"),
		ContainerDefinitions: []types.DaemonContainerDefinition{{
			Name:       aws.String("agent"),
			Image:      aws.String("capstan/busybox:test"),
			Privileged: aws.Bool(true),
			MountPoints: []types.MountPoint{
				{SourceVolume: aws.String("proc"), ContainerPath: aws.String("/host/proc"), ReadOnly: aws.Bool(true)},
			},
		}},
		Volumes: []types.DaemonVolume{{Name: aws.String("proc"), Host: &types.HostVolumeProperties{SourcePath: aws.String("/proc")}}},
	})
	if err != nil {
		t.Fatalf("register daemon task definition: %v", err)
	}
	return aws.ToString(out.DaemonTaskDefinitionArn)
}

func (f *daemonFixture) create(t *testing.T, name string, mod func(*ecs.CreateDaemonInput)) *ecs.CreateDaemonOutput {
	t.Helper()
	in := &ecs.CreateDaemonInput{
		DaemonName:              aws.String(name),
		ClusterArn:              aws.String(f.cluster),
		DaemonTaskDefinitionArn: aws.String(f.td),
		CapacityProviderArns:    []string{f.cp},
	}
	if mod != nil {
		mod(in)
	}
	out, err := f.c.CreateDaemon(context.Background(), in)
	if err != nil {
		t.Fatalf("create daemon %s: %v", name, err)
	}
	return out
}

func (f *daemonFixture) waitSuccessful(t *testing.T, deploymentArn string) types.DaemonDeployment {
	t.Helper()
	w := ecs.NewDaemonDeploymentSuccessfulWaiter(f.c, func(o *ecs.DaemonDeploymentSuccessfulWaiterOptions) {
		o.MinDelay, o.MaxDelay = 50*time.Millisecond, 200*time.Millisecond
	})
	out, err := w.WaitForOutput(context.Background(), &ecs.DescribeDaemonDeploymentsInput{DaemonDeploymentArns: []string{deploymentArn}}, 30*time.Second)
	if err != nil {
		t.Fatalf("wait for %s: %v", deploymentArn, err)
	}
	return out.DaemonDeployments[0]
}

func TestCreateDaemonRecordsRevisionAndDeployment(t *testing.T) {
	ctx := context.Background()
	f := newDaemonFixture(t)
	out := f.create(t, "monitoring", func(in *ecs.CreateDaemonInput) {
		in.Tags = []types.Tag{{Key: aws.String("owner"), Value: aws.String("platform")}}
	})
	if got, want := aws.ToString(out.DaemonArn), "arn:aws:ecs:us-east-1:123456789012:daemon/fleet/monitoring"; got != want {
		t.Fatalf("daemon arn %s, want %s", got, want)
	}
	if out.Status != types.DaemonStatusActive || out.CreatedAt == nil {
		t.Fatalf("status %s createdAt %v", out.Status, out.CreatedAt)
	}
	if !strings.HasPrefix(aws.ToString(out.DeploymentArn), "arn:aws:ecs:us-east-1:123456789012:daemon-deployment/fleet/monitoring/") {
		t.Fatalf("deployment arn %s", aws.ToString(out.DeploymentArn))
	}

	dep := f.waitSuccessful(t, aws.ToString(out.DeploymentArn))
	if dep.StartedAt == nil || dep.FinishedAt == nil || dep.StoppedAt != nil {
		t.Fatalf("timestamps: started %v finished %v stopped %v", dep.StartedAt, dep.FinishedAt, dep.StoppedAt)
	}
	if aws.ToFloat64(dep.DeploymentConfiguration.DrainPercent) != 25 || dep.DeploymentConfiguration.BakeTimeInMinutes != 0 {
		t.Fatalf("default deployment configuration: %+v", dep.DeploymentConfiguration)
	}
	if dep.CircuitBreaker.Status != types.DaemonDeploymentRollbackMonitorsStatusMonitoringComplete || dep.CircuitBreaker.Threshold != 3 {
		t.Fatalf("circuit breaker: %+v", dep.CircuitBreaker)
	}
	if dep.Alarms.Status != types.DaemonDeploymentRollbackMonitorsStatusDisabled {
		t.Fatalf("alarms: %+v", dep.Alarms)
	}
	if len(dep.SourceDaemonRevisions) != 0 || dep.TargetDaemonRevision == nil || len(dep.TargetDaemonRevision.CapacityProviders) != 1 {
		t.Fatalf("revisions: target %+v sources %+v", dep.TargetDaemonRevision, dep.SourceDaemonRevisions)
	}
	revArn := aws.ToString(dep.TargetDaemonRevision.Arn)

	revs, err := f.c.DescribeDaemonRevisions(ctx, &ecs.DescribeDaemonRevisionsInput{DaemonRevisionArns: []string{revArn, revArn + "0"}})
	if err != nil {
		t.Fatal(err)
	}
	if len(revs.DaemonRevisions) != 1 || len(revs.Failures) != 1 || aws.ToString(revs.Failures[0].Reason) != "MISSING" {
		t.Fatalf("describe revisions: %+v", revs)
	}
	r := revs.DaemonRevisions[0]
	if !aws.ToBool(r.Critical) || r.PropagateTags != types.DaemonPropagateTagsNone || aws.ToString(r.DaemonTaskDefinitionArn) != f.td {
		t.Fatalf("revision: %+v", r)
	}
	if len(r.ContainerImages) != 1 || aws.ToString(r.ContainerImages[0].Image) != "capstan/busybox:test" {
		t.Fatalf("container images: %+v", r.ContainerImages)
	}

	d, err := f.c.DescribeDaemon(ctx, &ecs.DescribeDaemonInput{DaemonArn: out.DaemonArn})
	if err != nil {
		t.Fatal(err)
	}
	if len(d.Daemon.CurrentRevisions) != 1 || aws.ToString(d.Daemon.CurrentRevisions[0].Arn) != revArn ||
		aws.ToString(d.Daemon.DeploymentArn) != aws.ToString(out.DeploymentArn) {
		t.Fatalf("describe daemon: %+v", d.Daemon)
	}
	tags, err := f.c.ListTagsForResource(ctx, &ecs.ListTagsForResourceInput{ResourceArn: out.DaemonArn})
	if err != nil || len(tags.Tags) != 1 {
		t.Fatalf("tags: %+v %v", tags, err)
	}

	// State survives a restart.
	f.srv = f.srv.Restart(t)
	f.c = f.srv.ECS()
	if _, err := f.c.DescribeDaemon(ctx, &ecs.DescribeDaemonInput{DaemonArn: out.DaemonArn}); err != nil {
		t.Fatalf("after restart: %v", err)
	}
}

func TestCreateDaemonIdempotencyAndValidation(t *testing.T) {
	ctx := context.Background()
	f := newDaemonFixture(t)
	first := f.create(t, "logs", func(in *ecs.CreateDaemonInput) { in.ClientToken = aws.String("tok-1") })
	again := f.create(t, "logs", func(in *ecs.CreateDaemonInput) { in.ClientToken = aws.String("tok-1") })
	if aws.ToString(first.DeploymentArn) != aws.ToString(again.DeploymentArn) {
		t.Fatalf("idempotent create started a second deployment: %s vs %s", aws.ToString(first.DeploymentArn), aws.ToString(again.DeploymentArn))
	}

	other := createCapacityProvider(t, f.c, "fleet", "other-mi")
	_, err := f.c.CreateCluster(ctx, &ecs.CreateClusterInput{ClusterName: aws.String("elsewhere")})
	if err != nil {
		t.Fatal(err)
	}
	foreign := createCapacityProvider(t, f.c, "elsewhere", "foreign-mi")

	cases := []struct {
		name   string
		mod    func(*ecs.CreateDaemonInput)
		code   string
		inText string
	}{
		{"same token other input", func(in *ecs.CreateDaemonInput) {
			in.DaemonName = aws.String("logs")
			in.ClientToken = aws.String("tok-1")
			in.CapacityProviderArns = []string{f.cp, other}
		}, "InvalidParameterException", "clientToken"},
		{"duplicate name", func(in *ecs.CreateDaemonInput) { in.DaemonName = aws.String("logs") }, "InvalidParameterException", "already exists"},
		{"bad name", func(in *ecs.CreateDaemonInput) { in.DaemonName = aws.String("no spaces") }, "InvalidParameterException", "daemonName"},
		{"unknown cluster", func(in *ecs.CreateDaemonInput) { in.ClusterArn = aws.String("nope") }, "ClusterNotFoundException", "Cluster not found."},
		{"foreign capacity provider", func(in *ecs.CreateDaemonInput) { in.CapacityProviderArns = []string{foreign} }, "InvalidParameterException", "capacityProviderArns[0]"},
		{"unknown capacity provider", func(in *ecs.CreateDaemonInput) { in.CapacityProviderArns = []string{"ghost"} }, "InvalidParameterException", "ghost"},
		{"duplicate capacity provider", func(in *ecs.CreateDaemonInput) { in.CapacityProviderArns = []string{f.cp, f.cp} }, "InvalidParameterException", "twice"},
		{"unknown task definition", func(in *ecs.CreateDaemonInput) { in.DaemonTaskDefinitionArn = aws.String("ghost:1") }, "ClientException", "daemonTaskDefinitionArn"},
		{"drain above 100", func(in *ecs.CreateDaemonInput) {
			in.DeploymentConfiguration = &types.DaemonDeploymentConfiguration{DrainPercent: aws.Float64(101)}
		}, "InvalidParameterException", "drainPercent"},
		{"bake too long", func(in *ecs.CreateDaemonInput) {
			in.DeploymentConfiguration = &types.DaemonDeploymentConfiguration{BakeTimeInMinutes: 1441}
		}, "InvalidParameterException", "bakeTimeInMinutes"},
		{"alarms without names", func(in *ecs.CreateDaemonInput) {
			in.DeploymentConfiguration = &types.DaemonDeploymentConfiguration{Alarms: &types.DaemonAlarmConfiguration{Enable: true}}
		}, "InvalidParameterException", "alarmNames"},
		{"long client token", func(in *ecs.CreateDaemonInput) { in.ClientToken = aws.String(strings.Repeat("x", 37)) }, "InvalidParameterException", "clientToken"},
		{"reserved tag", func(in *ecs.CreateDaemonInput) {
			in.Tags = []types.Tag{{Key: aws.String("aws:owner"), Value: aws.String("x")}}
		}, "InvalidParameterException", "tags"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			in := &ecs.CreateDaemonInput{DaemonName: aws.String("fresh"), ClusterArn: aws.String(f.cluster),
				DaemonTaskDefinitionArn: aws.String(f.td), CapacityProviderArns: []string{f.cp}}
			tc.mod(in)
			_, err := f.c.CreateDaemon(ctx, in)
			if code := apiCode(t, err); code != tc.code || !strings.Contains(err.Error(), tc.inText) {
				t.Fatalf("got %s (%v), want %s mentioning %q", code, err, tc.code, tc.inText)
			}
		})
	}
	// Nothing was half-written by the refused calls.
	list, err := f.c.ListDaemons(ctx, &ecs.ListDaemonsInput{ClusterArn: aws.String(f.cluster)})
	if err != nil || len(list.DaemonSummariesList) != 1 {
		t.Fatalf("daemons after refusals: %+v %v", list, err)
	}
}

func TestUpdateDaemonIsFullReplacement(t *testing.T) {
	ctx := context.Background()
	f := newDaemonFixture(t)
	created := f.create(t, "tracing", func(in *ecs.CreateDaemonInput) {
		in.Critical = aws.Bool(false)
		in.PropagateTags = types.DaemonPropagateTagsDaemon
		in.DeploymentConfiguration = &types.DaemonDeploymentConfiguration{DrainPercent: aws.Float64(50), BakeTimeInMinutes: 5}
	})
	first := f.waitSuccessful(t, aws.ToString(created.DeploymentArn))
	td2 := registerDaemonTD(t, f.c, "monitoring-agent")
	up, err := f.c.UpdateDaemon(ctx, &ecs.UpdateDaemonInput{DaemonArn: created.DaemonArn, DaemonTaskDefinitionArn: aws.String(td2), CapacityProviderArns: []string{f.cp}})
	if err != nil {
		t.Fatal(err)
	}
	if up.UpdatedAt == nil || aws.ToString(up.DeploymentArn) == aws.ToString(created.DeploymentArn) {
		t.Fatalf("update output: %+v", up)
	}
	dep := f.waitSuccessful(t, aws.ToString(up.DeploymentArn))
	if aws.ToFloat64(dep.DeploymentConfiguration.DrainPercent) != 25 || dep.DeploymentConfiguration.BakeTimeInMinutes != 0 {
		t.Fatalf("omitted deployment configuration must return to defaults: %+v", dep.DeploymentConfiguration)
	}
	if len(dep.SourceDaemonRevisions) != 1 || aws.ToString(dep.SourceDaemonRevisions[0].Arn) != aws.ToString(first.TargetDaemonRevision.Arn) {
		t.Fatalf("sources: %+v", dep.SourceDaemonRevisions)
	}
	revs, err := f.c.DescribeDaemonRevisions(ctx, &ecs.DescribeDaemonRevisionsInput{DaemonRevisionArns: []string{aws.ToString(dep.TargetDaemonRevision.Arn)}})
	if err != nil {
		t.Fatal(err)
	}
	r := revs.DaemonRevisions[0]
	if !aws.ToBool(r.Critical) || r.PropagateTags != types.DaemonPropagateTagsNone || aws.ToString(r.DaemonTaskDefinitionArn) != td2 {
		t.Fatalf("omitted critical/propagateTags must return to defaults: %+v", r)
	}

	list, err := f.c.ListDaemonDeployments(ctx, &ecs.ListDaemonDeploymentsInput{DaemonArn: created.DaemonArn})
	if err != nil {
		t.Fatal(err)
	}
	if len(list.DaemonDeployments) != 2 || aws.ToString(list.DaemonDeployments[0].DaemonDeploymentArn) != aws.ToString(up.DeploymentArn) {
		t.Fatalf("deployments newest first: %+v", list.DaemonDeployments)
	}
	_, err = f.c.UpdateDaemon(ctx, &ecs.UpdateDaemonInput{DaemonArn: aws.String("arn:aws:ecs:us-east-1:123456789012:daemon/fleet/ghost"),
		DaemonTaskDefinitionArn: aws.String(td2), CapacityProviderArns: []string{f.cp}})
	if code := apiCode(t, err); code != "DaemonNotFoundException" {
		t.Fatalf("update unknown daemon: %s", code)
	}
}

func TestSupersededDeploymentsStop(t *testing.T) {
	ctx := context.Background()
	f := newDaemonFixture(t)
	created := f.create(t, "security", nil)
	var last string
	for range 5 {
		up, err := f.c.UpdateDaemon(ctx, &ecs.UpdateDaemonInput{DaemonArn: created.DaemonArn, DaemonTaskDefinitionArn: aws.String(f.td), CapacityProviderArns: []string{f.cp}})
		if err != nil {
			t.Fatal(err)
		}
		last = aws.ToString(up.DeploymentArn)
	}
	f.waitSuccessful(t, last)
	list, err := f.c.ListDaemonDeployments(ctx, &ecs.ListDaemonDeploymentsInput{DaemonArn: created.DaemonArn, MaxResults: aws.Int32(4)})
	if err != nil {
		t.Fatal(err)
	}
	if len(list.DaemonDeployments) != 4 || list.NextToken == nil {
		t.Fatalf("first page: %d, token %v", len(list.DaemonDeployments), list.NextToken)
	}
	rest, err := f.c.ListDaemonDeployments(ctx, &ecs.ListDaemonDeploymentsInput{DaemonArn: created.DaemonArn, MaxResults: aws.Int32(4), NextToken: list.NextToken})
	if err != nil || len(rest.DaemonDeployments) != 2 || rest.NextToken != nil {
		t.Fatalf("second page: %+v %v", rest, err)
	}
	all := append(list.DaemonDeployments, rest.DaemonDeployments...)
	for i, d := range all {
		switch {
		case i == 0 && d.Status != types.DaemonDeploymentStatusSuccessful:
			t.Fatalf("latest deployment %s", d.Status)
		case i > 0 && d.Status != types.DaemonDeploymentStatusSuccessful && d.Status != types.DaemonDeploymentStatusStopped:
			t.Fatalf("older deployment %d still %s", i, d.Status)
		case d.Status == types.DaemonDeploymentStatusStopped && (d.StoppedAt == nil || !strings.Contains(aws.ToString(d.StatusReason), "Superseded")):
			t.Fatalf("stopped deployment without reason/time: %+v", d)
		}
	}
	// A status filter returns exactly the deployments of that status, in
	// the same order; SUCCESSFUL holds the latest at least.
	for _, status := range []types.DaemonDeploymentStatus{types.DaemonDeploymentStatusSuccessful, types.DaemonDeploymentStatusStopped} {
		var want []string
		for _, d := range all {
			if d.Status == status {
				want = append(want, aws.ToString(d.DaemonDeploymentArn))
			}
		}
		if status == types.DaemonDeploymentStatusSuccessful && (len(want) == 0 || want[0] != last) {
			t.Fatalf("SUCCESSFUL deployments %v do not start with the latest %s", want, last)
		}
		filtered, err := f.c.ListDaemonDeployments(ctx, &ecs.ListDaemonDeploymentsInput{DaemonArn: created.DaemonArn,
			Status: []types.DaemonDeploymentStatus{status}})
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, d := range filtered.DaemonDeployments {
			if d.Status != status {
				t.Fatalf("status filter %s returned %s", status, d.Status)
			}
			got = append(got, aws.ToString(d.DaemonDeploymentArn))
		}
		if !slices.Equal(got, want) || filtered.NextToken != nil {
			t.Fatalf("status filter %s: %v (token %v), want %v", status, got, filtered.NextToken, want)
		}
	}
}

func TestDeleteDaemon(t *testing.T) {
	ctx := context.Background()
	f := newDaemonFixture(t)
	created := f.create(t, "metrics", nil)
	f.waitSuccessful(t, aws.ToString(created.DeploymentArn))

	_, err := f.c.DeleteCluster(ctx, &ecs.DeleteClusterInput{Cluster: aws.String(f.cluster)})
	if code := apiCode(t, err); code != "ClusterContainsServicesException" {
		t.Fatalf("delete cluster with daemon: %s", code)
	}
	_, err = f.c.DeleteCapacityProvider(ctx, &ecs.DeleteCapacityProviderInput{CapacityProvider: aws.String(f.cp)})
	if code := apiCode(t, err); code != "ClientException" {
		t.Fatalf("delete capacity provider in use: %s", code)
	}

	del, err := f.c.DeleteDaemon(ctx, &ecs.DeleteDaemonInput{DaemonArn: created.DaemonArn})
	if err != nil {
		t.Fatal(err)
	}
	if del.Status != types.DaemonStatusDeleteInProgress || del.UpdatedAt == nil {
		t.Fatalf("delete output: %+v", del)
	}
	dep := f.waitSuccessful(t, aws.ToString(del.DeploymentArn))
	if dep.TargetDaemonRevision != nil || len(dep.SourceDaemonRevisions) != 1 {
		t.Fatalf("delete deployment revisions: target %+v sources %+v", dep.TargetDaemonRevision, dep.SourceDaemonRevisions)
	}
	_, err = f.c.DescribeDaemon(ctx, &ecs.DescribeDaemonInput{DaemonArn: created.DaemonArn})
	if code := apiCode(t, err); code != "DaemonNotFoundException" {
		t.Fatalf("describe deleted daemon: %s", code)
	}
	list, err := f.c.ListDaemons(ctx, &ecs.ListDaemonsInput{})
	if err != nil || len(list.DaemonSummariesList) != 0 {
		t.Fatalf("list after delete: %+v %v", list, err)
	}
	// The name can be used again, and the old deployments are not the new daemon's.
	again := f.create(t, "metrics", nil)
	f.waitSuccessful(t, aws.ToString(again.DeploymentArn))
	deps, err := f.c.ListDaemonDeployments(ctx, &ecs.ListDaemonDeploymentsInput{DaemonArn: again.DaemonArn})
	if err != nil || len(deps.DaemonDeployments) != 1 {
		t.Fatalf("deployments of re-created daemon: %+v %v", deps, err)
	}
	if _, err := f.c.DeleteDaemon(ctx, &ecs.DeleteDaemonInput{DaemonArn: again.DaemonArn}); err != nil {
		t.Fatal(err)
	}
	_, err = f.c.DeleteDaemon(ctx, &ecs.DeleteDaemonInput{DaemonArn: again.DaemonArn})
	if code := apiCode(t, err); code != "DaemonNotActiveException" && code != "DaemonNotFoundException" {
		t.Fatalf("second delete: %s", code)
	}
}

func TestListDaemonsFiltersAndPages(t *testing.T) {
	ctx := context.Background()
	f := newDaemonFixture(t)
	other := createCapacityProvider(t, f.c, "fleet", "gpu-mi")
	for i := range 5 {
		cps := []string{f.cp}
		if i%2 == 1 {
			cps = []string{other}
		}
		f.create(t, fmt.Sprintf("d%d", i), func(in *ecs.CreateDaemonInput) { in.CapacityProviderArns = cps })
	}
	var names []string
	var token *string
	for {
		out, err := f.c.ListDaemons(ctx, &ecs.ListDaemonsInput{ClusterArn: aws.String("fleet"), MaxResults: aws.Int32(2), NextToken: token})
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range out.DaemonSummariesList {
			names = append(names, aws.ToString(d.DaemonArn))
		}
		if token = out.NextToken; token == nil {
			break
		}
	}
	if len(names) != 5 {
		t.Fatalf("paged list: %v", names)
	}
	gpu, err := f.c.ListDaemons(ctx, &ecs.ListDaemonsInput{CapacityProviderArns: []string{other}})
	if err != nil || len(gpu.DaemonSummariesList) != 2 {
		t.Fatalf("capacity provider filter: %+v %v", gpu, err)
	}
	_, err = f.c.ListDaemons(ctx, &ecs.ListDaemonsInput{ClusterArn: aws.String("missing")})
	if code := apiCode(t, err); code != "ClusterNotFoundException" {
		t.Fatalf("list in missing cluster: %s", code)
	}
}
