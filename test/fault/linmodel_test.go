package fault

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/anishathalye/porcupine"
)

// The sequential model the linearizability check holds the API to. Each
// operation touches one key (a daemon, a task, a container instance), and
// porcupine checks each key's history on its own.

// Operation kinds.
const (
	opCreateDaemon   = "CreateDaemon"
	opUpdateDaemon   = "UpdateDaemon"
	opDescribeDaemon = "DescribeDaemon"
	opDescribeDep    = "DescribeDaemonDeployments"
	opRunTask        = "RunTask"
	opStopTask       = "StopTask"
	opDescribeTask   = "DescribeTasks"
	opSetState       = "UpdateContainerInstancesState"
	opDescribeInst   = "DescribeContainerInstances"
)

// linIn is an operation's input: its kind, the key it touches
// ("daemon:NAME", "task:ARN", "instance:ARN") and its argument (the task
// definition of a daemon write, the deployment described, the status set).
type linIn struct {
	Kind, Key, Arg string
}

// linOut is what the operation returned. Unknown: the request may have
// been applied, its answer was lost (the operation's return time is then
// the end of the history). Err is a definite refusal: "exists",
// "notfound"; a refused write changed nothing.
type linOut struct {
	Unknown  bool
	Err      string
	Dep      string // a daemon's current deployment; the deployment an update created
	Status   string // deployment, task (last) or instance status
	Desired  string // task desired status
	Instance string // task's container instance
}

// Daemon deployment statuses, in the order they may move.
var depRank = map[string]int{"PENDING": 0, "IN_PROGRESS": 1, "STOP_REQUESTED": 2, "ROLLBACK_IN_PROGRESS": 2,
	"SUCCESSFUL": 3, "STOPPED": 3, "ROLLBACK_SUCCESSFUL": 3, "ROLLBACK_FAILED": 3, "FAILED": 3}

func depFinal(s string) bool { return depRank[s] == 3 }

// linState is one key's state. Values only; Step returns a changed copy.
type linState struct {
	// daemon
	exists bool
	cur    string            // current deployment
	deps   map[string]string // deployment → latest status read ("" none yet)
	gone   map[string]bool   // superseded deployments: must read as ended
	// task
	created  bool
	last     string
	desired  string
	instance string
	// instance
	status string
}

func (s linState) clone() linState {
	s.deps = maps.Clone(s.deps)
	s.gone = maps.Clone(s.gone)
	return s
}

func linEqual(a, b any) bool {
	x, y := a.(linState), b.(linState)
	return x.exists == y.exists && x.cur == y.cur && maps.Equal(x.deps, y.deps) && maps.Equal(x.gone, y.gone) &&
		x.created == y.created && x.last == y.last && x.desired == y.desired && x.instance == y.instance && x.status == y.status
}

// linStep is the sequential specification.
func linStep(state, input, output any) (bool, any) {
	s, in, out := state.(linState), input.(linIn), output.(linOut)
	switch in.Kind {
	case opCreateDaemon, opUpdateDaemon:
		if out.Err == "exists" {
			return in.Kind == opCreateDaemon && s.exists, s
		}
		if out.Err == "notfound" {
			return in.Kind == opUpdateDaemon && !s.exists, s
		}
		if out.Unknown && out.Dep == "" {
			// Its deployment was never found: it changed nothing.
			return true, s
		}
		if (in.Kind == opCreateDaemon) == s.exists {
			return false, s
		}
		n := s.clone()
		if n.deps == nil {
			n.deps, n.gone = map[string]string{}, map[string]bool{}
		}
		if _, dup := n.deps[out.Dep]; dup {
			return false, s
		}
		if n.cur != "" && !depFinal(n.deps[n.cur]) {
			// The update stopped the deployment in flight in its own write.
			n.gone[n.cur] = true
		}
		n.exists, n.cur, n.deps[out.Dep] = true, out.Dep, "PENDING"
		return true, n
	case opDescribeDaemon:
		if out.Err == "notfound" {
			return !s.exists, s
		}
		return s.exists && out.Dep == s.cur, s
	case opDescribeDep:
		prev, ok := s.deps[in.Arg]
		r, known := depRank[out.Status]
		switch {
		case !ok || !known || r < depRank[prev]:
			return false, s
		case depFinal(prev) && out.Status != prev:
			return false, s // an ended deployment does not change
		case s.gone[in.Arg] && !depFinal(out.Status):
			return false, s // superseded, still shown running
		}
		n := s.clone()
		n.deps[in.Arg] = out.Status
		return true, n
	case opRunTask:
		if s.created || out.Desired != "RUNNING" {
			return false, s
		}
		n := s
		n.created, n.last, n.desired, n.instance = true, out.Status, "RUNNING", out.Instance
		return true, n
	case opStopTask, opDescribeTask:
		if !s.created {
			return false, s
		}
		n := s
		if out.Unknown { // a StopTask that may have been applied
			n.desired = "STOPPED"
			return true, n
		}
		if out.Err != "" {
			return false, s // the task was lost
		}
		if statusRank[out.Status] < statusRank[s.last] || (s.desired == "STOPPED" && out.Desired != "STOPPED") ||
			(out.Status == "STOPPED" && out.Desired != "STOPPED") ||
			(s.instance != "" && out.Instance != s.instance) {
			return false, s
		}
		if in.Kind == opStopTask && out.Desired != "STOPPED" {
			return false, s
		}
		n.last, n.desired = out.Status, out.Desired
		if out.Instance != "" {
			n.instance = out.Instance
		}
		return true, n
	case opSetState:
		if out.Unknown && retired(s.status) {
			return true, s
		}
		// Activation is daemon first: REGISTERING until the instance's
		// critical daemons run, then the server makes it ACTIVE.
		activating := in.Arg == "ACTIVE" && s.status != "ACTIVE"
		if out.Err != "" || retired(s.status) || (!out.Unknown && out.Status != in.Arg && !(activating && out.Status == "REGISTERING")) {
			return false, s
		}
		n := s
		n.status = in.Arg
		if activating && (out.Unknown || out.Status == "REGISTERING") {
			n.status = "REGISTERING"
		}
		return true, n
	case opDescribeInst:
		// The server may retire the instance (auto-repair); it never
		// comes back.
		if retired(out.Status) && (!retired(s.status) || s.status == "DEREGISTERING") {
			n := s
			n.status = out.Status
			return true, n
		}
		if s.status == "REGISTERING" && out.Status == "ACTIVE" {
			n := s
			n.status = "ACTIVE" // its daemons run: the server activated it
			return true, n
		}
		return out.Status == s.status, s
	}
	return false, s
}

func retired(status string) bool { return status == "DEREGISTERING" || status == "INACTIVE" }

// linModel builds the model; initial gives a key's state before the
// history (the instances are ACTIVE when it starts).
func linModel(initial func(key string) linState) porcupine.Model {
	return porcupine.Model{
		Partition: func(h []porcupine.Operation) [][]porcupine.Operation {
			by := map[string][]porcupine.Operation{}
			for _, op := range h {
				k := op.Input.(linIn).Key
				by[k] = append(by[k], op)
			}
			var out [][]porcupine.Operation
			for _, k := range slices.Sorted(maps.Keys(by)) {
				out = append(out, by[k])
			}
			return out
		},
		// Each partition starts from the first operation's key: the
		// checker gives Init no key, so the initial state is a
		// placeholder that the first step of a key fills in.
		Init: func() any { return linState{status: "?"} },
		Step: func(state, input, output any) (bool, any) {
			s := state.(linState)
			if s.status == "?" {
				s = initial(input.(linIn).Key)
			}
			return linStep(s, input, output)
		},
		Equal:             linEqual,
		DescribeOperation: describeLinOp,
		DescribeState: func(state any) string {
			s := state.(linState)
			switch {
			case s.status == "?":
				return "(initial)"
			case s.deps != nil || s.exists:
				var b strings.Builder
				fmt.Fprintf(&b, "current %s", short(s.cur))
				for _, d := range slices.Sorted(maps.Keys(s.deps)) {
					fmt.Fprintf(&b, "; %s %s", short(d), s.deps[d])
					if s.gone[d] {
						b.WriteString(" (superseded)")
					}
				}
				return b.String()
			case s.created:
				return fmt.Sprintf("last %s, desired %s, on %s", s.last, s.desired, short(s.instance))
			}
			return s.status
		},
	}
}

// short is the last path element of an ARN.
func short(arn string) string {
	if i := strings.LastIndex(arn, "/"); i >= 0 {
		return arn[i+1:]
	}
	return arn
}

func describeLinOp(input, output any) string {
	in, out := input.(linIn), output.(linOut)
	arg := ""
	if in.Arg != "" {
		arg = short(in.Arg)
	}
	res := ""
	switch {
	case out.Unknown && out.Dep != "":
		res = "applied? " + short(out.Dep)
	case out.Unknown:
		res = "unknown"
	case out.Err != "":
		res = out.Err
	case out.Dep != "":
		res = short(out.Dep)
	case out.Desired != "":
		res = fmt.Sprintf("%s/%s on %s", out.Status, out.Desired, short(out.Instance))
	default:
		res = out.Status
	}
	return fmt.Sprintf("%s(%s) → %s", in.Kind, arg, res)
}

// TestLinearizabilityModel runs the model on hand-written histories: the
// ones a correct server produces pass, and each kind of wrong answer the
// fault test looks for is Illegal.
func TestLinearizabilityModel(t *testing.T) {
	init := func(string) linState { return linState{status: "ACTIVE"} }
	type o struct {
		in         linIn
		out        linOut
		call, ret  int64
		unknownRet bool
	}
	d := func(kind, arg string) linIn { return linIn{Kind: kind, Key: "daemon:a", Arg: arg} }
	tk := func(kind string) linIn { return linIn{Kind: kind, Key: "task:t"} }
	ci := func(kind, arg string) linIn { return linIn{Kind: kind, Key: "instance:i", Arg: arg} }
	cases := []struct {
		name  string
		legal bool
		ops   []o
	}{
		{"create, update, read the latest", true, []o{
			{d(opCreateDaemon, "td1"), linOut{Dep: "d1"}, 0, 1, false},
			{d(opUpdateDaemon, "td2"), linOut{Dep: "d2"}, 2, 3, false},
			{d(opDescribeDaemon, ""), linOut{Dep: "d2"}, 4, 5, false},
			{d(opDescribeDep, "d1"), linOut{Status: "STOPPED"}, 4, 5, false},
		}},
		{"stale daemon read after the update returned", false, []o{
			{d(opCreateDaemon, "td1"), linOut{Dep: "d1"}, 0, 1, false},
			{d(opUpdateDaemon, "td2"), linOut{Dep: "d2"}, 2, 3, false},
			{d(opDescribeDaemon, ""), linOut{Dep: "d1"}, 4, 5, false},
		}},
		{"concurrent read may see either", true, []o{
			{d(opCreateDaemon, "td1"), linOut{Dep: "d1"}, 0, 1, false},
			{d(opUpdateDaemon, "td2"), linOut{Dep: "d2"}, 2, 6, false},
			{d(opDescribeDaemon, ""), linOut{Dep: "d1"}, 3, 4, false},
		}},
		{"read goes back to the older value", false, []o{
			{d(opCreateDaemon, "td1"), linOut{Dep: "d1"}, 0, 1, false},
			{d(opUpdateDaemon, "td2"), linOut{Dep: "d2"}, 2, 9, false},
			{d(opDescribeDaemon, ""), linOut{Dep: "d2"}, 3, 4, false},
			{d(opDescribeDaemon, ""), linOut{Dep: "d1"}, 5, 6, false},
		}},
		{"update with a lost answer, seen applied", true, []o{
			{d(opCreateDaemon, "td1"), linOut{Dep: "d1"}, 0, 1, false},
			{d(opUpdateDaemon, "td2"), linOut{Unknown: true, Dep: "d2"}, 2, 0, true},
			{d(opDescribeDaemon, ""), linOut{Dep: "d1"}, 3, 4, false},
			{d(opDescribeDaemon, ""), linOut{Dep: "d2"}, 5, 6, false},
		}},
		{"superseded deployment still in progress", false, []o{
			{d(opCreateDaemon, "td1"), linOut{Dep: "d1"}, 0, 1, false},
			{d(opUpdateDaemon, "td2"), linOut{Dep: "d2"}, 2, 3, false},
			{d(opDescribeDep, "d1"), linOut{Status: "IN_PROGRESS"}, 4, 5, false},
		}},
		{"deployment status goes back", false, []o{
			{d(opCreateDaemon, "td1"), linOut{Dep: "d1"}, 0, 1, false},
			{d(opDescribeDep, "d1"), linOut{Status: "SUCCESSFUL"}, 2, 3, false},
			{d(opDescribeDep, "d1"), linOut{Status: "IN_PROGRESS"}, 4, 5, false},
		}},
		{"create twice", false, []o{
			{d(opCreateDaemon, "td1"), linOut{Dep: "d1"}, 0, 1, false},
			{d(opCreateDaemon, "td2"), linOut{Dep: "d2"}, 2, 3, false},
		}},
		{"daemon lost", false, []o{
			{d(opCreateDaemon, "td1"), linOut{Dep: "d1"}, 0, 1, false},
			{d(opDescribeDaemon, ""), linOut{Err: "notfound"}, 2, 3, false},
		}},
		{"task runs, is stopped, stops", true, []o{
			{tk(opRunTask), linOut{Status: "PROVISIONING", Desired: "RUNNING"}, 0, 1, false},
			{tk(opDescribeTask), linOut{Status: "RUNNING", Desired: "RUNNING", Instance: "i"}, 2, 3, false},
			{tk(opStopTask), linOut{Status: "RUNNING", Desired: "STOPPED", Instance: "i"}, 4, 5, false},
			{tk(opDescribeTask), linOut{Status: "STOPPED", Desired: "STOPPED", Instance: "i"}, 6, 7, false},
		}},
		{"stop not seen after it returned", false, []o{
			{tk(opRunTask), linOut{Status: "PENDING", Desired: "RUNNING"}, 0, 1, false},
			{tk(opStopTask), linOut{Status: "PENDING", Desired: "STOPPED"}, 2, 3, false},
			{tk(opDescribeTask), linOut{Status: "RUNNING", Desired: "RUNNING"}, 4, 5, false},
		}},
		{"stop with a lost answer", true, []o{
			{tk(opRunTask), linOut{Status: "PENDING", Desired: "RUNNING"}, 0, 1, false},
			{tk(opStopTask), linOut{Unknown: true}, 2, 0, true},
			{tk(opDescribeTask), linOut{Status: "RUNNING", Desired: "RUNNING", Instance: "i"}, 3, 4, false},
			{tk(opDescribeTask), linOut{Status: "RUNNING", Desired: "STOPPED", Instance: "i"}, 5, 6, false},
		}},
		{"task status goes back", false, []o{
			{tk(opRunTask), linOut{Status: "PENDING", Desired: "RUNNING"}, 0, 1, false},
			{tk(opDescribeTask), linOut{Status: "RUNNING", Desired: "RUNNING", Instance: "i"}, 2, 3, false},
			{tk(opDescribeTask), linOut{Status: "PENDING", Desired: "RUNNING", Instance: "i"}, 4, 5, false},
		}},
		{"task moves to another instance", false, []o{
			{tk(opRunTask), linOut{Status: "PENDING", Desired: "RUNNING", Instance: "i"}, 0, 1, false},
			{tk(opDescribeTask), linOut{Status: "RUNNING", Desired: "RUNNING", Instance: "j"}, 2, 3, false},
		}},
		{"task lost", false, []o{
			{tk(opRunTask), linOut{Status: "PENDING", Desired: "RUNNING"}, 0, 1, false},
			{tk(opDescribeTask), linOut{Err: "notfound"}, 2, 3, false},
		}},
		{"drain, read, activate, read", true, []o{
			{ci(opDescribeInst, ""), linOut{Status: "ACTIVE"}, 0, 1, false},
			{ci(opSetState, "DRAINING"), linOut{Status: "DRAINING"}, 2, 3, false},
			{ci(opDescribeInst, ""), linOut{Status: "DRAINING"}, 4, 5, false},
			{ci(opSetState, "ACTIVE"), linOut{Unknown: true}, 6, 0, true},
			{ci(opDescribeInst, ""), linOut{Status: "ACTIVE"}, 7, 8, false},
		}},
		{"retired by the server, not back", false, []o{
			{ci(opDescribeInst, ""), linOut{Status: "INACTIVE"}, 0, 1, false},
			{ci(opSetState, "ACTIVE"), linOut{Unknown: true}, 2, 0, true},
			{ci(opDescribeInst, ""), linOut{Status: "ACTIVE"}, 3, 4, false},
		}},
		{"activated daemon first", true, []o{
			{ci(opSetState, "DRAINING"), linOut{Status: "DRAINING"}, 0, 1, false},
			{ci(opSetState, "ACTIVE"), linOut{Status: "REGISTERING"}, 2, 3, false},
			{ci(opDescribeInst, ""), linOut{Status: "REGISTERING"}, 4, 5, false},
			{ci(opDescribeInst, ""), linOut{Status: "ACTIVE"}, 6, 7, false},
		}},
		{"activation answered REGISTERING is not DRAINING again", false, []o{
			{ci(opSetState, "DRAINING"), linOut{Status: "DRAINING"}, 0, 1, false},
			{ci(opSetState, "ACTIVE"), linOut{Status: "REGISTERING"}, 2, 3, false},
			{ci(opDescribeInst, ""), linOut{Status: "DRAINING"}, 4, 5, false},
		}},
		{"an ACTIVE instance is not answered REGISTERING", false, []o{
			{ci(opSetState, "ACTIVE"), linOut{Status: "REGISTERING"}, 0, 1, false},
		}},
		{"drain not seen", false, []o{
			{ci(opSetState, "DRAINING"), linOut{Status: "DRAINING"}, 2, 3, false},
			{ci(opDescribeInst, ""), linOut{Status: "ACTIVE"}, 4, 5, false},
		}},
	}
	for _, c := range cases {
		var h []porcupine.Operation
		for i, x := range c.ops {
			ret := x.ret
			if x.unknownRet {
				ret = 1 << 40
			}
			h = append(h, porcupine.Operation{ClientId: i, Input: x.in, Output: x.out, Call: x.call, Return: ret})
		}
		if got := porcupine.CheckOperations(linModel(init), h); got != c.legal {
			t.Errorf("%s: linearizable %v, want %v", c.name, got, c.legal)
		}
	}
}
