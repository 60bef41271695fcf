package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"testing"
	"time"
)

var scaleN = flag.Int("scale.instances", 200, "hollow instances in TestScale")

// TestScale runs the harness small, hollow instances in the test process,
// and checks what must hold at any size, never how fast: every instance
// registers, the daemon runs exactly once on each, the service's 2N tasks
// run on ACTIVE instances, and after 1% of the instances are lost the
// replacements bring all of it back.
func TestScale(t *testing.T) {
	if testing.Short() {
		t.Skip("scale run skipped in -short mode")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	o := options{instances: *scaleN, inProcess: true, skipRollouts: true, work: t.TempDir(),
		phaseTimeout: 4 * time.Minute, rolloutTimeout: time.Minute}
	rep := runHarness(t, ctx, o)
	if rep.Killed != max(1, *scaleN/100) || rep.DetectSeconds < 0 || rep.ReplaceSeconds < 0 {
		t.Errorf("loss step incomplete: killed %d, detect %v, replace %v", rep.Killed, rep.DetectSeconds, rep.ReplaceSeconds)
	}
}

// TestMain lets the test binary be the etcd process it starts, as the
// benchmark's binary is.
func TestMain(m *testing.M) {
	if dir := os.Getenv(etcdEnv); dir != "" {
		if err := serveEtcd(dir); err != nil {
			fmt.Fprintln(os.Stderr, "etcd process:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// TestScaleWithEtcdProcess runs the harness against etcd in a process of
// its own: the server reaches it as an external cluster, takes the
// embedded member's transaction size, and etcd's own RSS and CPU are
// reported.
func TestScaleWithEtcdProcess(t *testing.T) {
	if testing.Short() {
		t.Skip("scale run skipped in -short mode")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	o := options{instances: 20, inProcess: true, skipRollouts: true, etcdProcess: true, work: t.TempDir(),
		phaseTimeout: 4 * time.Minute, rolloutTimeout: time.Minute}
	rep := runHarness(t, ctx, o)
	if !strings.HasPrefix(rep.Etcd, "process https://127.0.0.1:") || rep.EtcdRSSMiB <= 0 || rep.EtcdCPUSeconds <= 0 || rep.EtcdDBMiB <= 0 {
		t.Errorf("etcd %q: RSS %v MiB, CPU %v s, db %v MiB", rep.Etcd, rep.EtcdRSSMiB, rep.EtcdCPUSeconds, rep.EtcdDBMiB)
	}
}

// TestScaleProvisioned runs the provisioned harness small: the server
// launches every instance for the service's tasks (daemon first), a 25%
// rollout replaces all of them, 1% of them die and the server replaces
// them itself, and at the end exactly N instances are left, every
// invariant holds and no rollout was left unfinished.
func TestScaleProvisioned(t *testing.T) {
	if testing.Short() {
		t.Skip("scale run skipped in -short mode")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	n := max(10, *scaleN/4)
	o := options{instances: n, inProcess: true, provisioned: true, drains: []float64{25}, work: t.TempDir(),
		phaseTimeout: 4 * time.Minute, rolloutTimeout: 3 * time.Minute}
	rep := runHarness(t, ctx, o)
	if rep.ProvisionSeconds <= 0 || rep.RolloutSeconds < 0 || len(rep.Rollouts) != 1 || rep.Rollouts[0].OnTarget != n {
		t.Errorf("provisioned %v s, rollout %v s, rollouts %+v", rep.ProvisionSeconds, rep.RolloutSeconds, rep.Rollouts)
	}
	if rep.Killed != max(1, n/100) || rep.DetectSeconds < 0 || rep.ReplaceSeconds < 0 {
		t.Errorf("loss step incomplete: killed %d, detect %v, replace %v", rep.Killed, rep.DetectSeconds, rep.ReplaceSeconds)
	}
	if pk := rep.ServerPeaks; pk.HeapLiveMiB <= 0 || pk.HeapGoalMiB < pk.HeapLiveMiB || pk.RSSAnonMiB <= 0 || pk.RSSFileMiB <= 0 || pk.At == "" {
		t.Errorf("memory peaks not sampled: %+v", pk)
	}
}

// runHarness runs the harness, printing its log and table with -v, and
// fails the test on every invariant violated.
func runHarness(t *testing.T, ctx context.Context, o options) *Report {
	t.Helper()
	var out io.Writer = io.Discard
	if testing.Verbose() {
		out = os.Stderr
	}
	rep, err := run(ctx, o, out)
	if err != nil {
		t.Fatal(err)
	}
	if testing.Verbose() {
		printTable(os.Stderr, rep)
	}
	for _, v := range rep.Invariants {
		t.Error("invariant:", v)
	}
	return rep
}
