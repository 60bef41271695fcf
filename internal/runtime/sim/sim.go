// Package sim implements runtime.Runtime with simulated containers held in
// memory: no processes, no images to fetch, no network. It exists so that
// the real agent can run by the thousand in one process for scale
// benchmarks and fault tests (hollow instances); it is never the default.
//
// A container runs until it is stopped unless its behaviour says
// otherwise. Behaviour comes from Config.Images (by image reference) and
// is overridden by the container's environment:
//
//	SIM_EXIT_AFTER=2s      exit 2s after start (SIM_EXIT_CODE alone: at once)
//	SIM_EXIT_CODE=3        the exit code when it exits on its own (default 1)
//	SIM_START_ERROR=text   Start fails with text, as for a missing binary
//	SIM_HEALTH=unhealthy   what the health check reports (default healthy)
//	SIM_HEALTH_AFTER=1s    when it first reports (default: the check's
//	                       start period, else its interval, else 30s)
//	SIM_IGNORE_STOP=true   a stop waits out the timeout and kills (137)
//	SIM_OUTPUT=text        what the container's log holds
//
// Latencies (create, start, stop, pull) are set per runtime. One Runtime
// is one host: each hollow instance has its own.
package sim

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/capstanhq/capstan/internal/runtime"
)

// Behaviour is what a simulated container does once started.
type Behaviour struct {
	// PullError makes pulls of the image fail (image-level only).
	PullError string
	// StartError makes Start fail with this message.
	StartError string
	// Exit makes the container exit on its own ExitAfter after start, with
	// ExitCode.
	Exit      bool
	ExitAfter time.Duration
	ExitCode  int
	// Health is what a health check reports ("healthy" when empty) once
	// HealthAfter has passed since start (0: the check's own timing).
	Health      string
	HealthAfter time.Duration
	// IgnoreStop makes a stop wait for its timeout, then kill (137).
	IgnoreStop bool
	// Output is the container's log.
	Output string
}

// Config sets up a simulated host. Zero values are usable.
type Config struct {
	// CPUs and MemoryBytes are the host's capacity (default 2 and 4 GiB).
	CPUs        int
	MemoryBytes int64
	// Latencies of each operation; the call blocks that long (or until its
	// context ends), as a real engine would.
	CreateLatency time.Duration
	StartLatency  time.Duration
	StopLatency   time.Duration
	PullLatency   time.Duration
	// PullRequired makes images exist only once pulled or imported;
	// otherwise every image is present.
	PullRequired bool
	// Images gives behaviour by image reference as tasks name it.
	Images map[string]Behaviour
	Now    func() time.Time
}

// Runtime is one simulated host. It is safe for concurrent use.
type Runtime struct {
	cfg Config

	mu         sync.Mutex
	containers map[string]*container
	names      map[string]string // name → ID
	images     map[string]runtime.Image
	networks   map[string]*network // by ID
	subs       []*subscription
	nextPort   int
	nextIP     uint32 // on the default bridge
	closed     bool
}

var _ runtime.Runtime = (*Runtime)(nil)

// New returns an empty host.
func New(cfg Config) *Runtime {
	if cfg.CPUs <= 0 {
		cfg.CPUs = 2
	}
	if cfg.MemoryBytes <= 0 {
		cfg.MemoryBytes = 4 << 30
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Runtime{cfg: cfg, containers: map[string]*container{}, names: map[string]string{},
		images: map[string]runtime.Image{}, networks: map[string]*network{}, nextPort: 32768}
}

// Close stops every container's timers and ends every event stream, as if
// the host went away. The runtime answers nothing afterwards.
func (r *Runtime) Close() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.closed = true
	for _, c := range r.containers {
		c.stopTimers()
	}
	for _, s := range slices.Clone(r.subs) {
		s.end(errClosed)
	}
}

var errClosed = errors.New("sim: runtime closed")

func (r *Runtime) Info(context.Context) (runtime.Info, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return runtime.Info{}, errClosed
	}
	return runtime.Info{Name: "sim", Version: "1.0.0", APIVersion: "1.44", CPUs: r.cfg.CPUs, MemoryBytes: r.cfg.MemoryBytes,
		OS: "linux", Arch: "amd64", KernelVersion: "sim"}, nil
}

// wait blocks for d or until ctx ends.
func wait(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func newID() string {
	var b [32]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// behaviour is the image's configured behaviour with the container's
// environment applied.
func (r *Runtime) behaviour(spec runtime.ContainerSpec) (Behaviour, error) {
	b := r.cfg.Images[spec.Image]
	for _, kv := range spec.Env {
		k, v, _ := strings.Cut(kv, "=")
		if !strings.HasPrefix(k, "SIM_") {
			continue
		}
		var err error
		switch k {
		case "SIM_EXIT_AFTER":
			b.Exit = true
			b.ExitAfter, err = time.ParseDuration(v)
			if b.ExitCode == 0 && !hasEnv(spec.Env, "SIM_EXIT_CODE") {
				b.ExitCode = 1
			}
		case "SIM_EXIT_CODE":
			b.Exit = true
			_, err = fmt.Sscanf(v, "%d", &b.ExitCode)
		case "SIM_START_ERROR":
			b.StartError = v
		case "SIM_HEALTH":
			if v != runtime.HealthHealthy && v != runtime.HealthUnhealthy {
				err = errors.New("must be healthy or unhealthy")
			}
			b.Health = v
		case "SIM_HEALTH_AFTER":
			b.HealthAfter, err = time.ParseDuration(v)
		case "SIM_IGNORE_STOP":
			b.IgnoreStop = v == "true" || v == "1"
		case "SIM_OUTPUT":
			b.Output = v
		}
		if err != nil {
			return b, fmt.Errorf("sim: %s=%q: %w", k, v, err)
		}
	}
	return b, nil
}

func hasEnv(env []string, key string) bool {
	return slices.ContainsFunc(env, func(kv string) bool { return strings.HasPrefix(kv, key+"=") })
}

// emit sends an event to every stream; r.mu is held.
func (r *Runtime) emit(c *container, action string, set func(*runtime.Event)) {
	if len(r.subs) == 0 {
		return
	}
	ev := runtime.Event{ContainerID: c.id, Action: action, Labels: c.labels, Time: r.cfg.Now()}
	if set != nil {
		set(&ev)
	}
	for _, s := range r.subs {
		s.send(ev)
	}
}

// Events streams container events from now on. Delivery never drops an
// event: a slow reader gets them later, in order.
func (r *Runtime) Events(ctx context.Context) (<-chan runtime.Event, <-chan error) {
	s := &subscription{r: r, ctx: ctx, out: make(chan runtime.Event, 16), errc: make(chan error, 1), stop: make(chan struct{})}
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		close(s.out)
		s.errc <- errClosed
		return s.out, s.errc
	}
	r.subs = append(r.subs, s)
	r.mu.Unlock()
	context.AfterFunc(ctx, func() {
		r.mu.Lock()
		defer r.mu.Unlock()
		s.cancelled = true
		if !s.flushing {
			s.end(nil)
		}
	})
	return s.out, s.errc
}

// subscription is one event stream. It holds no goroutine while its reader
// keeps up; a backlog is drained by one that exits once it is empty.
type subscription struct {
	r         *Runtime
	ctx       context.Context
	out       chan runtime.Event
	errc      chan error
	stop      chan struct{} // closed by end
	err       error
	pending   []runtime.Event
	flushing  bool
	cancelled bool
	ended     bool
}

// send queues ev; r.mu is held.
func (s *subscription) send(ev runtime.Event) {
	if s.ended || s.cancelled {
		return
	}
	if !s.flushing {
		select {
		case s.out <- ev:
			return
		default:
		}
	}
	s.pending = append(s.pending, ev)
	if !s.flushing {
		s.flushing = true
		go s.flush()
	}
}

// flush drains the backlog; it alone closes the stream while it runs.
func (s *subscription) flush() {
	for {
		s.r.mu.Lock()
		if s.ended || len(s.pending) == 0 {
			s.flushing = false
			if s.cancelled && !s.ended {
				s.end(nil)
			} else if s.ended {
				s.close()
			}
			s.r.mu.Unlock()
			return
		}
		ev := s.pending[0]
		s.pending = s.pending[1:]
		s.r.mu.Unlock()
		select {
		case s.out <- ev:
		case <-s.stop:
		case <-s.ctx.Done():
			s.r.mu.Lock()
			s.end(nil) // flushing: the next round closes
			s.r.mu.Unlock()
		}
	}
}

// end finishes the stream once with err; r.mu is held.
func (s *subscription) end(err error) {
	if s.ended {
		return
	}
	s.ended, s.err, s.pending = true, err, nil
	s.r.subs = slices.DeleteFunc(s.r.subs, func(o *subscription) bool { return o == s })
	close(s.stop)
	if !s.flushing {
		s.close()
	}
}

func (s *subscription) close() {
	close(s.out)
	s.errc <- s.err
}

// ip allocates an address on the default bridge; r.mu is held.
func (r *Runtime) bridgeIP() string {
	r.nextIP++
	n := r.nextIP + 1
	return netip.AddrFrom4([4]byte{172, 17, byte(n >> 8), byte(n)}).String()
}

func notFound(what, id string) error {
	return fmt.Errorf("sim: %s %s: %w", what, id, runtime.ErrNotFound)
}

// copyMap returns a copy; nil stays nil.
func copyMap(m map[string]string) map[string]string {
	if m == nil {
		return nil
	}
	return maps.Clone(m)
}

// PauseImage is the daemon namespace holder's image on a simulated host,
// where no image has to be built.
const PauseImage = "capstan/pause:sim"
