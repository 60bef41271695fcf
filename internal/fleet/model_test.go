package fleet

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"

	"github.com/capstanhq/capstan/internal/api/shapes"
	"github.com/capstanhq/capstan/internal/servicedeploy"
	"github.com/capstanhq/capstan/internal/store"
)

// openStore opens a store on an embedded etcd of the test's own, closed
// when the test ends.
func openStore(t *testing.T) *store.Store {
	t.Helper()
	st, err := store.Open(context.Background(), store.Config{DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	return st
}

func mustJSON(t testing.TB, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func instanceRecord(id, status string, cpu, mem int) store.ContainerInstance {
	ci := store.ContainerInstance{ID: id, Cluster: "c"}
	ci.Status, ci.CapacityProviderName = status, "cp"
	ci.Attributes = []shapes.Attribute{{Name: "zone", Value: "a"}}
	ci.RemainingResources = resources{cpu: cpu, memory: mem, ports: []string{"tcp/22"}}.Shapes()
	return ci
}

// The fleet view follows puts and deletes of every record kind it reads,
// in any order, and forgets an instance only when nothing refers to it.
func TestFleetFollowsRecords(t *testing.T) {
	f := newModel()
	put := func(kind, key string, v any) { f.change(kind, key, mustJSON(t, v), 7) }
	del := func(kind, key string) { f.change(kind, key, nil, 0) }

	// A session and a manifest entry may be seen before the instance.
	put("sessions/", "sessions/c/i1", store.Session{Server: "s"})
	put("desired/", "desired/c/i1/t1", map[string]string{"group": "service:web"})
	put("containerinstances/", "containerinstances/c/i1", instanceRecord("i1", "ACTIVE", 1024, 2048))
	put("tasks/", "tasks/c/t1", map[string]string{"group": "service:web", "capstanInstanceId": "i1", "lastStatus": "RUNNING", "desiredStatus": "RUNNING", "startedBy": "d1"})
	put("tasks/", "tasks/c/t2", map[string]string{"group": "service:web", "capstanInstanceId": "", "capacityProviderName": "cp", "lastStatus": "PROVISIONING", "desiredStatus": "RUNNING"})
	put("daemonplacements/", "daemonplacements/c/i1/agent", DaemonPlacement{Daemon: "agent", TaskID: "t9", RevisionArn: "r1"})
	put("tasks/", "tasks/c/t9", map[string]string{"group": "daemon:agent", "capstanInstanceId": "i1", "lastStatus": "RUNNING", "desiredStatus": "RUNNING"})
	put("credentials/", "credentials/AK1", map[string]bool{"managed": true})

	c := f.clusters["c"]
	fi := c.instances["i1"]
	if fi == nil || !fi.rec || !fi.connected || fi.cpu != 1024 || fi.mem != 2048 || fi.rev != 7 || fi.attributes["zone"] != "a" || fi.attributes["ecs.instance-id"] != "i1" {
		t.Fatalf("instance view %+v", fi)
	}
	if rev, running := c.daemonOn(fi, "agent"); rev != "r1" || !running {
		t.Fatalf("daemonOn = %q %v, want r1 running", rev, running)
	}
	if _, ok := c.waiting["t2"]; !ok || len(c.waiting) != 1 {
		t.Fatalf("waiting %v, want t2", c.waiting)
	}
	if len(c.groups["service:web"]) != 2 || len(c.groups["daemon:agent"]) != 1 {
		t.Fatalf("groups %v", c.groups)
	}
	if !f.managed["AK1"] {
		t.Fatal("managed credential not seen")
	}

	// The waiting task is placed; the daemon task stops; the session goes.
	put("tasks/", "tasks/c/t2", map[string]string{"group": "service:web", "capstanInstanceId": "i1", "lastStatus": "PENDING", "desiredStatus": "RUNNING"})
	put("tasks/", "tasks/c/t9", map[string]string{"group": "daemon:agent", "capstanInstanceId": "i1", "lastStatus": "STOPPED", "desiredStatus": "STOPPED"})
	del("sessions/", "sessions/c/i1")
	if len(c.waiting) != 0 {
		t.Fatalf("waiting %v after placement", c.waiting)
	}
	if _, running := c.daemonOn(fi, "agent"); running || fi.connected {
		t.Fatalf("daemon running %v, connected %v after stop and disconnect", running, fi.connected)
	}
	// A task changing group moves between the group sets.
	put("tasks/", "tasks/c/t2", map[string]string{"group": "family:batch", "capstanInstanceId": "i1", "lastStatus": "PENDING", "desiredStatus": "RUNNING"})
	if len(c.groups["service:web"]) != 1 || len(c.groups["family:batch"]) != 1 {
		t.Fatalf("groups after a move %v", c.groups)
	}
	del("tasks/", "tasks/c/t2")
	if _, ok := c.groups["family:batch"]; ok {
		t.Fatal("an emptied group stays")
	}

	// The record goes but a manifest entry still names the instance.
	del("containerinstances/", "containerinstances/c/i1")
	del("daemonplacements/", "daemonplacements/c/i1/agent")
	if c.instances["i1"] == nil || c.instances["i1"].rec {
		t.Fatal("instance entry dropped (or kept as recorded) while its manifest still has a task")
	}
	del("desired/", "desired/c/i1/t1")
	if c.instances["i1"] == nil {
		t.Fatal("instance entry dropped while tasks still point at it")
	}
	// A record coming back is the entry the tasks point at.
	put("containerinstances/", "containerinstances/c/i1", instanceRecord("i1", "DRAINING", 1, 1))
	if t1 := c.tasks["t1"]; t1.inst != c.instances["i1"] || t1.inst.status != "DRAINING" {
		t.Fatal("a task points at a stale instance entry")
	}
	del("containerinstances/", "containerinstances/c/i1")
	del("tasks/", "tasks/c/t1")
	if c.instances["i1"] == nil {
		t.Fatal("instance entry dropped while t9 still points at it")
	}
	put("tasks/", "tasks/c/t9", map[string]string{"group": "daemon:agent", "capstanInstanceId": "i3", "lastStatus": "STOPPED", "desiredStatus": "STOPPED"})
	if c.instances["i1"] != nil {
		t.Fatal("instance entry kept with nothing referring to it")
	}
	if fi := c.instances["i3"]; fi == nil || c.tasks["t9"].inst != fi || fi.refs != 1 {
		t.Fatalf("a task moved to another instance points at %+v", c.tasks["t9"].inst)
	}
	// A reset of the tasks drops what only they referred to.
	fleetIndex{f: f, kind: "tasks/"}.Reset()
	if c.instances["i3"] != nil || len(c.tasks) != 0 {
		t.Fatal("after a task reset, an entry only a task referred to stays")
	}

	// A reset (the cache reloaded) forgets one kind and keeps the others.
	put("containerinstances/", "containerinstances/c/i2", instanceRecord("i2", "ACTIVE", 10, 10))
	put("sessions/", "sessions/c/i2", store.Session{})
	fleetIndex{f: f, kind: "sessions/"}.Reset()
	if fi := c.instances["i2"]; fi == nil || fi.connected || !fi.rec {
		t.Fatalf("after a session reset: %+v", fi)
	}
}

// Through the store: a read after a write sees the write in the fleet
// view (the index is fed as the cache applies changes), and what the
// services controller plans with comes from it.
func TestFleetReadsItsWrites(t *testing.T) {
	ctx := context.Background()
	st := openStore(t)
	s := New(Config{Store: st, Region: "us-east-1", AccountID: "123456789012"})
	ci := instanceRecord("i1", "ACTIVE", 1024, 2048)
	registered := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	ci.RegisteredAt = shapes.At(registered)
	if _, err := st.Txn().Create(store.ContainerInstanceKey("c", "i1"), ci).Create(store.SessionKey("c", "i1"), store.Session{}).Commit(ctx); err != nil {
		t.Fatal(err)
	}
	cands, err := s.candidates(ctx, "c", "service:web", nil, need{})
	if err != nil || len(cands) != 1 || cands[0].cpu != 1024 {
		t.Fatalf("candidates %+v, %v", cands, err)
	}
	task := store.Task{ID: "t1", Cluster: "c", InstanceID: "i1"}
	task.Group, task.LastStatus, task.DesiredStatus, task.StartedBy = "service:web", "PENDING", "RUNNING", "d1"
	if _, err := st.Txn().Create(store.TaskKey("c", "t1"), task).Create(store.DesiredKey("c", "i1", "t1"), map[string]string{"group": "service:web"}).Commit(ctx); err != nil {
		t.Fatal(err)
	}
	got, err := s.PlanTasks(ctx, "c", "service:web", nil)
	if err != nil || len(got) != 1 {
		t.Fatalf("PlanTasks = %+v, %v", got, err)
	}
	want := servicedeploy.Task{ID: "t1", Deployment: "d1", LastStatus: "PENDING", Desired: "RUNNING", Instance: "ACTIVE", InstanceID: "i1", InstanceSince: registered}
	if got[0] != want {
		t.Fatalf("PlanTasks = %+v, want %+v", got[0], want)
	}
	cands, err = s.candidates(ctx, "c", "service:web", nil, need{})
	if err != nil || cands[0].groupTasks != 1 || cands[0].tasks != 1 {
		t.Fatalf("candidates after a placement %+v, %v", cands[0], err)
	}
}

// walkCounts is DaemonCounts by a walk over every instance, as it was
// computed before the fleet kept the counts.
func walkCounts(c *fleetCluster, daemon string, cps []string) map[string]*DaemonCount {
	out := map[string]*DaemonCount{}
	for _, cp := range cps {
		out[cp] = &DaemonCount{Running: map[string]int{}, Draining: map[string]int{}}
	}
	for _, fi := range c.instances {
		if !fi.rec || fi.status == "INACTIVE" || fi.cp == "" {
			continue
		}
		n, ok := out[fi.cp]
		if !ok {
			continue
		}
		n.Instances++
		rev, running := c.daemonOn(fi, daemon)
		if running {
			if fi.status == "DRAINING" {
				n.Draining[rev]++
			} else {
				n.Running[rev]++
			}
		}
		if !running && fi.status == "ACTIVE" {
			n.WithoutDaemon++
		}
	}
	return out
}

// The counts the fleet keeps match a walk over the fleet after every
// change of a random sequence: instances changing status and provider or
// going away, placements moving to other revisions and tasks, tasks
// starting, stopping, moving and going away, and a reset.
func TestFleetDaemonCountsFollowChanges(t *testing.T) {
	f := newModel()
	rnd := rand.New(rand.NewPCG(1, 2))
	pick := func(xs ...string) string { return xs[rnd.IntN(len(xs))] }
	insts := []string{"i0", "i1", "i2", "i3", "i4", "i5"}
	taskIDs := []string{"t0", "t1", "t2", "t3", "t4", "t5", "t6", "t7"}
	daemons := []string{"agent", "logs"}
	cps := []string{"cpa", "cpb"}
	check := func(step int, what string) {
		t.Helper()
		c := f.clusters["c"]
		if c == nil {
			return
		}
		for id, fi := range c.instances {
			busy := 0
			for tid := range fi.desired {
				if tk := c.tasks[tid]; tk != nil && tk.Last != "STOPPED" && !IsDaemonGroup(tk.Group) {
					busy++
				}
			}
			if fi.busy != busy {
				t.Fatalf("step %d (%s), %s: busy counted %d, walked %d", step, what, id, fi.busy, busy)
			}
		}
		for _, d := range daemons {
			for id, fi := range c.instances {
				if fi.rec && fi.status != "INACTIVE" && fi.cp != "" {
					rev, running := c.daemonOn(fi, d)
					if crev, crunning := c.daemonOnCounted(fi, d); crev != rev || crunning != running {
						t.Fatalf("step %d (%s), %s on %s: counted %q %v, walked %q %v", step, what, d, id, crev, crunning, rev, running)
					}
				}
			}
			want := walkCounts(c, d, cps)
			got := map[string]*DaemonCount{}
			for _, cp := range cps {
				got[cp] = c.daemonCount(d, cp)
			}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("step %d (%s), daemon %s:\nkept %s\nwalk %s", step, what, d, mustJSON(t, got), mustJSON(t, want))
			}
		}
	}
	taskJSON := map[string][]byte{}  // what each task's record holds now
	desired := map[string]struct{}{} // manifest keys there now
	for step := range 3000 {
		var what string
		switch rnd.IntN(9) {
		case 7, 8:
			id, tid := pick(insts...), pick(taskIDs...)
			key := "desired/c/" + id + "/" + tid
			what = key
			if rnd.IntN(3) == 0 {
				f.change("desired/", key, nil, 0)
				delete(desired, key)
				break
			}
			f.change("desired/", key, []byte(`{}`), int64(step))
			desired[key] = struct{}{}
		case 0, 1:
			id := pick(insts...)
			what = "instance " + id
			if rnd.IntN(8) == 0 {
				f.change("containerinstances/", "containerinstances/c/"+id, nil, 0)
				break
			}
			ci := instanceRecord(id, pick("REGISTERING", "ACTIVE", "ACTIVE", "DRAINING", "INACTIVE"), 1024, 2048)
			ci.CapacityProviderName = pick("cpa", "cpb", "")
			f.change("containerinstances/", "containerinstances/c/"+id, mustJSON(t, ci), int64(step))
		case 2, 3:
			id, d := pick(insts...), pick(daemons...)
			what = "placement " + id + "/" + d
			if rnd.IntN(6) == 0 {
				f.change("daemonplacements/", "daemonplacements/c/"+id+"/"+d, nil, 0)
				break
			}
			p := DaemonPlacement{Daemon: d, TaskID: pick(append(taskIDs, "")...), RevisionArn: pick("r1", "r2"), TaskRevisionArn: pick("", "r1", "r2")}
			f.change("daemonplacements/", "daemonplacements/c/"+id+"/"+d, mustJSON(t, p), int64(step))
		default:
			id := pick(taskIDs...)
			what = "task " + id
			if rnd.IntN(8) == 0 {
				f.change("tasks/", "tasks/c/"+id, nil, 0)
				delete(taskJSON, id)
				break
			}
			b := mustJSON(t, map[string]string{"group": pick("daemon:agent", "daemon:logs", "service:web"),
				"capstanInstanceId": pick(append(insts, "")...), "lastStatus": pick("PENDING", "RUNNING", "RUNNING", "STOPPED"),
				"desiredStatus": pick("RUNNING", "RUNNING", "STOPPED")})
			f.change("tasks/", "tasks/c/"+id, b, int64(step))
			taskJSON[id] = b
		}
		check(step, what)
		if step == 1500 {
			// The cache reloaded: the placements are replayed.
			c := f.clusters["c"]
			var keep []DaemonPlacement
			var at []string
			for id, fi := range c.instances {
				for _, p := range fi.placements {
					keep, at = append(keep, p.p), append(at, id)
				}
			}
			fleetIndex{f: f, kind: "daemonplacements/"}.Reset()
			check(step, "reset")
			for i, p := range keep {
				f.change("daemonplacements/", "daemonplacements/c/"+at[i]+"/"+p.Daemon, mustJSON(t, p), int64(step))
			}
			check(step, "replayed")
		}
		if step == 2000 || step == 2500 {
			// The manifests, then the tasks, reloaded.
			kind := map[int]string{2000: "desired/", 2500: "tasks/"}[step]
			fleetIndex{f: f, kind: kind}.Reset()
			check(step, "reset "+kind)
			if kind == "desired/" {
				for key := range desired {
					f.change(kind, key, []byte(`{}`), int64(step))
				}
			} else {
				for id, b := range taskJSON {
					f.change(kind, "tasks/c/"+id, b, int64(step))
				}
			}
			check(step, "replayed "+kind)
		}
	}
}

// DaemonCounts answers while a long fleet reader holds the view and a
// record change waits for it: DescribeDaemon used to queue behind both.
func TestDaemonCountsDoNotWaitForFleetReaders(t *testing.T) {
	ctx := context.Background()
	st := openStore(t)
	s := New(Config{Store: st, Region: "us-east-1", AccountID: "123456789012"})
	if _, err := st.Txn().Create(store.ContainerInstanceKey("c", "i1"), instanceRecord("i1", "ACTIVE", 1024, 2048)).Commit(ctx); err != nil {
		t.Fatal(err)
	}
	v, err := s.fleetView(ctx) // the long reader
	if err != nil {
		t.Fatal(err)
	}
	released := false
	defer func() {
		if !released {
			v.done()
		}
	}()
	// A change arrives: the cache's index feed waits for the reader.
	changed := make(chan struct{})
	go func() {
		s.model.change("containerinstances/", "containerinstances/c/i2", mustJSON(t, instanceRecord("i2", "ACTIVE", 1024, 2048)), 99)
		close(changed)
	}()
	// Wait until the writer is queued (it then holds back new readers of mu).
	deadline := time.Now().Add(10 * time.Second)
	for s.model.mu.TryRLock() {
		s.model.mu.RUnlock()
		if time.Now().After(deadline) {
			t.Fatal("the change never waited for the fleet lock")
		}
		time.Sleep(time.Millisecond)
	}
	got := make(chan map[string]*DaemonCount, 1)
	go func() {
		n, err := s.DaemonCounts(ctx, "c", "agent", []string{"arn:aws:ecs:us-east-1:123456789012:capacity-provider/cp"})
		if err != nil {
			t.Error(err)
		}
		got <- n
	}()
	select {
	case n := <-got:
		if c := n["arn:aws:ecs:us-east-1:123456789012:capacity-provider/cp"]; c == nil || c.Instances != 1 || c.WithoutDaemon != 1 {
			t.Fatalf("counts while the change waits = %s, want the one instance before it", mustJSON(t, n))
		}
	case <-time.After(10 * time.Second):
		t.Fatal("DaemonCounts waited for the fleet reader")
	}
	v.done()
	released = true
	<-changed
}

// BenchmarkDaemonOn finds a daemon's revision on each of 5,000 instances
// among 30,000 tasks, as a rollout's pass does: from the counts the view
// keeps, beside looking up the daemon's task (what the pass did before).
func BenchmarkDaemonOn(b *testing.B) {
	f := newModel()
	const instances = 5000
	var ids []string
	for i := range instances {
		id := fmt.Sprintf("%032x", i)
		ids = append(ids, id)
		ci := instanceRecord(id, "ACTIVE", 1024, 2048)
		f.change("containerinstances/", "containerinstances/c/"+id, mustJSON(b, ci), 1)
		for k := range 6 {
			tid := fmt.Sprintf("%032x", i*6+k)
			group := "service:web"
			if k == 0 {
				group = "daemon:agent"
				p := DaemonPlacement{Daemon: "agent", TaskID: tid, RevisionArn: "r1"}
				f.change("daemonplacements/", "daemonplacements/c/"+id+"/agent", mustJSON(b, p), 1)
			}
			f.change("tasks/", "tasks/c/"+tid, mustJSON(b, map[string]string{"group": group, "capstanInstanceId": id,
				"lastStatus": "RUNNING", "desiredStatus": "RUNNING"}), 1)
		}
	}
	c := f.clusters["c"]
	fis := make([]*fleetInstance, len(ids))
	for i, id := range ids {
		fis[i] = c.instances[id]
	}
	for _, m := range []struct {
		name string
		on   func(*fleetInstance, string) (string, bool)
	}{{"counted", c.daemonOnCounted}, {"task", c.daemonOn}} {
		b.Run(m.name, func(b *testing.B) {
			for b.Loop() {
				n := 0
				for _, fi := range fis {
					if _, running := m.on(fi, "agent"); running {
						n++
					}
				}
				if n != instances {
					b.Fatalf("%d running, want %d", n, instances)
				}
			}
		})
	}
}
