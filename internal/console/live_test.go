package console

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/capstanhq/capstan/internal/store"
)

// A burst of changes ticks only the open pages it touches: a daemon's
// records and tasks its own page, instances and sessions every page of
// the cluster, nothing in another cluster.
func TestHubTicksThePagesAChangeTouches(t *testing.T) {
	h := newHub(t.Context(), nil)
	agent, stopA := h.listen("prod", "agent")
	defer stopA()
	logs, stopL := h.listen("prod", "logs")
	defer stopL()
	other, stopO := h.listen("dev", "agent")
	defer stopO()
	task := func(group string) store.Change {
		return store.Change{Key: "tasks/prod/t1", Value: []byte(`{"group":"` + group + `","lastStatus":"RUNNING"}`)}
	}
	for _, c := range []struct {
		name    string
		changes []store.Change
		resync  bool
		want    [3]bool // agent, logs, other
	}{
		{"a deployment of agent", []store.Change{{Key: "daemondeployments/prod/agent/d1", Value: []byte(`{}`)}}, false, [3]bool{true, false, false}},
		{"the daemon logs", []store.Change{{Key: "daemons/prod/logs", Value: []byte(`{}`)}}, false, [3]bool{false, true, false}},
		{"a task of agent", []store.Change{task("daemon:agent")}, false, [3]bool{true, false, false}},
		{"a service's task", []store.Change{task("service:web")}, false, [3]bool{false, false, false}},
		{"a deleted task", []store.Change{{Key: "tasks/prod/t1", Deleted: true}}, false, [3]bool{true, true, false}},
		{"an instance", []store.Change{{Key: "containerinstances/prod/i1", Value: []byte(`{}`)}}, false, [3]bool{true, true, false}},
		{"an agent session in dev", []store.Change{{Key: "sessions/dev/i1", Value: []byte(`{}`)}}, false, [3]bool{false, false, true}},
		{"a cluster nobody looks at", []store.Change{{Key: "containerinstances/staging/i1", Value: []byte(`{}`)}}, false, [3]bool{}},
		{"a resync", nil, true, [3]bool{true, true, true}},
	} {
		h.changed(c.changes, c.resync)
		for i, ch := range []chan struct{}{agent, logs, other} {
			got := false
			select {
			case <-ch:
				got = true
			default:
			}
			if got != c.want[i] {
				t.Errorf("%s: page %d ticked %v, want %v", c.name, i, got, c.want[i])
			}
		}
	}
	stopO()
	if _, ok := h.byCluster["dev"]; ok {
		t.Error("a closed page's cluster is still followed")
	}
}

func TestDaemonOf(t *testing.T) {
	for arn, want := range map[string][2]string{
		"arn:aws:ecs:us-east-1:123456789012:daemon/prod/agent": {"prod", "agent"},
		"arn:aws:ecs:us-east-1:123456789012:daemon/prod":       {},
		"arn:aws:ecs:us-east-1:123456789012:daemon/a/b/c":      {},
		"agent": {},
	} {
		c, n, ok := daemonOf(arn)
		if ok != (want[0] != "") || c != want[0] && ok || n != want[1] && ok {
			t.Errorf("daemonOf(%q) = %q %q %v, want %v", arn, c, n, ok, want)
		}
	}
}

// A render after another patches only what changed: the changed cells,
// the head when it or the session's stop form changed; a change of the
// instances themselves needs the whole part.
func TestLiveSnapshotPatches(t *testing.T) {
	c := &Console{pages: loadTemplates()}
	view := func(revs ...string) *daemonView {
		v := &daemonView{Cluster: "prod", RevLabel: map[string]string{}, StopSlot: stopMarker}
		g := v.grid()
		for i, r := range revs {
			g.add(fmt.Sprintf("i%d", i), "ACTIVE", r, "t"+strings.ReplaceAll(r, ":", ""), "RUNNING")
		}
		return v
	}
	snap := func(v *daemonView, prev *liveSnap, seq int64) *liveSnap {
		p, err := c.livePartsAfter(v, prev)
		if err != nil {
			t.Fatal(err)
		}
		s := &liveSnap{seq: seq, liveParts: *p, view: v}
		if prev != nil && !s.diff(prev) {
			return nil
		}
		return s
	}
	first := snap(view("a:1", "a:1", "a:1"), nil, 1)
	if snap(view("a:1", "a:1", "a:1"), first, 2) != nil {
		t.Fatal("an unchanged render counts as a change")
	}
	second := snap(view("a:1", "a:2", "a:1"), first, 3)
	if second == nil || second.full || !slices.Equal(second.changed, []int{1}) || second.prev != 1 {
		t.Fatalf("one cell changed: %+v", second)
	}
	var p struct {
		Head   *string
		Legend *string
		Cells  [][2]string
	}
	if err := json.Unmarshal(second.patch([]byte("<form>mine</form>"), false), &p); err != nil {
		t.Fatal(err)
	}
	if p.Head != nil || p.Legend == nil || len(p.Cells) != 1 || p.Cells[0][0] != "i1" || !strings.Contains(p.Cells[0][1], `data-revision="a:2"`) ||
		!strings.Contains(p.Cells[0][1], `href="/console/task?cluster=prod&amp;task=ta2"`) {
		t.Fatalf("patch: %+v", p)
	}
	// Only this page's stop form changed: the head is sent, with it.
	if err := json.Unmarshal(second.patch([]byte("<form>mine</form>"), true), &p); err != nil {
		t.Fatal(err)
	}
	if p.Head == nil || len(p.Cells) != 1 {
		t.Fatalf("patch with the stop form changed: %+v", p)
	}
	if third := snap(view("a:1", "a:2"), second, 4); third == nil || !third.full {
		t.Fatalf("an instance gone: %+v, want the whole part", third)
	}
	// The whole part is the parts in their frame, the form in its slot.
	if f := string(second.frame([]byte("<form>mine</form>"))); strings.Count(f, "data-instance=") != 3 || strings.Contains(f, string(stopMarker)) {
		t.Fatalf("frame:\n%s", f)
	}
}
