package fault

import (
	"context"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ecs"

	"github.com/capstanhq/capstan/internal/protocol"
	"github.com/capstanhq/capstan/internal/server"
)

// Partition deadlines. The loss timeout is the session's silence limit
// and lease TTL (protocol.SilenceLimit, 15 s).
var (
	// shortCut stays well inside the loss timeout.
	shortCut = protocol.SilenceLimit / 3
	// shortCutDeadline bounds the return to steady state after it heals.
	shortCutDeadline = 30 * time.Second
	// lostDeadline bounds, from the cut, the server's noticing the silent
	// agent (agentConnected false) ...
	silentDeadline = protocol.SilenceLimit + 15*time.Second
	// ... and replacing its instance while the link is still cut.
	lostDeadline = protocol.SilenceLimit + 45*time.Second
	// healDeadline bounds the steady state after the long cut heals.
	healDeadline = 60 * time.Second
)

// TestPartitionAgent cuts one agent off the server with a TCP proxy (the
// server's advertise URL), once for less than the loss timeout and once
// for longer.
func TestPartitionAgent(t *testing.T) {
	skipHollow(t, "the proxy tells agents apart by their process; hollow agents share the test's")
	px := startProxy(t)
	f := newFleet(t, func(c *server.Config) { c.AdvertiseURL = "http://" + px.addr() })
	px.setTarget(strings.TrimPrefix(f.url, "http://"))
	f.setup(*instancesFlag, false)

	// Shorter than the loss timeout: nothing is replaced, nothing stops.
	before := f.mustSnapshot()
	victim := f.serviceInstances(before, serviceName)[0]
	a := f.agents()[victim]
	px.partition(a.pid)
	t.Logf("agent %d of %s cut off for %s", a.pid, victim, shortCut)
	deadline := time.Now().Add(shortCut)
	for time.Now().Before(deadline) {
		s := f.mustSnapshot()
		if ci, ok := s.instances[victim]; !ok || aws.ToString(ci.Status) != "ACTIVE" {
			t.Errorf("during a %s cut the instance is %s", shortCut, aws.ToString(ci.Status))
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	px.heal(a.pid)
	f.converge("short cut healed", shortCutDeadline)
	f.verify("short cut")
	after := f.mustSnapshot()
	if got, want := slices.Sorted(maps.Keys(after.instances)), slices.Sorted(maps.Keys(before.instances)); !slices.Equal(got, want) {
		t.Errorf("instances after a short cut %v, before %v", got, want)
	}
	if got, want := slices.Sorted(maps.Keys(after.tasks)), slices.Sorted(maps.Keys(before.tasks)); !slices.Equal(got, want) {
		t.Errorf("tasks after a short cut %v, before %v", got, want)
	}

	// Longer than the loss timeout: the instance is lost and replaced; when
	// the link returns its old agent leaves nothing running twice.
	px.partition(a.pid)
	cutAt := time.Now()
	t.Logf("agent %d of %s cut off", a.pid, victim)
	ctx := context.Background()
	silent := eventually(t, silentDeadline, "the server to see the agent silent", func() bool {
		out, err := f.c.DescribeContainerInstances(ctx, &ecs.DescribeContainerInstancesInput{Cluster: aws.String(f.cluster), ContainerInstances: []string{victim}})
		return err == nil && len(out.ContainerInstances) == 1 && !out.ContainerInstances[0].AgentConnected
	})
	t.Logf("agent seen disconnected %.1fs after the cut", silent.Seconds())
	replaced := false
	for time.Since(cutAt) < lostDeadline {
		s, err := f.snapshot(ctx)
		if err == nil && gone(victim)(s) == "" && f.unconverged(s) == "" {
			replaced = true
			t.Logf("silent instance replaced %.1fs after the cut", time.Since(cutAt).Seconds())
			break
		}
		time.Sleep(time.Second)
	}
	if !replaced {
		s := f.mustSnapshot()
		t.Errorf("instance %s cut off for %.0fs (loss timeout %s) was not replaced: it is %s, agentConnected %v; its service task is still recorded RUNNING",
			victim, time.Since(cutAt).Seconds(), protocol.SilenceLimit, aws.ToString(s.instances[victim].Status), s.instances[victim].AgentConnected)
	}
	px.heal(a.pid)
	f.converge("long cut healed", healDeadline)
	f.verify("long cut")
	if replaced {
		f.lost(victim)
	}
}
