package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ecs"
	"github.com/aws/aws-sdk-go-v2/service/ecs/types"

	"github.com/capstanhq/capstan/internal/testenv"
	"github.com/capstanhq/capstan/internal/testenv/agents"
)

// capstanCLI runs the capstan binary as a user would, against f's server,
// and returns its exit code and output.
func (f *fleet) capstanCLI(args ...string) (code int, stdout, stderr string) {
	f.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, testenv.CapstanBinary(f.t), args...)
	cmd.Env = append(f.srv.Env(), "CAPSTAN_ENDPOINT="+f.srv.URL, "HOME="+f.t.TempDir())
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		code = ee.ExitCode()
	case err != nil:
		f.t.Fatalf("capstan %s: %v", strings.Join(args, " "), err)
	}
	return code, out.String(), errb.String()
}

func (f *fleet) capstanOK(args ...string) (stdout, stderr string) {
	f.t.Helper()
	code, out, errs := f.capstanCLI(args...)
	if code != 0 {
		f.t.Fatalf("capstan %s: exit %d\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), code, out, errs)
	}
	return out, errs
}

// latestDeployment is the daemon's newest deployment and its target revision.
func (f *fleet) latestDeployment(daemonArn string) (types.DaemonDeployment, types.DaemonRevision, int) {
	f.t.Helper()
	ctx := context.Background()
	list, err := f.c.ListDaemonDeployments(ctx, &ecs.ListDaemonDeploymentsInput{DaemonArn: aws.String(daemonArn)})
	if err != nil || len(list.DaemonDeployments) == 0 {
		f.t.Fatalf("list deployments: %+v %v", list, err)
	}
	deps, err := f.c.DescribeDaemonDeployments(ctx, &ecs.DescribeDaemonDeploymentsInput{DaemonDeploymentArns: []string{aws.ToString(list.DaemonDeployments[0].DaemonDeploymentArn)}})
	if err != nil || len(deps.DaemonDeployments) != 1 {
		f.t.Fatalf("describe deployment: %+v %v", deps, err)
	}
	dep := deps.DaemonDeployments[0]
	revs, err := f.c.DescribeDaemonRevisions(ctx, &ecs.DescribeDaemonRevisionsInput{DaemonRevisionArns: []string{aws.ToString(dep.TargetDaemonRevision.Arn)}})
	if err != nil || len(revs.DaemonRevisions) != 1 {
		f.t.Fatalf("describe revision: %+v %v", revs, err)
	}
	return dep, revs.DaemonRevisions[0], len(list.DaemonDeployments)
}

// TestRolloutCLI drives the capstan binary against a server with a real
// agent: a dry run shows what an update would silently reset and changes
// nothing; --keep-unspecified keeps the current settings; a rollback
// deploys the previous task definition again.
func TestRolloutCLI(t *testing.T) {
	ctx := context.Background()
	f := newFleet(t)
	cp := f.capacityProvider("fleet-mi")
	loop := []string{"sh", "-c", "trap 'exit 0' TERM; while true; do sleep 1; done"}
	var tds []string
	for range 2 {
		td, err := f.c.RegisterDaemonTaskDefinition(ctx, &ecs.RegisterDaemonTaskDefinitionInput{Family: aws.String("agentd"),
			ContainerDefinitions: []types.DaemonContainerDefinition{{Name: aws.String("agentd"), Image: aws.String(f.image), Memory: aws.Int32(32), Command: loop}}})
		if err != nil {
			t.Fatal(err)
		}
		tds = append(tds, aws.ToString(td.DaemonTaskDefinitionArn))
	}
	created, err := f.c.CreateDaemon(ctx, &ecs.CreateDaemonInput{DaemonName: aws.String("agentd"), ClusterArn: aws.String(f.cluster),
		DaemonTaskDefinitionArn: aws.String(tds[0]), CapacityProviderArns: []string{cp}, Critical: aws.Bool(false),
		DeploymentConfiguration: &types.DaemonDeploymentConfiguration{DrainPercent: aws.Float64(50), BakeTimeInMinutes: 2}})
	if err != nil {
		t.Fatal(err)
	}
	daemonArn := aws.ToString(created.DaemonArn)
	a := agents.StartEnv(t, agents.EnvFor(t, f.srv, f.cluster, "fleet-mi", t.TempDir()), f.rt)
	eventually(t, 60*time.Second, "the daemon running on the instance", func() bool {
		dts := f.daemonTasks("agentd", "RUNNING")
		return len(dts) == 1 && aws.ToString(dts[0].LastStatus) == "RUNNING"
	})
	before, err := f.c.DescribeDaemon(ctx, &ecs.DescribeDaemonInput{DaemonArn: aws.String(daemonArn)})
	if err != nil {
		t.Fatal(err)
	}
	_, firstRev, nDeps := f.latestDeployment(daemonArn)

	// The pitfall: naming only the task definition and the capacity
	// provider would reset drain percent, bake time and critical.
	update := []string{"daemon", "update", "agentd", "--cluster", f.cluster, "--task-definition", "agentd:2", "--capacity-provider", "fleet-mi"}
	out, _ := f.capstanOK(append(update, "--dry-run")...)
	for _, want := range [][]string{
		{"!", "deploymentConfiguration.drainPercent", "50", "->", "25"},
		{"!", "deploymentConfiguration.bakeTimeInMinutes", "2", "->", "0"},
		{"!", "critical", "false", "->", "true"},
		{"daemonTaskDefinitionArn", "agentd:1", "agentd:2"},
		// An agent started by hand is updated in place: no extra capacity.
		{"1", "0", "0", a.InstanceArn[strings.LastIndexByte(a.InstanceArn, '/')+1:], "(fleet-mi,", "in", "place)"},
	} {
		if !hasFields(out, want...) {
			t.Errorf("dry run lacks %q:\n%s", strings.Join(want, " "), out)
		}
	}
	out, _ = f.capstanOK(append(update, "--dry-run", "-o", "json")...)
	var preview struct {
		Resets []struct {
			Setting string `json:"setting"`
		} `json:"resets"`
		InstancesInScope int `json:"instancesInScope"`
		Batches          []struct {
			Instances []struct {
				ContainerInstanceArn string `json:"containerInstanceArn"`
			} `json:"instances"`
		} `json:"batches"`
	}
	if err := json.Unmarshal([]byte(out), &preview); err != nil {
		t.Fatalf("dry run JSON: %v\n%s", err, out)
	}
	var resets []string
	for _, r := range preview.Resets {
		resets = append(resets, r.Setting)
	}
	if strings.Join(resets, " ") != "deploymentConfiguration.drainPercent deploymentConfiguration.bakeTimeInMinutes critical" ||
		preview.InstancesInScope != 1 || len(preview.Batches) != 1 || preview.Batches[0].Instances[0].ContainerInstanceArn != a.InstanceArn {
		t.Fatalf("dry run JSON: %+v", preview)
	}
	// Nothing changed: same deployment, same revisions, no new deployment.
	after, err := f.c.DescribeDaemon(ctx, &ecs.DescribeDaemonInput{DaemonArn: aws.String(daemonArn)})
	if err != nil {
		t.Fatal(err)
	}
	if aws.ToString(after.Daemon.DeploymentArn) != aws.ToString(before.Daemon.DeploymentArn) ||
		aws.ToString(after.Daemon.CurrentRevisions[0].Arn) != aws.ToString(firstRev.DaemonRevisionArn) {
		t.Fatalf("dry run changed the daemon: before %+v after %+v", before.Daemon, after.Daemon)
	}
	if _, _, n := f.latestDeployment(daemonArn); n != nDeps {
		t.Fatalf("dry run added a deployment: %d, was %d", n, nDeps)
	}

	// --keep-unspecified: the new revision keeps drain, bake and critical.
	out, errs := f.capstanOK("daemon", "update", "agentd", "--cluster", f.cluster, "--task-definition", "agentd:2", "--keep-unspecified")
	if strings.Contains(errs, "warning") || !strings.Contains(out, "daemon-deployment/"+f.cluster+"/agentd/") {
		t.Fatalf("keep-unspecified update:\n%s%s", out, errs)
	}
	dep, rev, _ := f.latestDeployment(daemonArn)
	dc := dep.DeploymentConfiguration
	if dc == nil || aws.ToFloat64(dc.DrainPercent) != 50 || dc.BakeTimeInMinutes != 2 {
		t.Fatalf("kept deployment configuration: %+v", dc)
	}
	if aws.ToString(rev.DaemonTaskDefinitionArn) != tds[1] || aws.ToBool(rev.Critical) {
		t.Fatalf("kept revision: td %s critical %v", aws.ToString(rev.DaemonTaskDefinitionArn), aws.ToBool(rev.Critical))
	}

	// Rollback: a new deployment whose target has the old task definition
	// and the old settings.
	out, _ = f.capstanOK("daemon", "rollback", "agentd", "--cluster", f.cluster)
	dep, rev, _ = f.latestDeployment(daemonArn)
	if !strings.Contains(out, aws.ToString(dep.DaemonDeploymentArn)) {
		t.Fatalf("rollback printed %q, latest deployment is %s", out, aws.ToString(dep.DaemonDeploymentArn))
	}
	if aws.ToString(rev.DaemonTaskDefinitionArn) != tds[0] || aws.ToBool(rev.Critical) || rev.DaemonRevisionArn == firstRev.DaemonRevisionArn {
		t.Fatalf("rollback target: %+v", rev)
	}
	if dc := dep.DeploymentConfiguration; dc == nil || aws.ToFloat64(dc.DrainPercent) != 50 || dc.BakeTimeInMinutes != 2 {
		t.Fatalf("rollback deployment configuration: %+v", dc)
	}
}

// hasFields reports whether a line of out starts with the given
// whitespace-separated fields.
func hasFields(out string, fields ...string) bool {
	for _, line := range strings.Split(out, "\n") {
		got := strings.Fields(line)
		if len(got) >= len(fields) && strings.Join(got[:len(fields)], " ") == strings.Join(fields, " ") {
			return true
		}
	}
	return false
}

// TestRolloutDryRunManagedInstance: an instance Capstan provisioned is
// replaced, so the dry run asks for a same-size instance of extra capacity.
func TestRolloutDryRunManagedInstance(t *testing.T) {
	ctx := context.Background()
	f := newManagedFleet(t)
	cp := f.managedCapacityProvider("auto", 600)
	f.daemon("agentd", cp, true, "sh", "-c", "trap 'exit 0' TERM; while true; do sleep 1; done")
	td := f.register("job", f.container("job", "sh", "-c", "trap 'exit 0' TERM; while true; do sleep 1; done"))
	out, err := f.c.RunTask(ctx, &ecs.RunTaskInput{Cluster: aws.String(f.cluster), TaskDefinition: aws.String(td),
		CapacityProviderStrategy: []types.CapacityProviderStrategyItem{{CapacityProvider: aws.String("auto")}}})
	if err != nil || len(out.Tasks) != 1 {
		t.Fatalf("run task: %+v %v", out, err)
	}
	task := f.waitStatus(aws.ToString(out.Tasks[0].TaskArn), "RUNNING", 120*time.Second)
	ci := f.instance(aws.ToString(task.ContainerInstanceArn))
	var cpu, mem int32
	for _, r := range ci.RegisteredResources {
		switch aws.ToString(r.Name) {
		case "CPU":
			cpu = r.IntegerValue
		case "MEMORY":
			mem = r.IntegerValue
		}
	}
	stdout, _ := f.capstanOK("daemon", "update", "agentd", "--cluster", f.cluster, "--keep-unspecified", "--dry-run", "-o", "json")
	var p struct {
		Resets  []any `json:"resets"`
		Batches []struct {
			ExtraCPU    int32 `json:"extraCpu"`
			ExtraMemory int32 `json:"extraMemory"`
			Instances   []struct {
				ContainerInstanceArn string `json:"containerInstanceArn"`
				InPlace              bool   `json:"inPlace"`
			} `json:"instances"`
		} `json:"batches"`
	}
	if err := json.Unmarshal([]byte(stdout), &p); err != nil {
		t.Fatalf("dry run JSON: %v\n%s", err, stdout)
	}
	if len(p.Resets) != 0 || len(p.Batches) != 1 || len(p.Batches[0].Instances) != 1 {
		t.Fatalf("dry run: %s", stdout)
	}
	b := p.Batches[0]
	if b.Instances[0].ContainerInstanceArn != aws.ToString(ci.ContainerInstanceArn) || b.Instances[0].InPlace ||
		b.ExtraCPU != cpu || b.ExtraMemory != mem || cpu == 0 {
		t.Fatalf("batch %+v, instance of %d CPU and %d MiB", b, cpu, mem)
	}
}
