package console

import (
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
