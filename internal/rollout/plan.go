// Package rollout decides a daemon deployment's next step: which instances
// to replace in this batch, when a batch is done, what the circuit breaker,
// the alarms and the bake time say, and when to roll back. Plan is a pure
// function of the deployment and the World it is shown; the deployments
// controller carries its decisions out and internal/ops previews them.
package rollout

import (
	"context"
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/capstanhq/capstan/internal/api/shapes"
	"github.com/capstanhq/capstan/internal/store"
)

// Instance is a container instance in a deployment's scope as the rollout
// sees it.
type Instance struct {
	ID               string
	Arn              string
	CapacityProvider string // ARN
	Status           string // REGISTERING, ACTIVE, DRAINING, DEREGISTERING
	RegisteredAt     time.Time
	// Managed instances were provisioned by Capstan: they are replaced.
	// Others (started by hand) are changed in place.
	Managed   bool
	Connected bool
	// Revision is the daemon's placement on the instance ("" without).
	Revision string
	// Running: the daemon's task is RUNNING.
	Running bool
}

// InPlaceReason starts the status reason of an instance drained so that its
// daemons change in place (one Capstan did not provision, so cannot
// replace): its app tasks leave, its daemons change, and the daemons
// controller activates it again.
const InPlaceReason = "Daemons change in place"

// Replacement states of a managed instance launched for a batch.
const (
	ReplacementGone        = ""        // terminated, or never recorded
	ReplacementLaunching   = "PENDING" // not registered yet
	ReplacementRegistering = "REGISTERING"
)

// World is everything a rollout decision depends on.
type World struct {
	// Current: the daemon still points at the deployment.
	Current   bool
	Instances []Instance
	// Replacements maps the managed instances of the batch to their state:
	// a Replacement* constant or the container instance status.
	Replacements map[string]string
	// Firing are the deployment's alarms firing now; AlarmErr is why they
	// could not be read.
	Firing   map[string]bool
	AlarmErr string
	// RollbackCPs are the capacity providers of the rollback target.
	RollbackCPs []string
	Now         time.Time
	// Deadline stops a rollout that made no progress for this long.
	Deadline time.Duration
	// MaxOps bounds the operations one write spends beginning instances
	// (0: MaxStartOps); the store's transaction limit sets it.
	MaxOps int
}

// Decision is what a rollout does next.
type Decision struct {
	Dep     store.DaemonDeployment
	Changed bool
	// Start are the batch entries to begin now (already in Dep's batch).
	Start []Start
	// SwitchDaemon: the daemon must now point new instances at the
	// rollback target.
	SwitchDaemon bool
	Requeue      time.Duration
}

// Start is one instance to begin replacing.
type Start struct {
	Instance Instance
	InPlace  bool
	// Drain, for an in-place change of an ACTIVE instance: it is set
	// DRAINING (InPlaceReason) and its daemons change only once its app
	// tasks left, so none runs beside no critical daemon. A REGISTERING
	// instance holds no app task and is changed at once.
	Drain bool
	// Retire drains a managed instance that never served (REGISTERING)
	// without a replacement: it holds no application task, and tasks that
	// wait for room get a new instance from the instances controller.
	Retire bool
	// Target is the revision the instance must end on ("" for none).
	Target string
}

// StallAfter is how long a rollout may go without progress before its
// status says why.
const StallAfter = 20 * time.Second

// MaxStartOps bounds the operations of the instances one write begins
// replacing, so a batch of thousands goes in several writes (an etcd
// transaction holds 128 operations by default; the deployment record and
// slack take the rest). A replacement costs 3 (the drain, the launch
// request and its credential), an in-place change 3 (the placement, and
// the old task and its agent's entry stopping), a retirement 1.
const MaxStartOps = 120

func startOps(s Start) int {
	if s.Retire {
		return 1
	}
	return 3
}

// Poll is how often an in-flight rollout looks at the fleet.
const Poll = time.Second

// Target is the revision a deployment moves instances to now and the
// capacity providers that should run it: the rollback target once it
// rolls back.
func Target(dep store.DaemonDeployment) (string, []string) {
	if RollingBack(dep.Status) && dep.Rollback != nil {
		return dep.Rollback.RollbackTargetDaemonRevisionArn, dep.Rollback.RollbackCapacityProviders
	}
	var cps []string
	if dep.TargetDaemonRevision != nil {
		for _, cp := range dep.TargetDaemonRevision.CapacityProviders {
			cps = append(cps, cp.Arn)
		}
	}
	return dep.TargetRevisionArn, cps
}

// goal is where a deployment moves instances now.
type goal struct {
	target string
	cps    []string
}

func goalOf(dep store.DaemonDeployment) goal {
	t, cps := Target(dep)
	return goal{t, cps}
}

// want: the instance should run the daemon (its provider is the target's).
func (g goal) want(in Instance) bool {
	return g.target != "" && slices.Contains(g.cps, in.CapacityProvider)
}

// onTarget: the instance's placement is the one it should have.
func (g goal) onTarget(in Instance) bool {
	if g.want(in) {
		return in.Revision == g.target
	}
	return in.Revision == ""
}

// ready: on target, and the daemon runs where it should.
func (g goal) ready(in Instance) bool { return g.onTarget(in) && (!g.want(in) || in.Running) }

// Ready reports whether an instance is where the deployment wants it:
// running the target, or without the daemon off the target's providers.
func Ready(dep store.DaemonDeployment, in Instance) bool { return goalOf(dep).ready(in) }

// RollingBack reports a rollback status.
func RollingBack(status string) bool {
	return status == "STOP_REQUESTED" || status == "ROLLBACK_IN_PROGRESS"
}

// leaving instances are being drained by someone: they will be gone.
func leaving(status string) bool { return status == "DRAINING" || status == "DEREGISTERING" }

// Plan decides a deployment's next step. It is pure: the reconciler reads
// the world and carries the decision out.
func Plan(dep store.DaemonDeployment, w World) Decision {
	d := Decision{Dep: dep}
	if !InFlight(dep.Status) {
		return d
	}
	at := shapes.At(w.Now)
	ro := &d.Dep.Rollout
	ro.Replacing = slices.Clone(ro.Replacing)
	if !w.Current {
		d.Dep.Status = "STOPPED"
		d.Dep.StoppedAt = at
		d.Dep.StatusReason = "Superseded by a newer deployment."
		complete(&d.Dep)
		d.Changed = true
		return d
	}
	n := 0
	for _, in := range w.Instances {
		if !leaving(in.Status) {
			n++
		}
	}
	switch dep.Status {
	case "PENDING":
		d.Dep.Status = "IN_PROGRESS"
		d.Dep.StartedAt = at
		ro.BatchSize = BatchSize(n, drainPercent(dep))
		ro.LastProgressAt = w.Now
		if d.Dep.CircuitBreaker != nil {
			d.Dep.CircuitBreaker.Threshold = ptr(int32(BreakerThreshold(n)))
		}
		ro.FiringAtStart = nil
		for _, name := range AlarmNames(dep) {
			if w.Firing[name] {
				ro.FiringAtStart = append(ro.FiringAtStart, name)
			}
		}
		ro.AlarmError = w.AlarmErr
		d.Changed = true
		return d
	case "STOP_REQUESTED":
		d.Dep.Status = "ROLLBACK_IN_PROGRESS"
		if d.Dep.Rollback != nil {
			d.Dep.Rollback.RollbackCapacityProviders = slices.Clone(w.RollbackCPs)
		}
		ro.BatchSize = BatchSize(n, drainPercent(dep))
		ro.LastProgressAt, ro.Stalled, ro.BakeUntil = w.Now, nil, time.Time{}
		// The forward batch is abandoned: its old instances finish draining
		// on their own, its replacements are rolled back like any instance.
		// Instances changed in place stay in the batch: drained (or still
		// registering) for the forward target, they are moved to the
		// rollback target where they are, below.
		ro.Replacing = slices.DeleteFunc(ro.Replacing, func(e store.Replacement) bool { return !e.InPlace })
		d.SwitchDaemon = true
		d.Changed = true
		return d
	}

	g := goalOf(d.Dep)
	target, onTarget, ready := g.target, g.onTarget, g.ready
	// Only the instances being replaced are looked up by ID: a map of the
	// whole fleet on every pass was most of a rollout's garbage.
	byID := make(map[string]Instance, len(ro.Replacing))
	if len(ro.Replacing) > 0 {
		want := make(map[string]bool, len(ro.Replacing))
		for _, e := range ro.Replacing {
			want[e.Instance] = true
		}
		for _, in := range w.Instances {
			if want[in.ID] {
				byID[in.ID] = in
			}
		}
	}

	// Finish batch entries that are done.
	before := len(ro.Replacing)
	ro.Replacing = slices.DeleteFunc(ro.Replacing, func(e store.Replacement) bool {
		in, present := byID[e.Instance]
		if e.InPlace {
			// Done once activated again after an in-place drain.
			return !present || (ready(in) && !leaving(in.Status))
		}
		if present {
			return false // the old instance is still there
		}
		switch w.Replacements[e.ManagedInstance] {
		case ReplacementLaunching, ReplacementRegistering:
			return false // its replacement is not up yet
		}
		return true
	})
	progress := before - len(ro.Replacing)
	ro.Replaced += progress
	readyN, remaining := 0, len(ro.Replacing)
	// Pointers into w.Instances: copies of thousands of instances on every
	// pass were most of what a pass allocated.
	var candidates []*Instance
	inBatch := make(map[string]bool, len(ro.Replacing))
	for _, e := range ro.Replacing {
		inBatch[e.Instance] = true
	}
	drainingOther := 0
	for i := range w.Instances {
		in := &w.Instances[i]
		if leaving(in.Status) {
			if !inBatch[in.ID] {
				drainingOther++
			}
			continue
		}
		if ready(*in) {
			readyN++
			continue
		}
		if !inBatch[in.ID] {
			remaining++
			// A provisioned instance still registering without a daemon
			// gets the daemon's current revision (a replacement of this
			// very rollout, most often): waited for, not retired.
			coming := in.Managed && in.Status == "REGISTERING" && in.Revision == ""
			if !onTarget(*in) && !coming {
				candidates = append(candidates, in)
			}
		}
	}
	if readyN > ro.OnTarget || progress > 0 {
		ro.LastProgressAt, ro.Stalled = w.Now, nil
	}
	ro.OnTarget = readyN
	ro.AlarmError = w.AlarmErr
	d.Changed = !sameRollout(dep.Rollout, *ro)

	forward := dep.Status == "IN_PROGRESS"
	if forward {
		if cb := d.Dep.CircuitBreaker; cb != nil && cb.FailureCount != nil && cb.Threshold != nil && *cb.FailureCount >= *cb.Threshold {
			cb.Status = "TRIGGERED"
			requestStop(&d.Dep, w, fmt.Sprintf("Circuit breaker: %d failed daemon task starts of the target revision (threshold %d).", *cb.FailureCount, *cb.Threshold))
			d.Changed = true
			return d
		}
		var triggered []string
		var still []string
		for _, name := range AlarmNames(dep) {
			switch {
			case w.Firing[name] && slices.Contains(ro.FiringAtStart, name):
				still = append(still, name)
			case w.Firing[name]:
				triggered = append(triggered, name)
			}
		}
		if w.AlarmErr == "" && !slices.Equal(still, ro.FiringAtStart) {
			// An ignored alarm that cleared is watched again from now on.
			ro.FiringAtStart = still
			d.Changed = true
		}
		if len(triggered) > 0 {
			if a := d.Dep.Alarms; a != nil {
				a.Status = "TRIGGERED"
				a.TriggeredAlarmNames = triggered
			}
			if d.Dep.CircuitBreaker != nil && d.Dep.CircuitBreaker.Status == "MONITORING" {
				d.Dep.CircuitBreaker.Status = "MONITORING_COMPLETE"
			}
			requestStop(&d.Dep, w, "Alarm "+strings.Join(triggered, ", ")+" went into ALARM during the deployment.")
			d.Changed = true
			return d
		}
	} else if ro.RollbackFailures >= threshold(d.Dep) {
		finish(&d.Dep, "ROLLBACK_FAILED", at, fmt.Sprintf("Rollback failed: %d failed daemon task starts of the rollback target.", ro.RollbackFailures))
		d.Changed = true
		return d
	}

	if remaining == 0 {
		// With no instance in scope there is nothing running to watch.
		if bake := bakeTime(dep); forward && bake > 0 && len(w.Instances) > 0 {
			if ro.BakeUntil.IsZero() {
				ro.BakeUntil = w.Now.Add(bake)
				d.Changed = true
			}
			if w.Now.Before(ro.BakeUntil) {
				d.Requeue = min(ro.BakeUntil.Sub(w.Now), Poll)
				return d
			}
		}
		if forward {
			finish(&d.Dep, "SUCCESSFUL", at, "Deployment completed successfully.")
		} else {
			finish(&d.Dep, "ROLLBACK_SUCCESSFUL", at, "Rollback completed successfully.")
		}
		d.Changed = true
		return d
	}
	// An instance that fell off the target re-opens the bake window.
	if !ro.BakeUntil.IsZero() {
		ro.BakeUntil = time.Time{}
		d.Changed = true
	}

	if stuck := w.Now.Sub(ro.LastProgressAt); stuck >= StallAfter {
		s := stall(d.Dep, w, byID, ready)
		if ro.Stalled == nil || ro.Stalled.Kind != s.Kind || ro.Stalled.Message != s.Message {
			s.Since = ro.LastProgressAt
			ro.Stalled = &s
			d.Changed = true
		}
		if w.Deadline > 0 && stuck >= w.Deadline {
			why := fmt.Sprintf("No progress for %s: %s", w.Deadline, ro.Stalled.Message)
			if forward {
				d.Dep.Status = "STOPPED"
				d.Dep.StoppedAt = at
				d.Dep.StatusReason = why
				complete(&d.Dep)
			} else {
				finish(&d.Dep, "ROLLBACK_FAILED", at, why)
			}
			d.Changed = true
			return d
		}
	}

	// A rolling window: at most a batch of instances is being replaced at
	// once, and one that finishes makes room for the next at once, so one
	// slow instance holds up a slot, not the rollout. An instance whose
	// target fails to start keeps its slot, so a bad revision still reaches
	// at most one batch before the breaker trips.
	ro.Filling = 0 // batches filled over several writes before the window
	if free := max(ro.BatchSize, 1) - len(ro.Replacing); free > 0 && len(candidates) > 0 {
		sort.Slice(candidates, func(i, j int) bool {
			a, b := candidates[i], candidates[j]
			if !a.RegisteredAt.Equal(b.RegisteredAt) {
				return a.RegisteredAt.Before(b.RegisteredAt)
			}
			return a.Arn < b.Arn
		})
		// Instances someone else drains (an earlier deployment's batch, a
		// scale-in) take room; ones that never served do not.
		budget, room := free, free-drainingOther
		ops, maxOps := 0, w.MaxOps
		if maxOps <= 0 {
			maxOps = MaxStartOps
		}
		for _, in := range candidates {
			retire := in.Managed && in.Status == "REGISTERING"
			if len(d.Start) == budget || (!retire && room <= 0) {
				continue
			}
			st := Start{Instance: *in, InPlace: !in.Managed, Drain: !in.Managed && in.Status == "ACTIVE", Retire: retire, Target: target}
			if ops+startOps(st) > maxOps {
				break // the rest go in the next write
			}
			ops += startOps(st)
			if !retire {
				room--
			}
			d.Start = append(d.Start, st)
		}
		d.Changed = d.Changed || len(d.Start) > 0
	}
	// An instance changed in place whose placement is not the target (the
	// target changed under it: a rollback) is moved to the target where it
	// stands, keeping its place in the window.
	for i := 0; i < len(ro.Replacing); {
		e := ro.Replacing[i]
		if in, ok := byID[e.Instance]; ok && e.InPlace && g.want(in) && in.Revision != "" && !onTarget(in) {
			ro.Replacing = slices.Delete(ro.Replacing, i, i+1)
			d.Start = append(d.Start, Start{Instance: in, InPlace: true, Target: target})
			d.Changed = true
			continue
		}
		i++
	}
	d.Requeue = Poll
	return d
}

func sameRollout(a, b store.Rollout) bool {
	return slices.Equal(a.Replacing, b.Replacing) && a.Replaced == b.Replaced && a.OnTarget == b.OnTarget && a.Filling == b.Filling &&
		a.LastProgressAt.Equal(b.LastProgressAt) && a.AlarmError == b.AlarmError && (a.Stalled == nil) == (b.Stalled == nil)
}

// requestStop starts a rollback towards the newest source revision (none
// for a first deployment: the daemon is taken off again).
func requestStop(dep *store.DaemonDeployment, w World, reason string) {
	dep.Status = "STOP_REQUESTED"
	rb := &shapes.DaemonRollback{Reason: reason, StartedAt: shapes.At(w.Now), RollbackCapacityProviders: []string{}}
	if len(dep.SourceRevisionArns) > 0 {
		rb.RollbackTargetDaemonRevisionArn = dep.SourceRevisionArns[0]
	}
	dep.Rollback = rb
	dep.StatusReason = reason
}

func finish(dep *store.DaemonDeployment, status string, at shapes.Timestamp, reason string) {
	dep.Status = status
	dep.FinishedAt = at
	dep.StatusReason = reason
	dep.Rollout.Stalled = nil
	complete(dep)
}

func threshold(dep store.DaemonDeployment) int {
	if cb := dep.CircuitBreaker; cb != nil && cb.Threshold != nil {
		return int(*cb.Threshold)
	}
	return BreakerThreshold(0)
}

func drainPercent(dep store.DaemonDeployment) float64 {
	if dc := dep.DeploymentConfiguration; dc != nil && dc.DrainPercent != nil {
		return *dc.DrainPercent
	}
	return 25
}

func bakeTime(dep store.DaemonDeployment) time.Duration {
	if dc := dep.DeploymentConfiguration; dc != nil && dc.BakeTimeInMinutes != nil {
		return time.Duration(*dc.BakeTimeInMinutes) * time.Minute
	}
	return 0
}

func AlarmNames(dep store.DaemonDeployment) []string {
	if dep.Alarms == nil || dep.Alarms.Status == "DISABLED" {
		return nil
	}
	return dep.Alarms.AlarmNames
}

// stall explains, in words, why a rollout does not move: the revision
// fails (a bad release), replacements do not come up (provisioning), or
// instances are lost or cannot let go of their tasks (bad machines).
func stall(dep store.DaemonDeployment, w World, byID map[string]Instance, ready func(Instance) bool) store.Stall {
	ro := dep.Rollout
	if len(ro.StopReasons) > 0 && (dep.Status != "IN_PROGRESS" || failures(dep) > 0) {
		return store.Stall{Kind: store.StallRevisionFailing, Message: fmt.Sprintf("daemon tasks of revision %s fail to start (%d failures): %s",
			LastSegment(firstNonEmpty(dep.TargetRevisionArn, "none")), failures(dep)+ro.RollbackFailures, ro.StopReasons[len(ro.StopReasons)-1])}
	}
	var lost []string
	for _, in := range w.Instances {
		if !in.Connected {
			lost = append(lost, LastSegment(in.Arn))
		}
	}
	if len(lost) > 0 {
		sort.Strings(lost)
		return store.Stall{Kind: store.StallInstancesUnhealthy, Message: "instances not connected (lost): " + strings.Join(lost, ", ")}
	}
	for _, e := range ro.Replacing {
		if e.InPlace {
			continue
		}
		switch w.Replacements[e.ManagedInstance] {
		case ReplacementLaunching:
			return store.Stall{Kind: store.StallProvisioning, Message: "replacement instance " + e.ManagedInstance + " has not registered"}
		case ReplacementRegistering:
			return store.Stall{Kind: store.StallRevisionFailing, Message: "replacement instance " + e.ManagedInstance + " is waiting for its critical daemons to run"}
		}
		if in, ok := byID[e.Instance]; ok {
			return store.Stall{Kind: store.StallInstancesUnhealthy, Message: "draining instance " + LastSegment(in.Arn) + " still runs tasks that have not moved"}
		}
	}
	for _, in := range w.Instances {
		if !leaving(in.Status) && !ready(in) && in.Revision != "" {
			return store.Stall{Kind: store.StallRevisionFailing, Message: "the daemon is not running on instance " + LastSegment(in.Arn)}
		}
	}
	return store.Stall{Kind: store.StallInstancesUnhealthy, Message: "instances are not reaching the target revision"}
}

func failures(dep store.DaemonDeployment) int {
	if cb := dep.CircuitBreaker; cb != nil && cb.FailureCount != nil {
		return int(*cb.FailureCount)
	}
	return 0
}

func LastSegment(arn string) string { return arn[strings.LastIndex(arn, "/")+1:] }

func firstNonEmpty(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// Fleet is what the rollout reads and changes outside its own record.
type Fleet interface {
	// Instances lists the container instances of the deployment's
	// capacity providers that are not INACTIVE.
	Instances(ctx context.Context, dep store.DaemonDeployment) ([]Instance, error)
	// ReplacementStates reports the state of managed instances by ID.
	ReplacementStates(ctx context.Context, cluster string, ids []string) (map[string]string, error)
	// Replace adds to tx what begins replacing one instance: a drain and
	// a replacement launch request, or an in-place retarget.
	Replace(ctx context.Context, tx *store.Txn, dep store.DaemonDeployment, s Start) (store.Replacement, error)
	// Snapshot fills a finishing deployment's instance counts, which stay
	// as they were when it ended.
	Snapshot(ctx context.Context, dep *store.DaemonDeployment) error
}

func complete(dep *store.DaemonDeployment) {
	if dep.CircuitBreaker != nil && dep.CircuitBreaker.Status == "MONITORING" {
		dep.CircuitBreaker.Status = "MONITORING_COMPLETE"
	}
	if dep.Alarms != nil && dep.Alarms.Status == "MONITORING" {
		dep.Alarms.Status = "MONITORING_COMPLETE"
	}
}

// BreakerThreshold is the circuit-breaker threshold for a rollout over n
// instances: half of them, at least 3 and at most 200 (the ECS service
// breaker's formula; ECS documents none for daemons).
func BreakerThreshold(n int) int { return min(max((n+1)/2, 3), 200) }

// InFlight reports whether a deployment in this status can still change.
func InFlight(status string) bool {
	switch status {
	case "PENDING", "IN_PROGRESS", "STOP_REQUESTED", "ROLLBACK_IN_PROGRESS":
		return true
	}
	return false
}

func ptr[T any](v T) *T { return &v }

// BatchSize is how many of n instances a batch replaces: drainPercent of
// them rounded up, at least 1 (and 1 for a drainPercent of 0).
func BatchSize(n int, drainPercent float64) int {
	if n <= 0 {
		return 1
	}
	b := int(math.Ceil(float64(n) * drainPercent / 100))
	return min(max(b, 1), n)
}

// RequestStop is an operator stopping a deployment: the same rollback to
// the newest source revision that a tripped breaker starts.
func RequestStop(dep *store.DaemonDeployment, now time.Time, reason string) {
	if cb := dep.CircuitBreaker; cb != nil && cb.Status == "MONITORING" {
		cb.Status = "MONITORING_COMPLETE"
	}
	if a := dep.Alarms; a != nil && a.Status == "MONITORING" {
		a.Status = "MONITORING_COMPLETE"
	}
	requestStop(dep, World{Now: now}, reason)
}
