// Package resources is the instance's ledger of CPU units, memory and host
// ports. It does no I/O: the task engine reserves what a task needs before
// starting it and releases it when the task has stopped.
//
// Admission differs from the ECS agent's FIFO queue in two ways: requests
// are decided in priority order (daemon, then service, then standalone),
// and a request waits only while tasks that are already stopping hold what
// it lacks. One that could not fit even after they stop is rejected at
// once with a reason, so no task is left pending without an end in sight.
package resources

import (
	"cmp"
	"fmt"
	"slices"
	"sync"

	"github.com/capstanhq/capstan/internal/protocol"
)

// DefaultReservedPorts are the TCP ports the ECS agent reserves by default:
// SSH, the Docker daemon and the agent's own endpoints.
var DefaultReservedPorts = []int{22, 2375, 2376, 51678, 51679}

// Capacity is what the instance offers. A zero CPU or MemoryMiB means that
// resource is not accounted (a host whose size is unknown).
type Capacity struct {
	CPU               int // CPU units, 1024 per core
	MemoryMiB         int // total memory
	ReservedMemoryMiB int // kept back for the host and agent (ECS_RESERVED_MEMORY)
	// ReservedPorts are TCP host ports no task may bind; nil means
	// DefaultReservedPorts, an empty slice none.
	ReservedPorts    []int
	ReservedPortsUDP []int
}

// AvailableMemoryMiB is the memory tasks may reserve.
func (c Capacity) AvailableMemoryMiB() int { return max(c.MemoryMiB-c.ReservedMemoryMiB, 0) }

// Port is a host port of one protocol ("tcp" or "udp").
type Port struct {
	Port     int
	Protocol string
}

func (p Port) String() string { return fmt.Sprintf("%d/%s", p.Port, p.proto()) }

func (p Port) proto() string {
	if p.Protocol == "" {
		return "tcp"
	}
	return p.Protocol
}

// Need is what one task reserves.
type Need struct {
	CPU       int
	MemoryMiB int
	Ports     []Port // static host ports; dynamic ones are not reserved
}

// Shortage explains why a need does not fit.
type Shortage struct {
	Resource string // CPU, MEMORY, PORTS or PORTS_UDP, as ECS names them
	Need     int    // units asked (CPU, MEMORY)
	Free     int
	Total    int
	Port     Port // for PORTS
	Reserved bool // the port is reserved on the instance
}

func (s *Shortage) Error() string {
	switch s.Resource {
	case "CPU":
		return fmt.Sprintf("RESOURCE:CPU - task needs %d CPU units, %d free of %d", s.Need, s.Free, s.Total)
	case "MEMORY":
		return fmt.Sprintf("RESOURCE:MEMORY - task needs %d MiB, %d MiB free of %d MiB", s.Need, s.Free, s.Total)
	}
	if s.Reserved {
		return fmt.Sprintf("RESOURCE:%s - host port %s is reserved on this instance", s.Resource, s.Port)
	}
	return fmt.Sprintf("RESOURCE:%s - host port %s is already used by another task", s.Resource, s.Port)
}

// holding is one task's reservation.
type holding struct {
	need      Need
	releasing bool // the task is stopping; this will come free
}

// Ledger tracks reservations by task ARN. It is safe for concurrent use.
type Ledger struct {
	mu       sync.Mutex
	cap      Capacity
	reserved map[Port]bool
	held     map[string]*holding
}

// New returns an empty ledger for c.
func New(c Capacity) *Ledger {
	if c.ReservedPorts == nil {
		c.ReservedPorts = DefaultReservedPorts
	}
	l := &Ledger{cap: c, reserved: map[Port]bool{}, held: map[string]*holding{}}
	for _, p := range c.ReservedPorts {
		l.reserved[Port{p, "tcp"}] = true
	}
	for _, p := range c.ReservedPortsUDP {
		l.reserved[Port{p, "udp"}] = true
	}
	return l
}

// Capacity returns what the ledger was made with (reserved ports filled in).
func (l *Ledger) Capacity() Capacity { return l.cap }

// pool is free resources under some assumption about holders.
type pool struct {
	cpu, mem int
	ports    map[Port]bool // taken
}

// free sums what is not held, counting releasing holders as free when
// withReleasing is set.
func (l *Ledger) free(withReleasing bool) pool {
	p := pool{cpu: l.cap.CPU, mem: l.cap.AvailableMemoryMiB(), ports: map[Port]bool{}}
	for _, h := range l.held {
		if withReleasing && h.releasing {
			continue
		}
		p.cpu -= h.need.CPU
		p.mem -= h.need.MemoryMiB
		for _, pt := range h.need.Ports {
			p.ports[Port{pt.Port, pt.proto()}] = true
		}
	}
	return p
}

// fits reports the first shortage of need in p, or nil.
func (l *Ledger) fits(need Need, p pool) *Shortage {
	if l.cap.CPU > 0 && need.CPU > p.cpu {
		return &Shortage{Resource: "CPU", Need: need.CPU, Free: max(p.cpu, 0), Total: l.cap.CPU}
	}
	if l.cap.MemoryMiB > 0 && need.MemoryMiB > p.mem {
		return &Shortage{Resource: "MEMORY", Need: need.MemoryMiB, Free: max(p.mem, 0), Total: l.cap.AvailableMemoryMiB()}
	}
	seen := map[Port]bool{}
	for _, pt := range need.Ports {
		k := Port{pt.Port, pt.proto()}
		res := "PORTS"
		if k.Protocol == "udp" {
			res = "PORTS_UDP"
		}
		if l.reserved[k] {
			return &Shortage{Resource: res, Port: k, Reserved: true}
		}
		if p.ports[k] || seen[k] {
			return &Shortage{Resource: res, Port: k}
		}
		seen[k] = true
	}
	return nil
}

// take subtracts need from p.
func (p *pool) take(need Need) {
	p.cpu -= need.CPU
	p.mem -= need.MemoryMiB
	for _, pt := range need.Ports {
		p.ports[Port{pt.Port, pt.proto()}] = true
	}
}

// Reserve records need for task if it fits in what is free now. Reserving
// again for a task that holds resources changes nothing and succeeds. The
// error is a *Shortage.
func (l *Ledger) Reserve(task string, need Need) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, ok := l.held[task]; ok {
		return nil
	}
	if s := l.fits(need, l.free(false)); s != nil {
		return s
	}
	l.held[task] = &holding{need: clone(need)}
	return nil
}

// Force records need for task even if it does not fit: tasks found running
// after an agent restart keep their resources whatever the ledger says.
func (l *Ledger) Force(task string, need Need) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, ok := l.held[task]; !ok {
		l.held[task] = &holding{need: clone(need)}
	}
}

// Releasing marks task's resources as about to come free: waiting requests
// that need them keep waiting instead of being rejected.
func (l *Ledger) Releasing(task string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if h, ok := l.held[task]; ok {
		h.releasing = true
	}
}

// Release frees task's resources; releasing twice is harmless.
func (l *Ledger) Release(task string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.held, task)
}

// Holds reports whether task holds resources.
func (l *Ledger) Holds(task string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	_, ok := l.held[task]
	return ok
}

// Usage is what is held, in total and by stopping tasks.
type Usage struct {
	CPU, MemoryMiB                   int
	ReleasingCPU, ReleasingMemoryMiB int
	Tasks                            int
}

// Usage sums the current reservations.
func (l *Ledger) Usage() Usage {
	l.mu.Lock()
	defer l.mu.Unlock()
	var u Usage
	for _, h := range l.held {
		u.CPU += h.need.CPU
		u.MemoryMiB += h.need.MemoryMiB
		u.Tasks++
		if h.releasing {
			u.ReleasingCPU += h.need.CPU
			u.ReleasingMemoryMiB += h.need.MemoryMiB
		}
	}
	return u
}

// Request asks admission for a task.
type Request struct {
	Task string
	Kind string // protocol.KindDaemon, KindService or KindStandalone
	Need Need
}

// Verdict is the outcome of a request.
type Verdict int

const (
	Wait   Verdict = iota // stopping tasks hold what it needs
	Admit                 // reserved
	Reject                // can never fit while the current tasks run
)

func (v Verdict) String() string {
	switch v {
	case Admit:
		return "admit"
	case Reject:
		return "reject"
	}
	return "wait"
}

// Decision answers one request; Err is the *Shortage behind Wait or Reject.
type Decision struct {
	Task    string
	Verdict Verdict
	Err     error
}

// Rank orders task kinds for admission: lower goes first. Unknown kinds
// rank with standalone tasks.
func Rank(kind string) int {
	switch kind {
	case protocol.KindDaemon:
		return 0
	case protocol.KindService:
		return 1
	}
	return 2
}

// Admit decides requests by kind rank, keeping the given order within a
// rank, and reserves for those admitted. A request that waits keeps its
// share of what stopping tasks will free, so a later, lower-ranked request
// cannot take it: it is admitted only if it fits beside every waiter.
// Decisions come back in the order of reqs.
func (l *Ledger) Admit(reqs []Request) []Decision {
	l.mu.Lock()
	defer l.mu.Unlock()
	order := make([]int, len(reqs))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int {
		return cmp.Compare(Rank(reqs[a].Kind), Rank(reqs[b].Kind))
	})
	now := l.free(false)    // free at this moment
	later := l.free(true)   // free once stopping tasks are gone, minus waiters and admits
	ceiling := l.free(true) // the same, ignoring other requests: the reject test
	out := make([]Decision, len(reqs))
	for _, i := range order {
		r := reqs[i]
		d := Decision{Task: r.Task}
		switch {
		case l.held[r.Task] != nil:
			d.Verdict = Admit // already holds
		case l.fits(r.Need, ceiling) != nil:
			d.Verdict, d.Err = Reject, l.fits(r.Need, ceiling)
		case l.fits(r.Need, later) != nil:
			// Fits once stopping tasks are gone, but higher-ranked
			// waiters come first.
			d.Verdict, d.Err = Wait, l.fits(r.Need, later)
		case l.fits(r.Need, now) != nil:
			d.Verdict, d.Err = Wait, l.fits(r.Need, now)
			later.take(r.Need)
		default:
			d.Verdict = Admit
			now.take(r.Need)
			later.take(r.Need)
			l.held[r.Task] = &holding{need: clone(r.Need)}
		}
		out[i] = d
	}
	return out
}

func clone(n Need) Need {
	n.Ports = slices.Clone(n.Ports)
	return n
}
