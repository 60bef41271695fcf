package engine

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/capstanhq/capstan/internal/agent/resources"
	"github.com/capstanhq/capstan/internal/api/shapes"
	"github.com/capstanhq/capstan/internal/taskdef"
)

// ECS task statuses.
const (
	StatusProvisioning   = "PROVISIONING"
	StatusPending        = "PENDING"
	StatusActivating     = "ACTIVATING"
	StatusRunning        = "RUNNING"
	StatusDeactivating   = "DEACTIVATING"
	StatusStopping       = "STOPPING"
	StatusDeprovisioning = "DEPROVISIONING"
	StatusStopped        = "STOPPED"
)

// Task health statuses.
const (
	HealthHealthy   = "HEALTHY"
	HealthUnhealthy = "UNHEALTHY"
	HealthUnknown   = "UNKNOWN"
)

// ECS stop codes the engine sets itself.
const (
	StopTaskFailedToStart        = "TaskFailedToStart"
	StopEssentialContainerExited = "EssentialContainerExited"
)

// Reasons the engine reports.
const (
	ReasonEssentialExited = "Essential container in task exited"
	ReasonVanished        = "container vanished outside the agent"
	ReasonPrivileged      = "privileged containers are disabled on this instance (ECS_DISABLE_PRIVILEGED)"
	ReasonNotDesired      = "Task is no longer desired on this instance"
	ReasonOOM             = "OutOfMemoryError: container killed due to memory usage"
)

// statusRank orders task statuses; a task's reported status never moves
// back.
func statusRank(s string) int {
	return slices.Index([]string{StatusProvisioning, StatusPending, StatusActivating, StatusRunning,
		StatusDeactivating, StatusStopping, StatusDeprovisioning, StatusStopped}, s)
}

// phase is how far a container has come.
type phase int

const (
	phaseNone    phase = iota // nothing done yet
	phasePulled               // image present
	phaseCreated              // container exists, never started
	phaseRunning              // started; also while waiting to be restarted
	phaseStopped              // done for good
)

var phaseNames = []string{"NONE", "PULLED", "CREATED", "RUNNING", "STOPPED"}

func (p phase) String() string { return phaseNames[p] }

func parsePhase(s string) phase {
	if i := slices.Index(phaseNames, s); i >= 0 {
		return phase(i)
	}
	return phaseNone
}

// containerStatus maps a phase to the ECS container lastStatus.
func containerStatus(p phase) string {
	switch p {
	case phaseRunning:
		return StatusRunning
	case phaseStopped:
		return StatusStopped
	}
	return StatusPending
}

// cview is what the status rules need to know of a container.
type cview struct {
	essential bool
	phase     phase
	health    string // HEALTHY, UNHEALTHY, UNKNOWN; "" without a health check
}

// taskStatus derives the task lastStatus from its containers. prev is the
// status reported so far: the result never ranks below it.
func taskStatus(prev string, admitted, stopping bool, cs []cview) string {
	s := StatusPending
	allStopped, running := true, true
	for _, c := range cs {
		allStopped = allStopped && c.phase == phaseStopped
		if c.phase < phaseRunning || (c.essential && c.phase != phaseRunning) {
			running = false
		}
	}
	switch {
	case allStopped && (stopping || len(cs) > 0):
		s = StatusStopped
	case stopping:
		s = StatusStopping
	case !admitted:
		s = StatusProvisioning
	case running:
		s = StatusRunning
	}
	if prev != "" && statusRank(s) < statusRank(prev) {
		return prev
	}
	return s
}

// taskHealth combines the health of essential containers that have a
// health check: any unhealthy makes the task unhealthy, all healthy make it
// healthy, and anything else (or no checks) is unknown.
func taskHealth(cs []cview) string {
	checked, healthy := 0, 0
	for _, c := range cs {
		if !c.essential || c.health == "" {
			continue
		}
		checked++
		switch c.health {
		case HealthUnhealthy:
			return HealthUnhealthy
		case HealthHealthy:
			healthy++
		}
	}
	if checked > 0 && healthy == checked {
		return HealthHealthy
	}
	return HealthUnknown
}

// dep is one start-order edge: the container waits for container to
// reach condition.
type dep struct {
	container int
	condition string // START, COMPLETE, SUCCESS, HEALTHY
	implicit  string // why an implicit edge exists ("pidMode task", "link"); "" for dependsOn
}

// depState is what a dependency's resolution needs to know of the
// container depended on.
type depState struct {
	name      string
	phase     phase
	started   bool // has run at least once
	exitCode  *int
	health    string
	restart   bool // exited, but will be restarted
	startedAt time.Time
}

// resolve decides one dependency: met, or failed with the reason the
// condition can no longer be met, or neither (keep waiting).
func resolve(condition string, d depState) (met bool, failed string) {
	stopped := d.phase == phaseStopped
	switch condition {
	case "START":
		if d.started {
			return true, ""
		}
		if stopped {
			return false, fmt.Sprintf("dependency %s stopped without starting", d.name)
		}
	case "COMPLETE":
		if stopped && d.started {
			return true, ""
		}
		if stopped {
			return false, fmt.Sprintf("dependency %s stopped without running", d.name)
		}
	case "SUCCESS":
		switch {
		case stopped && d.exitCode != nil && *d.exitCode == 0:
			return true, ""
		case stopped && d.exitCode != nil:
			return false, fmt.Sprintf("dependency %s exited with code %d, not 0", d.name, *d.exitCode)
		case stopped:
			return false, fmt.Sprintf("dependency %s stopped without an exit code", d.name)
		}
	case "HEALTHY":
		if d.phase == phaseRunning && !d.restart && d.health == HealthHealthy {
			return true, ""
		}
		if stopped {
			return false, fmt.Sprintf("dependency %s stopped before it was healthy", d.name)
		}
	default:
		return false, fmt.Sprintf("unknown dependency condition %q", condition)
	}
	return false, ""
}

// waitDeadline is when a container stops waiting for condition on a
// dependency that started at startedAt; zero means no deadline of its own.
// START waits are bounded by the dependency's own progress; the others by
// the dependency's startTimeout (else the engine's), counted from its start.
func waitDeadline(condition string, startedAt time.Time, timeout time.Duration) time.Time {
	if condition == "START" || startedAt.IsZero() {
		return time.Time{}
	}
	return startedAt.Add(timeout)
}

// dependencies lists each container's start-order edges: its dependsOn,
// a START edge to the namespace holder when pidMode or ipcMode is "task",
// and a START edge for each link (its address becomes a host entry).
func dependencies(def *shapes.TaskDefinition, holder int) [][]dep {
	idx := map[string]int{}
	for i, c := range def.ContainerDefinitions {
		idx[c.Name] = i
	}
	out := make([][]dep, len(def.ContainerDefinitions))
	for i, c := range def.ContainerDefinitions {
		has := map[int]bool{}
		for _, d := range c.DependsOn {
			if j, ok := idx[d.ContainerName]; ok && j != i {
				out[i] = append(out[i], dep{container: j, condition: d.Condition})
				has[j] = true
			}
		}
		if holder >= 0 && holder != i && !has[holder] {
			why := "pidMode task"
			if def.PidMode != "task" {
				why = "ipcMode task"
			}
			out[i] = append(out[i], dep{container: holder, condition: "START", implicit: why})
			has[holder] = true
		}
		for _, l := range c.Links {
			name, _, _ := strings.Cut(l, ":")
			if j, ok := idx[name]; ok && j != i && !has[j] {
				out[i] = append(out[i], dep{container: j, condition: "START", implicit: "link"})
				has[j] = true
			}
		}
	}
	return out
}

// namespaceHolder picks the container whose PID and IPC namespaces the
// others join when the task asks for "task" modes: the first essential
// container without dependencies, else the first without dependencies.
// Since it depends on nothing, joining it adds no cycle. -1 if not needed.
func namespaceHolder(def *shapes.TaskDefinition) int {
	if def.PidMode != "task" && def.IpcMode != "task" {
		return -1
	}
	first := -1
	for i, c := range def.ContainerDefinitions {
		if len(c.DependsOn) > 0 || len(c.Links) > 0 {
			continue
		}
		if c.Essential == nil || *c.Essential {
			return i
		}
		if first < 0 {
			first = i
		}
	}
	if first < 0 {
		return 0
	}
	return first
}

// stopBlockers returns, for each container, the containers that must stop
// before it: those that depend on it.
func stopBlockers(deps [][]dep) [][]int {
	out := make([][]int, len(deps))
	for i, ds := range deps {
		for _, d := range ds {
			out[d.container] = append(out[d.container], i)
		}
	}
	return out
}

// restartDecision applies a restart policy to an exit. A container that ran
// at least the attempt period is restarted at once and its back-off reset;
// a faster exit is restarted after 1s, 2s, 4s ... capped at the period, so
// a crash loop costs one start per period at worst. fast is the number of
// fast exits in a row before this one.
func restartDecision(p *shapes.ContainerRestartPolicy, exitCode int, uptime time.Duration, fast int) (restart bool, delay time.Duration, nextFast int) {
	if p == nil || p.Enabled == nil || !*p.Enabled {
		return false, 0, 0
	}
	if slices.Contains(p.IgnoredExitCodes, int32(exitCode)) {
		return false, 0, 0
	}
	period := restartPeriod(p)
	if uptime >= period {
		return true, 0, 0
	}
	delay = restartBackoffBase
	for i := 0; i < fast && delay < period; i++ {
		delay *= 2
	}
	return true, min(delay, period), fast + 1
}

const (
	restartBackoffBase   = time.Second
	defaultRestartPeriod = 300 * time.Second
	defaultCPUShares     = 2 // the kernel minimum, what ECS gives a container without cpu
)

func restartPeriod(p *shapes.ContainerRestartPolicy) time.Duration {
	if p == nil || p.RestartAttemptPeriod == nil {
		return defaultRestartPeriod
	}
	return time.Duration(*p.RestartAttemptPeriod) * time.Second
}

// taskNeed is what a task reserves on the instance: task-level cpu and
// memory when set, else the sum over containers (memoryReservation where
// set, else memory); plus static host ports.
func taskNeed(def *shapes.TaskDefinition) resources.Need {
	var n resources.Need
	taskCPU, taskMem := taskLevel(def.Cpu, taskdef.ParseCPU), taskLevel(def.Memory, taskdef.ParseMemory)
	for _, c := range def.ContainerDefinitions {
		if c.Cpu != nil {
			n.CPU += int(*c.Cpu)
		}
		switch {
		case c.MemoryReservation != nil:
			n.MemoryMiB += int(*c.MemoryReservation)
		case c.Memory != nil:
			n.MemoryMiB += int(*c.Memory)
		}
		if def.NetworkMode != "bridge" && def.NetworkMode != "host" && def.NetworkMode != "" {
			continue
		}
		for _, pm := range c.PortMappings {
			if pm.HostPort == nil || *pm.HostPort == 0 {
				continue // dynamic
			}
			proto := pm.Protocol
			if proto == "" {
				proto = "tcp"
			}
			n.Ports = append(n.Ports, resources.Port{Port: int(*pm.HostPort), Protocol: proto})
		}
	}
	if def.Cpu != "" {
		n.CPU = taskCPU
	}
	if def.Memory != "" {
		n.MemoryMiB = taskMem
	}
	return n
}

// taskLevel is a task-level size, 0 when unset or invalid. An unset one
// is not parsed: the parser's error for "" cost 1.3 % of the hollow
// agents' CPU.
func taskLevel(s string, parse func(string) (int, error)) int {
	if s == "" {
		return 0
	}
	n, _ := parse(s)
	return n
}

// cpuShares gives each container its CPU weight: its own cpu, else an even
// share of what the task-level cpu leaves, else the minimum of 2. Without
// a task cgroup this keeps a task's weight close to what ECS gives it.
func cpuShares(def *shapes.TaskDefinition) []int64 {
	out := make([]int64, len(def.ContainerDefinitions))
	left, unset := taskLevel(def.Cpu, taskdef.ParseCPU), 0
	for _, c := range def.ContainerDefinitions {
		if c.Cpu != nil && *c.Cpu > 0 {
			left -= int(*c.Cpu)
		} else {
			unset++
		}
	}
	for i, c := range def.ContainerDefinitions {
		switch {
		case c.Cpu != nil && *c.Cpu > 0:
			out[i] = int64(*c.Cpu)
		case def.Cpu != "" && left > 0:
			out[i] = int64(left / unset)
		}
		out[i] = max(out[i], defaultCPUShares)
	}
	return out
}

// applyOverrides returns the definition the task runs: the task definition
// with the run's task and container overrides applied. def is not changed.
func applyOverrides(def shapes.TaskDefinition, o *shapes.TaskOverride) shapes.TaskDefinition {
	def.ContainerDefinitions = slices.Clone(def.ContainerDefinitions)
	if o == nil {
		return def
	}
	if o.Cpu != "" {
		if n, err := taskdef.ParseCPU(o.Cpu); err == nil {
			def.Cpu = strconv.Itoa(n)
		}
	}
	if o.Memory != "" {
		if n, err := taskdef.ParseMemory(o.Memory); err == nil {
			def.Memory = strconv.Itoa(n)
		}
	}
	for _, co := range o.ContainerOverrides {
		i := slices.IndexFunc(def.ContainerDefinitions, func(c shapes.ContainerDefinition) bool { return c.Name == co.Name })
		if i < 0 {
			continue
		}
		c := &def.ContainerDefinitions[i]
		if co.Command != nil {
			c.Command = co.Command
		}
		if co.Cpu != nil {
			c.Cpu = co.Cpu
		}
		if co.Memory != nil {
			c.Memory = co.Memory
		}
		if co.MemoryReservation != nil {
			c.MemoryReservation = co.MemoryReservation
		}
		if len(co.Environment) > 0 {
			env := slices.Clone(c.Environment)
			for _, kv := range co.Environment {
				if j := slices.IndexFunc(env, func(e shapes.KeyValuePair) bool { return e.Name == kv.Name }); j >= 0 {
					env[j].Value = kv.Value
				} else {
					env = append(env, kv)
				}
			}
			c.Environment = env
		}
	}
	return def
}
