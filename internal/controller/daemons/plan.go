// Package daemons keeps exactly one task of every daemon on every instance
// of the daemon's capacity providers, holds new instances REGISTERING until
// their critical daemons run, restarts failed non-critical daemons with
// back-off, repairs instances whose critical daemon fails, and on a
// draining instance stops the daemons only after every other task.
package daemons

import (
	"time"
)

// Daemon is one daemon as the planner sees it on one instance.
type Daemon struct {
	Name        string
	Critical    bool
	RevisionArn string // the daemon's current revision
	HealthCheck bool   // some container has a health check
	Wanted      bool   // the daemon targets the instance's capacity provider
	// Placement, when the daemon has one on the instance.
	Placed    bool
	PlacedRev string
	// TaskRev is the revision the placement's task runs; it differs from
	// PlacedRev while a rollout changes the instance in place.
	TaskRev     string
	Attempts    int
	LastFailure time.Time
	// Task is the placement's task: "" when there is none.
	TaskID        string
	TaskLast      string // lastStatus
	TaskDesired   string
	TaskHealth    string
	TaskStartedAt time.Time
	TaskReason    string
}

// Input is the instance and everything the planner needs about it.
type Input struct {
	Status     string // REGISTERING, ACTIVE, DRAINING
	AutoRepair bool
	// Managed instances change daemons only by replacement: once ACTIVE
	// they neither gain nor lose a daemon, a rollout replaces them.
	Managed        bool
	OtherLiveTasks int // non-daemon tasks not STOPPED
	// Standalone lists the live standalone tasks (not of a service or a
	// daemon) that are not being stopped yet.
	Standalone      []string
	Daemons         []Daemon
	Now             time.Time
	LiveDaemonTasks int // daemon tasks (any) not STOPPED
}

// Action kinds.
const (
	Start      = "start"      // start Daemon at Revision
	Stop       = "stop"       // stop TaskID
	Forget     = "forget"     // remove Daemon's placement
	Failed     = "failed"     // record a failed start of Daemon
	Healthy    = "healthy"    // reset Daemon's failure count
	Activate   = "activate"   // instance REGISTERING → ACTIVE
	Drain      = "drain"      // instance → DRAINING (auto-repair)
	Deregister = "deregister" // drained instance → INACTIVE
	Wait       = "wait"       // nothing now; look again after After
)

// Action is one step; Reason explains it.
type Action struct {
	Kind     string
	Daemon   string
	Revision string
	TaskID   string
	Reason   string
	After    time.Duration
}

// SteadyFor is how long a critical daemon without a health check must have
// run before it lets its instance become ACTIVE: a daemon that crashes at
// once must not flash RUNNING long enough to open the instance to tasks.
const SteadyFor = time.Second

// Backoff is the wait before restarting a daemon after n failed starts in
// a row: 5 s doubling to 5 minutes.
func Backoff(n int) time.Duration {
	if n <= 0 {
		return 0
	}
	return min(5*time.Second<<min(n-1, 10), 5*time.Minute)
}

// Plan decides what to do on one instance.
func Plan(in Input) []Action {
	var acts []Action
	draining := in.Status == "DRAINING"
	criticalReady := true
	for _, d := range in.Daemons {
		live := d.TaskID != "" && d.TaskLast != "STOPPED"
		moved := d.Placed && d.TaskRev != "" && d.TaskRev != d.PlacedRev
		switch {
		case !d.Wanted && !draining && in.Managed && in.Status != "REGISTERING" && d.Placed:
			// Kept until a rollout replaces the instance.
			if d.Critical && live && d.TaskLast != "RUNNING" {
				criticalReady = false
			}
			continue
		case d.Wanted && !draining && live && moved:
			if d.TaskDesired != "STOPPED" {
				acts = append(acts, Action{Kind: Stop, Daemon: d.Name, TaskID: d.TaskID, Reason: "Daemon deployment: replaced by revision " + d.PlacedRev})
			}
			if d.Critical {
				criticalReady = false
			}
			continue
		case d.Wanted && !draining && !d.Placed && in.Managed && in.Status != "REGISTERING":
			// Added to an instance already serving: a rollout replaces it.
			continue
		case !d.Wanted || draining:
			if live && d.TaskDesired != "STOPPED" {
				if draining && in.OtherLiveTasks > 0 {
					continue // daemons leave last
				}
				reason := "Daemon removed from the instance's capacity provider"
				if draining {
					reason = "Instance drained: daemons stop after every other task"
				}
				acts = append(acts, Action{Kind: Stop, Daemon: d.Name, TaskID: d.TaskID, Reason: reason})
			} else if !live && d.Placed {
				acts = append(acts, Action{Kind: Forget, Daemon: d.Name})
			}
			continue
		case live:
			ready := d.TaskLast == "RUNNING" && (!d.HealthCheck || d.TaskHealth == "HEALTHY")
			if ready && !d.HealthCheck && in.Status == "REGISTERING" {
				if wait := SteadyFor - in.Now.Sub(d.TaskStartedAt); wait > 0 {
					ready = false
					acts = append(acts, Action{Kind: Wait, Daemon: d.Name, After: wait})
				}
			}
			if d.Critical && !ready {
				criticalReady = false
			}
			if d.Critical && d.HealthCheck && d.TaskHealth == "UNHEALTHY" && in.Status == "ACTIVE" && in.AutoRepair {
				acts = append(acts, Action{Kind: Drain, Daemon: d.Name, Reason: "auto-repair: critical daemon " + d.Name + " is UNHEALTHY"})
			}
			if ready && d.Attempts > 0 {
				acts = append(acts, Action{Kind: Healthy, Daemon: d.Name})
			}
		default: // wanted, and no live task
			if d.Critical {
				criticalReady = false
			}
			if d.TaskID != "" && d.TaskLast == "STOPPED" && !moved {
				// The daemon's task stopped on its own: a failure.
				acts = append(acts, Action{Kind: Failed, Daemon: d.Name, Reason: d.TaskReason})
				if d.Critical && in.Status == "ACTIVE" && in.AutoRepair {
					acts = append(acts, Action{Kind: Drain, Daemon: d.Name, Reason: "auto-repair: critical daemon " + d.Name + " stopped: " + d.TaskReason})
					continue
				}
				d.Attempts++
				d.LastFailure = in.Now
			}
			if wait := Backoff(d.Attempts) - in.Now.Sub(d.LastFailure); d.Attempts > 0 && wait > 0 {
				acts = append(acts, Action{Kind: Wait, Daemon: d.Name, After: wait})
				continue
			}
			rev := d.RevisionArn
			if d.Placed && d.PlacedRev != "" {
				rev = d.PlacedRev // an instance keeps the revision it started with
			}
			acts = append(acts, Action{Kind: Start, Daemon: d.Name, Revision: rev})
		}
	}
	if draining {
		// They cannot move: a draining instance stops them, before its daemons.
		for _, id := range in.Standalone {
			acts = append(acts, Action{Kind: Stop, TaskID: id, Reason: "Instance is draining: standalone tasks stop, daemons stop last"})
		}
	}
	switch {
	case in.Status == "REGISTERING" && criticalReady:
		acts = append(acts, Action{Kind: Activate, Reason: "every critical daemon is running"})
	case draining && in.OtherLiveTasks == 0 && in.LiveDaemonTasks == 0:
		acts = append(acts, Action{Kind: Deregister, Reason: "instance drained"})
	}
	return acts
}
