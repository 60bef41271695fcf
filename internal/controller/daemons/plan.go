// Package daemons keeps exactly one task of every daemon on every instance
// of the daemon's capacity providers, holds new instances REGISTERING until
// their critical daemons run, restarts failed non-critical daemons with
// back-off, repairs instances whose critical daemon fails, and on a
// draining instance stops the daemons only after every other task.
package daemons

import (
	"fmt"
	"time"

	"github.com/capstanhq/capstan/internal/fleet"
	"github.com/capstanhq/capstan/internal/rollout"
)

// RepairFailed starts the status reason of an instance auto-repair gave
// up on; a drain whose reason starts with rollout.InPlaceReason changes
// the instance's daemons in place.
const RepairFailed = fleet.RepairFailedReason

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
	Managed bool
	// InPlace: the instance is DRAINING so that its daemons change in
	// place (a rollout, or auto-repair of an instance Capstan cannot
	// replace): its app tasks leave first, then its daemons are replaced
	// or restarted, then it is ACTIVE again. It is never deregistered.
	InPlace bool
	// Rollout: the in-place drain is a rollout's, not auto-repair's: a
	// target revision that keeps failing is the rollout's circuit
	// breaker's to judge (and roll back), so the instance is never held.
	Rollout bool
	// Held: auto-repair gave up on the instance; it stays DRAINING, with
	// nothing restarted, until an operator activates it.
	Held           bool
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
	Hold       = "hold"       // auto-repair gave up: the instance stays DRAINING
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
// Measured (bench/managed's crash scenario, real Docker and agents, eight
// instances starting together): such a daemon's STOPPED reached the server
// at most 407 ms after its startedAt, on a quiet host and a busy one alike,
// so a second leaves a margin of about 2.5 times.
const SteadyFor = time.Second

// Backoff is the wait before restarting a daemon after n failed starts in
// a row: 5 s doubling to 5 minutes.
func Backoff(n int) time.Duration {
	if n <= 0 {
		return 0
	}
	return min(5*time.Second<<min(n-1, 10), 5*time.Minute)
}

// MaxRepairs is how many failed starts of a critical daemon an in-place
// repair tries before it leaves the instance drained.
const MaxRepairs = 3

// Plan decides what to do on one instance.
func Plan(in Input) []Action {
	var acts []Action
	inPlace := in.Status == "DRAINING" && in.InPlace && !in.Held
	// A joined machine an operator drains keeps its daemons (restarted if
	// they fail) and its registration: Capstan cannot replace it, and it
	// takes tasks again once activated. Its standalone tasks are left to
	// finish, as a drain leaves them in ECS.
	parked := in.Status == "DRAINING" && !in.Managed && !in.InPlace && !in.Held
	// An in-place change drains app tasks but keeps (and changes) daemons.
	draining := in.Status == "DRAINING" && !inPlace && !parked
	criticalReady := true
	for _, d := range in.Daemons {
		live := d.TaskID != "" && d.TaskLast != "STOPPED"
		moved := d.Placed && d.TaskRev != "" && d.TaskRev != d.PlacedRev
		switch {
		case in.Held && in.Status == "DRAINING":
			continue // nothing restarts until an operator activates it
		case inPlace && d.Wanted && live && moved:
			// App tasks leave before the daemon they rely on.
			if d.TaskDesired != "STOPPED" && in.OtherLiveTasks == 0 {
				acts = append(acts, Action{Kind: Stop, Daemon: d.Name, TaskID: d.TaskID, Reason: "Daemon deployment: replaced in place by revision " + d.PlacedRev})
			}
			criticalReady = false
			continue
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
			if ready && !d.HealthCheck && (in.Status == "REGISTERING" || inPlace) {
				if wait := SteadyFor - in.Now.Sub(d.TaskStartedAt); wait > 0 {
					ready = false
					acts = append(acts, Action{Kind: Wait, Daemon: d.Name, After: wait})
				}
			}
			if d.Critical && !ready {
				criticalReady = false
			}
			if d.Critical && d.HealthCheck && d.TaskHealth == "UNHEALTHY" && in.Status == "ACTIVE" && in.AutoRepair {
				acts = append(acts, Action{Kind: Drain, Daemon: d.Name, Reason: repair(in, "critical daemon "+d.Name+" is UNHEALTHY")})
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
				if d.Critical && inPlace && !in.Rollout && d.Attempts+1 >= MaxRepairs {
					acts = append(acts, Action{Kind: Hold, Daemon: d.Name, Reason: fmt.Sprintf("%s: critical daemon %s failed %d times in a row (%s); the instance stays DRAINING until an operator activates it",
						RepairFailed, d.Name, d.Attempts+1, d.TaskReason)})
					continue
				}
				if d.Critical && in.Status == "ACTIVE" && in.AutoRepair {
					acts = append(acts, Action{Kind: Drain, Daemon: d.Name, Reason: repair(in, "critical daemon "+d.Name+" stopped: "+d.TaskReason)})
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
	if draining || (in.Status == "DRAINING" && in.InPlace) {
		// They cannot move: a draining instance stops them, before its daemons.
		for _, id := range in.Standalone {
			acts = append(acts, Action{Kind: Stop, TaskID: id, Reason: "Instance is draining: standalone tasks stop, daemons stop last"})
		}
	}
	switch {
	case in.Status == "REGISTERING" && criticalReady:
		acts = append(acts, Action{Kind: Activate, Reason: "every critical daemon is running"})
	case inPlace && criticalReady && in.OtherLiveTasks == 0:
		acts = append(acts, Action{Kind: Activate, Reason: "daemons changed in place and running"})
	case draining && !in.Held && in.OtherLiveTasks == 0 && in.LiveDaemonTasks == 0:
		acts = append(acts, Action{Kind: Deregister, Reason: "instance drained"})
	}
	return acts
}

// repair is the reason of an auto-repair drain: an instance Capstan
// provisioned is drained and replaced; one that joined (it cannot be
// replaced) is drained, its daemon restarted, and activated again.
func repair(in Input, why string) string {
	if in.Managed {
		return repairPrefix + why
	}
	return rollout.InPlaceReason + " (" + repairPrefix + why + ")"
}

// repairPrefix starts the reason of an auto-repair drain of a managed
// instance, and of the drain the server makes when an agent reports a
// critical daemon stopped (fleet's repairReason), whatever the instance.
const repairPrefix = fleet.RepairPrefix
