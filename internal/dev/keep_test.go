package dev

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ecs"
	"github.com/aws/aws-sdk-go-v2/service/ecs/types"

	"github.com/capstanhq/capstan/internal/testenv"
)

// TestRerunKeepsUserChanges: a rerun of dev brings the sample to a new
// build of its own, but what the user changed stays: the service's task
// count, a service or daemon moved to a definition of the user's.
func TestRerunKeepsUserChanges(t *testing.T) {
	ctx := context.Background()
	srv := testenv.StartServer(t, "")
	var out bytes.Buffer
	d := &env{out: newPrinter(&out), names: namesFor("keep")}
	d.connect(srv.URL, srv.Config.AdminKeyID, srv.Config.AdminSecret)
	c := srv.ECS()
	run := func(build string) {
		t.Helper()
		out.Reset()
		if err := d.ensureCluster(ctx); err != nil {
			t.Fatal(err)
		}
		if err := d.ensureResources(ctx, sampleImages{sampleTelemetry: "capstan-sample/telemetry:" + build, sampleWebapp: "capstan-sample/webapp:" + build}); err != nil {
			t.Fatal(err)
		}
	}
	said := func(line string) {
		t.Helper()
		if !strings.Contains(out.String(), "] "+line+"\n") {
			t.Errorf("no %q in:\n%s", line, out.String())
		}
	}
	service := func() types.Service {
		t.Helper()
		o, err := c.DescribeServices(ctx, &ecs.DescribeServicesInput{Cluster: aws.String("keep"), Services: []string{"web"}})
		if err != nil || len(o.Services) != 1 {
			t.Fatalf("describe service: %v", err)
		}
		return o.Services[0]
	}
	daemonTD := func() string {
		t.Helper()
		arn, err := d.daemonArn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		o, err := c.DescribeDaemon(ctx, &ecs.DescribeDaemonInput{DaemonArn: aws.String(arn)})
		if err != nil {
			t.Fatal(err)
		}
		revs, err := c.DescribeDaemonRevisions(ctx, &ecs.DescribeDaemonRevisionsInput{DaemonRevisionArns: []string{aws.ToString(o.Daemon.CurrentRevisions[0].Arn)}})
		if err != nil {
			t.Fatal(err)
		}
		return shortArn(aws.ToString(revs.DaemonRevisions[0].DaemonTaskDefinitionArn))
	}

	run("a")
	said("service web created (2 tasks on keep-local)")
	// The user scales the service; a rerun on the same build keeps it.
	if _, err := c.UpdateService(ctx, &ecs.UpdateServiceInput{Cluster: aws.String("keep"), Service: aws.String("web"), DesiredCount: aws.Int32(5)}); err != nil {
		t.Fatal(err)
	}
	run("a")
	said("service web (5 tasks)")
	// A new build of the sample: dev's definitions move on, the count stays.
	run("b")
	said("service web updated to web:2 (5 tasks)")
	said("daemon telemetry updated to telemetry:2")
	if s := service(); s.DesiredCount != 5 || !strings.HasSuffix(aws.ToString(s.TaskDefinition), "web:2") {
		t.Fatalf("service after a new build: %d tasks of %s", s.DesiredCount, aws.ToString(s.TaskDefinition))
	}

	// The user moves both to definitions of their own.
	web, err := c.RegisterTaskDefinition(ctx, &ecs.RegisterTaskDefinitionInput{Family: aws.String("web"), ContainerDefinitions: []types.ContainerDefinition{{
		Name: aws.String("web"), Image: aws.String("mine/web:1"), Memory: aws.Int32(64), Essential: aws.Bool(true)}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.UpdateService(ctx, &ecs.UpdateServiceInput{Cluster: aws.String("keep"), Service: aws.String("web"), TaskDefinition: web.TaskDefinition.TaskDefinitionArn}); err != nil {
		t.Fatal(err)
	}
	tel, err := c.RegisterDaemonTaskDefinition(ctx, &ecs.RegisterDaemonTaskDefinitionInput{Family: aws.String("telemetry"), Cpu: aws.String("256"), Memory: aws.String("128"),
		ContainerDefinitions: []types.DaemonContainerDefinition{{Name: aws.String("telemetry"), Image: aws.String("mine/telemetry:1"), Essential: aws.Bool(true)}}})
	if err != nil {
		t.Fatal(err)
	}
	arn, _ := d.daemonArn(ctx)
	if _, err := c.UpdateDaemon(ctx, &ecs.UpdateDaemonInput{DaemonArn: aws.String(arn), DaemonTaskDefinitionArn: tel.DaemonTaskDefinitionArn,
		CapacityProviderArns: []string{"keep-local"}, Critical: aws.Bool(true)}); err != nil {
		t.Fatal(err)
	}
	run("c")
	said("service web (kept as you left it: web:3, 5 tasks)")
	said("daemon telemetry (kept as you left it: telemetry:3)")
	if s := service(); s.DesiredCount != 5 || !strings.HasSuffix(aws.ToString(s.TaskDefinition), "web:3") {
		t.Fatalf("service after the user's change: %d tasks of %s", s.DesiredCount, aws.ToString(s.TaskDefinition))
	}
	if td := daemonTD(); td != "telemetry:3" {
		t.Fatalf("daemon after the user's change runs %s", td)
	}
}
