package main

import (
	"context"
	"flag"
	"io"
	"os"
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
	if rep.Killed != max(1, *scaleN/100) || rep.DetectSeconds < 0 || rep.ReplaceSeconds < 0 {
		t.Errorf("loss step incomplete: killed %d, detect %v, replace %v", rep.Killed, rep.DetectSeconds, rep.ReplaceSeconds)
	}
}
