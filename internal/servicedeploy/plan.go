// Package servicedeploy decides a service deployment's next step: which
// tasks to start and stop to keep desiredCount running within the minimum
// healthy and maximum percents, start before stop, and when repeated quick
// failures throttle launches. Decide is a pure function of the service and
// its tasks; the services controller carries its plans out.
package servicedeploy

import (
	"slices"
	"strings"
	"time"
)

// Task is what planning knows of one task of a service.
type Task struct {
	ID         string
	Deployment string // the startedBy of the task: its deployment's ID
	LastStatus string
	Desired    string // RUNNING or STOPPED
	Health     string // HEALTHY, UNHEALTHY, UNKNOWN or empty
	// Instance is the status of the task's container instance, empty when
	// the instance is gone (deregistered or removed).
	Instance string
	// InstanceID and InstanceSince (its registration) order the stops of
	// tasks on draining instances.
	InstanceID    string
	InstanceSince time.Time
	StopCode      string
	CreatedAt     time.Time
	StartedAt     time.Time
	StoppedAt     time.Time
	// ProtectedUntil is when the task's scale-in protection ends: until
	// then neither scale-in nor a draining instance stops it.
	ProtectedUntil time.Time
}

// Spec is the service as planning needs it.
type Spec struct {
	Desired               int
	MinimumHealthyPercent int
	MaximumPercent        int
	// Primary is the deployment new tasks belong to; Others are the older
	// deployments still listed on the service.
	Primary string
	Others  []string
	// Deleting means the service is DRAINING: every task goes.
	Deleting bool
	// GracePeriod after a task starts during which UNHEALTHY is ignored.
	GracePeriod time.Duration
}

// Reason says why planning stops a task.
type Reason int

const (
	ScaleIn   Reason = iota // more tasks than desired
	Replaced                // the task belongs to an older deployment
	Draining                // its instance is draining
	Unhealthy               // it failed its health checks
	Orphaned                // its instance is gone
	Deleted                 // the service is being deleted
)

// Stop is a task to stop.
type Stop struct {
	ID     string
	Reason Reason
}

// Plan is one step towards a service's desired state.
type Plan struct {
	// Start is how many tasks of the primary deployment to launch.
	Start int
	Stops []Stop
	// Failures is the current run of failed launches; when Throttled,
	// launches wait until RetryAt.
	Failures  int
	Throttled bool
	RetryAt   time.Time
	// Stalled means tasks are missing but maximumPercent leaves no room to
	// start one and minimumHealthyPercent lets none stop.
	Stalled bool
	// Steady means desired tasks of the primary deployment run and nothing
	// else is left.
	Steady bool
	// Drained are older deployments with no task left.
	Drained []string
	// Recheck, when set, is when an UNHEALTHY task's grace period ends.
	Recheck time.Time
}

// MinHealthy is the fewest RUNNING tasks a replacement may leave: the
// percentage of desired, rounded up (as ECS rounds it).
func MinHealthy(desired, percent int) int { return (desired*percent + 99) / 100 }

// MaxTasks is the most tasks not yet stopped a service may have: the
// percentage of desired, rounded down (as ECS rounds it).
func MaxTasks(desired, percent int) int { return desired * percent / 100 }

// Instance statuses whose tasks must move elsewhere.
func leaving(status string) bool { return status == "DRAINING" || status == "DEREGISTERING" }

// live points at its task: a pass over thousands of tasks copied each
// one into its list (most of the planning's time and garbage).
type live struct {
	*Task
	running, unhealthy bool
}

// Decide plans one step for a service. The rules:
//   - tasks on instances that are gone are stopped and not counted;
//   - tasks not yet STOPPED, wanted or not, count against maximumPercent;
//   - tasks of the primary deployment on usable instances are kept up to
//     desired; extras stop, pending ones first, then newest first;
//   - every other wanted task (older deployment, draining instance,
//     unhealthy) leaves: pending and unhealthy ones at once, RUNNING ones
//     while the RUNNING healthy count stays at or above minimumHealthyPercent;
//   - missing tasks start as far as maximumPercent allows, so replacements
//     come before the tasks they replace stop.
func Decide(sp Spec, tasks []Task, now time.Time) Plan {
	var p Plan
	desired := sp.Desired
	if sp.Deleting {
		desired = 0
	}
	minHealthy := MinHealthy(desired, sp.MinimumHealthyPercent)
	maxTasks := MaxTasks(desired, sp.MaximumPercent)

	keepers := make([]live, 0, min(len(tasks), desired+1))
	var leavers []live
	present, stopping, healthy := 0, 0, 0
	// Tasks present of each older deployment: one without any is drained.
	others := make([]int, len(sp.Others))
	for i := range tasks {
		t := &tasks[i]
		if t.LastStatus == "STOPPED" {
			continue
		}
		if t.Instance == "" {
			if t.Desired != "STOPPED" {
				p.Stops = append(p.Stops, Stop{t.ID, Orphaned})
			}
			continue
		}
		present++
		for j, d := range sp.Others {
			if t.Deployment == d {
				others[j]++
			}
		}
		if t.Desired == "STOPPED" {
			stopping++
			continue
		}
		l := live{Task: t, running: t.LastStatus == "RUNNING"}
		if l.running && t.Health == "UNHEALTHY" {
			if end := t.StartedAt.Add(sp.GracePeriod); now.Before(end) {
				p.Recheck = earliest(p.Recheck, end)
			} else {
				l.unhealthy = true
			}
		}
		if l.running && !l.unhealthy {
			healthy++
		}
		if t.Deployment == sp.Primary && !l.unhealthy && !leaving(t.Instance) {
			keepers = append(keepers, l)
		} else {
			leavers = append(leavers, l)
		}
	}

	if extra := len(keepers) - desired; extra > 0 {
		// Sorted only when some must go: a pass over thousands of tasks
		// runs on every few of their reports.
		stopOrder(keepers)
		kept := keepers[:0:0]
		for _, l := range keepers {
			if extra == 0 || !sp.Deleting && p.protected(l, now) {
				kept = append(kept, l)
				continue
			}
			extra--
			p.Stops = append(p.Stops, Stop{l.ID, ifDeleting(sp, ScaleIn)})
			if l.running {
				healthy--
			}
		}
		keepers = kept
	}

	leaveOrder(leavers)
	budget := healthy - minHealthy
	kept := 0
	for _, l := range leavers {
		if r := leaveReason(sp, l); !sp.Deleting && (r == Draining || r == ScaleIn) && p.protected(l, now) {
			kept++
			continue
		}
		if l.running && !l.unhealthy {
			if budget <= 0 {
				kept++
				continue
			}
			budget--
		}
		p.Stops = append(p.Stops, Stop{l.ID, ifDeleting(sp, leaveReason(sp, l))})
	}

	missing := desired - len(keepers)
	if n := min(missing, maxTasks-present); n > 0 {
		fails, until := Throttle(sp.Primary, tasks, now)
		p.Failures = fails
		switch {
		case now.Before(until):
			p.Throttled, p.RetryAt = true, until
		case fails >= throttleAfter:
			p.Start = 1 // one probe at a time while launches keep failing
		default:
			p.Start = n
		}
	} else if missing > 0 && len(p.Stops) == 0 && stopping == 0 && kept > 0 {
		p.Stalled = true
	}

	allRunning := !slices.ContainsFunc(keepers, func(l live) bool { return !l.running })
	p.Steady = len(keepers) == desired && allRunning && present == desired && len(leavers) == 0 && len(p.Stops) == 0
	for j, d := range sp.Others {
		if d != sp.Primary && others[j] == 0 {
			p.Drained = append(p.Drained, d)
		}
	}
	return p
}

// protected says whether l's scale-in protection holds at now; when it
// does, the plan is rechecked when it ends.
func (p *Plan) protected(l live, now time.Time) bool {
	if !now.Before(l.ProtectedUntil) {
		return false
	}
	p.Recheck = earliest(p.Recheck, l.ProtectedUntil)
	return true
}

func ifDeleting(sp Spec, r Reason) Reason {
	if sp.Deleting {
		return Deleted
	}
	return r
}

func leaveReason(sp Spec, l live) Reason {
	switch {
	case l.unhealthy:
		return Unhealthy
	case leaving(l.Instance):
		return Draining
	case l.Deployment != sp.Primary:
		return Replaced
	}
	return ScaleIn
}

// stopOrder puts the tasks to stop first in front: pending before RUNNING,
// then newest first (the least proven go first).
func stopOrder(ls []live) { slices.SortStableFunc(ls, stopFirst) }

func stopFirst(a, b live) int {
	if a.running != b.running {
		if a.running {
			return 1
		}
		return -1
	}
	if c := b.CreatedAt.Compare(a.CreatedAt); c != 0 {
		return c
	}
	return strings.Compare(a.ID, b.ID)
}

// leaveOrder is stopOrder, except that tasks on draining instances go
// first, instance by instance, the longest-registered first: a daemon
// rollout drains the oldest instances first and holds a slot of its window
// until an instance is empty, so its tasks go in that order and together,
// not spread over every draining instance.
func leaveOrder(ls []live) {
	slices.SortStableFunc(ls, func(a, b live) int {
		da, db := leaving(a.Instance), leaving(b.Instance)
		switch {
		case da != db:
			if da {
				return -1
			}
			return 1
		case da:
			if c := a.InstanceSince.Compare(b.InstanceSince); c != 0 {
				return c
			}
			if c := strings.Compare(a.InstanceID, b.InstanceID); c != 0 {
				return c
			}
		}
		return stopFirst(a, b)
	})
}

func earliest(a, b time.Time) time.Time {
	if a.IsZero() || b.Before(a) {
		return b
	}
	return a
}

// Launch throttling: a task that stops on its own (it failed to start, or
// an essential container exited) before it has run for QuickExit is a
// failed launch. After throttleAfter failed launches in a row, launches
// wait throttleBase, doubling with every further failure up to throttleMax,
// counted from the last failure, and go one at a time. A task that has run
// for QuickExit ends the run. Only the primary deployment's tasks count, so
// deploying a fix starts afresh.
const (
	QuickExit     = 30 * time.Second
	throttleAfter = 3
	throttleBase  = 10 * time.Second
	throttleMax   = 15 * time.Minute
)

// Throttle returns the run of failed launches of a deployment, newest
// first, and until when the next launch should wait (zero: no wait).
func Throttle(deployment string, tasks []Task, now time.Time) (failures int, until time.Time) {
	var mine []*Task // pointers: sorting thousands of tasks moves less
	for i := range tasks {
		if tasks[i].Deployment == deployment {
			mine = append(mine, &tasks[i])
		}
	}
	slices.SortFunc(mine, func(a, b *Task) int {
		if c := b.CreatedAt.Compare(a.CreatedAt); c != 0 {
			return c
		}
		return strings.Compare(a.ID, b.ID) // the same whatever order tasks come in
	})
	var last time.Time
	for _, t := range mine {
		started := !t.StartedAt.IsZero()
		if t.LastStatus != "STOPPED" {
			if started && now.Sub(t.StartedAt) >= QuickExit {
				break
			}
			continue // too early to tell
		}
		ownStop := t.StopCode == "TaskFailedToStart" || t.StopCode == "EssentialContainerExited"
		ranLong := started && t.StoppedAt.Sub(t.StartedAt) >= QuickExit
		switch {
		case ownStop && !ranLong:
			failures++
			if t.StoppedAt.After(last) {
				last = t.StoppedAt
			}
		case started:
			return failures, wait(failures, last)
		}
	}
	return failures, wait(failures, last)
}

func wait(failures int, last time.Time) time.Time {
	if failures < throttleAfter {
		return time.Time{}
	}
	d := throttleMax
	if shift := failures - throttleAfter; shift < 20 {
		d = min(throttleBase<<shift, throttleMax)
	}
	return last.Add(d)
}

// WaitingForCapacity stands for the instance of a task that waits for a
// managed instance to be provisioned: it is pending, not orphaned.
const WaitingForCapacity = "PROVISIONING"
