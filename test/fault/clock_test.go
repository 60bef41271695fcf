package fault

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ecs"
	"github.com/aws/aws-sdk-go-v2/service/ecs/types"

	"github.com/capstanhq/capstan/internal/server"
	"github.com/capstanhq/capstan/internal/testenv"
)

// clockSkew is how far the second server's clock is behind the first's.
const clockSkew = time.Minute

// startSkewedServer is startSharedServer with the server's clock shifted.
func startSkewedServer(t *testing.T, bin, addr, dir string, offset time.Duration, args ...string) *serverProcess {
	t.Helper()
	old, had := os.LookupEnv(server.ClockOffsetEnv)
	os.Setenv(server.ClockOffsetEnv, offset.String())
	defer func() {
		if had {
			os.Setenv(server.ClockOffsetEnv, old)
		} else {
			os.Unsetenv(server.ClockOffsetEnv)
		}
	}()
	return startSharedServer(t, bin, addr, dir, args...)
}

// TestClockSkew runs two servers on one etcd whose clocks differ by a
// minute (the second behind) and kills the leading one with SIGKILL while
// a daemon rollout with a one-minute bake is baking. The bake's end is an
// absolute time the first server wrote: on the second it lasts longer by
// at most the skew, and is never skipped. Leadership moves on the etcd
// lease alone; the record stays ordered by version, and every invariant
// holds.
func TestClockSkew(t *testing.T) {
	rt := testenv.RequireDocker(t)
	bin := testenv.CapstanBinary(t)
	e := startEtcdProcess(t, bin)
	addrA, addrB := freeAddr(t), freeAddr(t)
	endpoints := "http://" + addrA + ",http://" + addrB
	dirA, dirB := t.TempDir(), t.TempDir()
	if err := os.MkdirAll(filepath.Join(dirA, "instances"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(dirA, "instances"), filepath.Join(dirB, "instances")); err != nil {
		t.Fatal(err)
	}
	args := append(e.args, "--secrets-key-file", filepath.Join(t.TempDir(), "secrets.key"), "--advertise-url", endpoints)
	a := startSharedServer(t, bin, addrA, dirA, args...)
	eventually(t, 30*time.Second, "the first server leading", func() bool { return strings.Contains(a.log.String(), `"leading"`) })
	b := startSkewedServer(t, bin, addrB, dirB, -clockSkew, args...)
	if !strings.Contains(b.log.String(), "TEST ONLY") {
		t.Errorf("the skewed server does not warn of its clock:\n%s", b.log)
	}
	f := &fleet{t: t, url: "http://" + addrB, rt: rt, bin: bin, dataDir: dirA,
		creds: aws.Credentials{AccessKeyID: processKey, SecretAccessKey: processSecret}}
	t.Cleanup(func() {
		a.kill9()
		b.kill9()
		f.terminateAll()
	})
	f.init()
	const n = 2
	f.setup(n, false)

	td := f.daemonTaskDef("guard", "echo v2; "+loopCmd)
	const bake = time.Minute
	ctx := context.Background()
	out, err := f.c.UpdateDaemon(ctx, &ecs.UpdateDaemonInput{DaemonArn: aws.String(f.daemons[0].Arn),
		DaemonTaskDefinitionArn: aws.String(td), CapacityProviderArns: []string{f.cpArn}, Critical: aws.Bool(true),
		DeploymentConfiguration: &types.DaemonDeploymentConfiguration{DrainPercent: aws.Float64(50),
			BakeTimeInMinutes: int32(bake / time.Minute)}})
	if err != nil {
		t.Fatal(err)
	}
	dep := aws.ToString(out.DeploymentArn)
	// Baking: every instance on the new revision, the deployment not done.
	onNew := func(s *snapshot) string {
		for _, tk := range s.tasks {
			if aws.ToString(tk.Group) == "daemon:guard" && aws.ToString(tk.LastStatus) == "RUNNING" && aws.ToString(tk.TaskDefinitionArn) != td {
				return "guard still runs the old revision on " + aws.ToString(tk.ContainerInstanceArn)
			}
		}
		return ""
	}
	f.converge("rollout replaced every instance", scaled(rolloutDeadline), onNew)
	baking := time.Now()
	if d := f.deployment(dep); d.Status != types.DaemonDeploymentStatusInProgress {
		t.Fatalf("deployment %s once every instance was replaced, want it baking (IN_PROGRESS)", d.Status)
	}
	if strings.Contains(b.log.String(), `"leading"`) {
		t.Fatal("the skewed server leads before the kill")
	}
	a.kill9()
	t.Logf("leader killed %.1fs into the bake", time.Since(baking).Seconds())
	f.converge("leader killed while baking, on a server a minute behind", bake+clockSkew+scaled(rolloutDeadline),
		f.sessions(n), f.ended(dep, types.DaemonDeploymentStatusSuccessful, td))
	baked := time.Since(baking)
	f.verify("leader killed while baking, on a server a minute behind")
	if !strings.Contains(b.log.String(), `"leading"`) {
		t.Errorf("the skewed server never led:\n%s", b.log)
	}
	// The convergence poll adds up to a second or two of its own; the
	// lower bound is exact.
	t.Logf("bake of %s lasted %.1fs across the leader change (skew %s)", bake, baked.Seconds(), clockSkew)
	if baked < bake {
		t.Errorf("the bake lasted %s, less than its %s: it was cut short", baked.Round(time.Second), bake)
	}
	if slack := 30 * time.Second; baked > bake+clockSkew+slack {
		t.Errorf("the bake lasted %s, more than %s + the skew %s (+%s)", baked.Round(time.Second), bake, clockSkew, slack)
	}
	// Every instance replaced once.
	var all, active int
	for _, in := range f.h.Instances() {
		all++
		if len(in.States) > 0 && in.States[len(in.States)-1].Status == "ACTIVE" {
			active++
		}
	}
	if all != 2*n || active != n {
		t.Errorf("%d instances registered, %d ACTIVE; want %d and %d", all, active, 2*n, n)
	}
	f.checkNoLeak("leader killed while baking", filepath.Join(dirA, "instances"), filepath.Join(dirB, "instances"))
}
