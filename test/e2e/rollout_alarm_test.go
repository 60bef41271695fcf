package e2e

import (
	"context"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ecs"
	"github.com/aws/aws-sdk-go-v2/service/ecs/types"

	"github.com/capstanhq/capstan/internal/dev"
	"github.com/capstanhq/capstan/internal/runtime/docker"
	"github.com/capstanhq/capstan/internal/server"
	"github.com/capstanhq/capstan/internal/testenv"
)

// daemonAddr is where the host reaches a daemon task's port: the address
// of the instance's daemon namespace holder its containers joined.
func (f *fleet) daemonAddr(taskArn, port string) string {
	f.t.Helper()
	for _, c := range f.containers(taskArn) {
		holder, ok := strings.CutPrefix(c.NetworkMode, "container:")
		if !ok {
			continue
		}
		h, err := f.rt.Inspect(context.Background(), holder)
		if err == nil && h.IPAddress != "" {
			return net.JoinHostPort(h.IPAddress, port)
		}
	}
	return ""
}

// TestDaemonRolloutAlarmRollsBack: Prometheus scrapes the sample
// telemetry daemon; the new revision raises its error metric, the alert
// on it fires during the bake window and the deployment rolls back. An
// alert already firing before the update is ignored.
func TestDaemonRolloutAlarmRollsBack(t *testing.T) {
	ctx := context.Background()
	prom := testenv.StartPrometheus(t, testenv.PrometheusOptions{Rules: []testenv.AlertRule{
		{Name: "TelemetryErrors", Expr: "telemetry_errors_total > 0"},
		{Name: "AlwaysFiring", Expr: "vector(1)"},
	}})
	f := newManagedFleetWith(t, func(c *server.Config) { c.AlarmSource = "prometheus+" + prom.URL })
	drt, ok := f.rt.(*docker.Runtime)
	if !ok {
		t.Fatalf("runtime %T", f.rt)
	}
	image, err := dev.SampleImage(ctx, drt, "telemetry")
	if err != nil {
		t.Fatal(err)
	}
	cpArn := f.managedCapacityProvider("watched", 3600)
	register := func(env ...types.KeyValuePair) string {
		td, err := f.c.RegisterDaemonTaskDefinition(ctx, &ecs.RegisterDaemonTaskDefinitionInput{Family: aws.String("telemetry"),
			ContainerDefinitions: []types.DaemonContainerDefinition{{Name: aws.String("telemetry"), Image: aws.String(image), Memory: aws.Int32(32), Environment: env}}})
		if err != nil {
			t.Fatal(err)
		}
		return aws.ToString(td.DaemonTaskDefinitionArn)
	}
	created, err := f.c.CreateDaemon(ctx, &ecs.CreateDaemonInput{DaemonName: aws.String("telemetry"), ClusterArn: aws.String(f.cluster),
		DaemonTaskDefinitionArn: aws.String(register()), CapacityProviderArns: []string{cpArn}})
	if err != nil {
		t.Fatal(err)
	}
	td := f.register("web", f.container("web", "sh", "-c", loop))
	if _, err := f.c.CreateService(ctx, &ecs.CreateServiceInput{Cluster: aws.String(f.cluster), ServiceName: aws.String("web"),
		TaskDefinition: aws.String(td), DesiredCount: aws.Int32(1),
		CapacityProviderStrategy: []types.CapacityProviderStrategyItem{{CapacityProvider: aws.String("watched")}}}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 120*time.Second, "service task RUNNING", func() bool { _, ok := f.runningServiceTask("web"); return ok })
	// Scrape every telemetry daemon that runs, old and new.
	scraped := map[string]bool{}
	scrape := func() {
		for _, tk := range f.daemonTasks("telemetry", "RUNNING") {
			if aws.ToString(tk.LastStatus) != "RUNNING" || scraped[aws.ToString(tk.TaskArn)] {
				continue
			}
			if addr := f.daemonAddr(aws.ToString(tk.TaskArn), "8125"); addr != "" {
				prom.AddTarget(t, addr, nil)
				scraped[aws.ToString(tk.TaskArn)] = true
			}
		}
	}
	eventually(t, 60*time.Second, "old daemon scraped", func() bool { scrape(); return len(scraped) == 1 })
	prom.WaitRuleState(t, "AlwaysFiring", "firing")
	if s := prom.RuleState(t, "TelemetryErrors"); s != "inactive" {
		t.Fatalf("TelemetryErrors is %s before the update", s)
	}

	bad := register(types.KeyValuePair{Name: aws.String("TELEMETRY_ERROR_RATE"), Value: aws.String("5")})
	up, err := f.c.UpdateDaemon(ctx, &ecs.UpdateDaemonInput{DaemonArn: created.DaemonArn, DaemonTaskDefinitionArn: aws.String(bad),
		CapacityProviderArns: []string{cpArn}, DeploymentConfiguration: &types.DaemonDeploymentConfiguration{BakeTimeInMinutes: 1,
			Alarms: &types.DaemonAlarmConfiguration{Enable: true, AlarmNames: []string{"TelemetryErrors", "AlwaysFiring"}}}})
	if err != nil {
		t.Fatal(err)
	}
	var dep types.DaemonDeployment
	eventually(t, 6*time.Minute, "deployment rolled back", func() bool {
		scrape()
		out, err := f.c.DescribeDaemonDeployments(ctx, &ecs.DescribeDaemonDeploymentsInput{DaemonDeploymentArns: []string{aws.ToString(up.DeploymentArn)}})
		if err != nil || len(out.DaemonDeployments) != 1 {
			return false
		}
		dep = out.DaemonDeployments[0]
		switch dep.Status {
		case types.DaemonDeploymentStatusSuccessful, types.DaemonDeploymentStatusStopped, types.DaemonDeploymentStatusRollbackFailed:
			t.Fatalf("deployment %s: %s", dep.Status, aws.ToString(dep.StatusReason))
		}
		return dep.Status == types.DaemonDeploymentStatusRollbackSuccessful
	})
	if dep.Alarms == nil || dep.Alarms.Status != types.DaemonDeploymentRollbackMonitorsStatusTriggered ||
		!slices.Equal(dep.Alarms.TriggeredAlarmNames, []string{"TelemetryErrors"}) {
		t.Fatalf("alarms: %+v", dep.Alarms)
	}
	if dep.Rollback == nil || !strings.Contains(aws.ToString(dep.Rollback.Reason), "TelemetryErrors") {
		t.Fatalf("rollback: %+v", dep.Rollback)
	}
	// The new revision ran on a replacement (it reached the bake window)
	// before the alarm fired; now every instance is back on the old one.
	if len(scraped) < 2 {
		t.Errorf("the new revision never ran: scraped %v", scraped)
	}
	old := aws.ToString(dep.Rollback.RollbackTargetDaemonRevisionArn)
	eventually(t, 30*time.Second, "daemon back on the old revision", func() bool {
		d, err := f.c.DescribeDaemon(ctx, &ecs.DescribeDaemonInput{DaemonArn: created.DaemonArn})
		return err == nil && len(d.Daemon.CurrentRevisions) == 1 && aws.ToString(d.Daemon.CurrentRevisions[0].Arn) == old && d.Daemon.CurrentRevisions[0].TotalRunningCount == 1
	})
}
