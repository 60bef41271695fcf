package fleet

import (
	"context"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/capstanhq/capstan/internal/api/shapes"
	"github.com/capstanhq/capstan/internal/protocol"
	"github.com/capstanhq/capstan/internal/store"
)

// A task whose record no longer says it stopped before the cutoff is
// kept, whatever the fleet view last read.
func TestExpireRereadsTheRecord(t *testing.T) {
	ctx := context.Background()
	st := openStore(t)
	s := New(Config{Store: st, Region: "us-east-1", AccountID: "123456789012"})
	id := NewInstanceID()
	task := store.Task{ID: id, Cluster: "c", InstanceID: "i1", Kind: protocol.KindService}
	task.LastStatus, task.StoppedAt = "STOPPED", shapes.At(time.Now().Add(-2*time.Hour))
	if _, err := st.Txn().Create(store.TaskKey("c", id), task).Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := st.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	// The record says otherwise than the view (as after a write the view
	// has not taken yet).
	s.model.mu.Lock()
	s.model.clusters["c"].tasks[id].stoppedAt = time.Now().Add(-3 * time.Hour)
	s.model.mu.Unlock()
	if n, err := s.ExpireStoppedTasks(ctx, time.Now().Add(-3*time.Hour+time.Minute)); err != nil || n != 0 {
		t.Fatalf("expired %d (%v), want 0: the record stopped after the cutoff", n, err)
	}
}

func TestExpireEvery(t *testing.T) {
	for _, c := range []struct{ retention, want time.Duration }{
		{time.Minute, 5 * time.Second}, {time.Hour, 5 * time.Minute}, {12 * time.Minute, time.Minute}, {24 * time.Hour, 5 * time.Minute},
	} {
		if got := ExpireEvery(c.retention); got != c.want {
			t.Errorf("ExpireEvery(%s) = %s, want %s", c.retention, got, c.want)
		}
	}
}

// RunExpiry looks on its own, once per tick of a ticker a twelfth of the
// retention apart (5 s at least, see TestExpireEvery), never before the
// first tick, and deletes both kinds.
func TestRunExpiry(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	st := openStore(t)
	s := New(Config{Store: st, Region: "us-east-1", AccountID: "123456789012"})
	// Unbuffered: a send is taken only by a RunExpiry waiting for its tick.
	ticks := make(chan time.Time)
	asked := make(chan time.Duration, 1)
	s.expiryTicks = func(every time.Duration) (<-chan time.Time, func()) {
		asked <- every
		return ticks, func() {}
	}
	stopped := time.Now().Add(-time.Hour)
	task := store.Task{ID: NewInstanceID(), Cluster: "c", InstanceID: NewInstanceID(), Kind: protocol.KindService}
	task.LastStatus, task.StoppedAt = "STOPPED", shapes.At(stopped)
	ci := instanceRecord(NewInstanceID(), "INACTIVE", 1, 1)
	ci.InactiveAt = stopped
	if _, err := st.Txn().Create(store.TaskKey("c", task.ID), task).Create(store.ContainerInstanceKey("c", ci.ID), ci).Commit(ctx); err != nil {
		t.Fatal(err)
	}
	// A look is a call of now: RunExpiry takes the cutoff once a pass.
	var looks atomic.Int32
	now := func() time.Time { looks.Add(1); return time.Now() }
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.RunExpiry(ctx, 12*time.Minute, now, slog.New(slog.DiscardHandler))
	}()
	select {
	case every := <-asked:
		if every != time.Minute {
			t.Fatalf("RunExpiry ticks every %s with a retention of 12 min, want a twelfth: 1m0s", every)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("RunExpiry asked for no ticker in 20 s")
	}
	tick := func(n int) {
		t.Helper()
		select {
		case ticks <- time.Now():
		case <-time.After(20 * time.Second):
			t.Fatalf("RunExpiry did not wait for tick %d in 20 s", n)
		}
	}
	count := func(prefix string) int {
		t.Helper()
		n, err := st.Count(ctx, prefix)
		if err != nil {
			t.Fatalf("count %s: %v", prefix, err)
		}
		return n
	}
	if nt, ni := count("tasks/c/"), count("containerinstances/c/"); nt != 1 || ni != 1 {
		t.Fatalf("before the first tick: %d tasks and %d instances, want 1 of each", nt, ni)
	}
	tick(1)
	deadline := time.Now().Add(20 * time.Second)
	for {
		nt, ni := count("tasks/c/"), count("containerinstances/c/")
		if nt == 0 && ni == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("20 s after a tick: %d tasks and %d instances left, want none", nt, ni)
		}
		time.Sleep(20 * time.Millisecond)
	}
	tick(2)
	tick(3)
	cancel()
	<-done
	if n := looks.Load(); n != 3 {
		t.Fatalf("RunExpiry looked %d times for 3 ticks, want once a tick", n)
	}
}

// A report that stops a task without saying when is dated by the server,
// alone or in a batch, so that the task still expires.
func TestStoppedReportIsDated(t *testing.T) {
	ctx := context.Background()
	st := openStore(t)
	s := New(Config{Store: st, Region: "us-east-1", AccountID: "123456789012"})
	tx := st.Txn()
	var report []protocol.TaskState
	var ids []string
	for range 3 {
		id := NewInstanceID()
		ids = append(ids, id)
		task := store.Task{ID: id, Cluster: "c", InstanceID: "i1", Kind: protocol.KindService}
		task.TaskArn, task.Group, task.Version = s.ARNs.Task("c", id), "service:web", ptr(int64(1))
		task.LastStatus, task.DesiredStatus = "RUNNING", "RUNNING"
		tx.Create(store.TaskKey("c", id), task)
		report = append(report, protocol.TaskState{Arn: task.TaskArn, LastStatus: "STOPPED", StopCode: "EssentialContainerExited", Seq: 1})
	}
	if _, err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	before := time.Now().Truncate(time.Millisecond)
	if err := s.ApplyTaskStates(ctx, "c", "i1", report[:2]); err != nil { // together
		t.Fatal(err)
	}
	if err := s.ApplyTaskStates(ctx, "c", "i1", report[2:]); err != nil { // alone
		t.Fatal(err)
	}
	for _, id := range ids {
		got, err := store.Get[store.Task](ctx, st, store.TaskKey("c", id))
		if err != nil || got.Value.LastStatus != "STOPPED" || got.Value.StoppedAt.Time.Before(before) || got.Value.StoppedAt.Time.After(time.Now()) {
			t.Fatalf("task %s: %s, stopped at %v (%v), want STOPPED dated by the server", id, got.Value.LastStatus, got.Value.StoppedAt, err)
		}
	}
}
