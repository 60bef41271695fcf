package servicedeploy

import (
	"slices"
	"testing"
	"time"
)

func protectedFor(t Task, d time.Duration) Task {
	return with(t, func(t *Task) { t.ProtectedUntil = t0.Add(d) })
}

// Scale-in passes over protected tasks and comes back when their
// protection ends; a protected task on a draining instance stays, which
// keeps the instance from being deregistered.
func TestProtectedTasksSurviveScaleInAndDrains(t *testing.T) {
	h := time.Hour
	tasks := []Task{task("old", "new", "RUNNING", "ACTIVE", 3*h), protectedFor(task("mid", "new", "RUNNING", "ACTIVE", 2*h), 10*time.Minute),
		protectedFor(task("young", "new", "RUNNING", "ACTIVE", h), 5*time.Minute)}
	p := Decide(specOf(1, 100, 200), tasks, t0)
	if !slices.Equal(p.Stops, []Stop{{"old", ScaleIn}}) || p.Steady || !p.Recheck.Equal(t0.Add(5*time.Minute)) {
		t.Fatalf("scale-in to 1 with two protected: stops %v steady %v recheck %v", p.Stops, p.Steady, p.Recheck)
	}
	// Expired protection protects nothing.
	p = Decide(specOf(1, 100, 200), tasks, t0.Add(6*time.Minute))
	if !slices.Equal(p.Stops, []Stop{{"young", ScaleIn}, {"old", ScaleIn}}) {
		t.Fatalf("after one protection ended: stops %v", p.Stops)
	}
	// Deleting the service stops every task, protected or not.
	sp := specOf(1, 100, 200)
	sp.Deleting = true
	if p = Decide(sp, tasks, t0); len(p.Stops) != 3 {
		t.Fatalf("deleting: stops %v", p.Stops)
	}

	// Draining: the protected task stays until its protection ends, the
	// other moves.
	drain := []Task{protectedFor(task("a", "new", "RUNNING", "DRAINING", h), 10*time.Minute), task("b", "new", "RUNNING", "DRAINING", h),
		task("c", "new", "RUNNING", "ACTIVE", h), task("d", "new", "RUNNING", "ACTIVE", h)}
	p = Decide(specOf(2, 0, 200), drain, t0)
	if !slices.Equal(p.Stops, []Stop{{"b", Draining}}) || !p.Recheck.Equal(t0.Add(10*time.Minute)) {
		t.Fatalf("draining with one protected: stops %v recheck %v", p.Stops, p.Recheck)
	}
	p = Decide(specOf(2, 0, 200), drain, t0.Add(10*time.Minute))
	if !slices.Contains(p.Stops, Stop{"a", Draining}) {
		t.Fatalf("protection over, the task still stays on the draining instance: %v", p.Stops)
	}
	// An older deployment's protected task is still replaced: protection
	// is about scale-in, not deployments.
	p = Decide(specOf(1, 0, 200), []Task{protectedFor(task("o", "old", "RUNNING", "ACTIVE", h), h), task("n", "new", "RUNNING", "ACTIVE", 0)}, t0)
	if !slices.Equal(p.Stops, []Stop{{"o", Replaced}}) {
		t.Fatalf("replacement: stops %v", p.Stops)
	}
}
