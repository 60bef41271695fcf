// Package memlimit chooses the server process's soft memory limit.
//
// Go's collector lets the heap grow to twice what was live at the last
// collection, and hands freed pages back to the system slowly. At 5,000
// instances the server's live heap peaks near 280 MiB during a rollout, so
// by default the process held ~270 MiB of garbage and free pages on top of
// it, and kept them after the rollout (docs/performance.md, "Server
// memory"). Under Auto the server sets a soft limit
// (runtime/debug.SetMemoryLimit) from the fleet it serves: Base plus
// PerInstance for each registered container instance, what its live heap
// and Go's other memory measured at 1,000 to 10,000 instances with room to
// collect. The limit never goes below the live heap and a quarter more
// (at least MinHeadroom) and Go's memory outside the heap, so a fleet
// heavier than the measured one makes the collector run more often, not
// without end; Go's own limiter also keeps the collector under half of the
// CPU. A small fleet's heap stays under the limit and keeps Go's pacing.
package memlimit

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"runtime/debug"
	"runtime/metrics"
	"strconv"
	"strings"
	"time"
)

// The limit under Auto: Base + PerInstance × registered instances.
const (
	Base        = 160 << 20
	PerInstance = 48 << 10
)

// MinHeadroom is the least garbage the heap may hold beyond what is live.
const MinHeadroom = 32 << 20

// Every is how often Auto looks again. The live heap is known after each
// collection; between two looks it can outgrow the limit, which only makes
// the next collection come sooner.
const Every = time.Second

// Mode is how the limit is chosen.
type Mode int

const (
	Auto  Mode = iota // follow the fleet and the live heap
	Off               // Go's default: no limit
	Fixed             // a limit given in MiB
)

// Setting is a parsed --memory-limit.
type Setting struct {
	Mode Mode
	MiB  int64 // with Fixed
}

// Parse reads "auto", "off", or a limit in MiB (at least 64).
func Parse(v string) (Setting, error) {
	switch v = strings.TrimSpace(v); v {
	case "auto", "":
		return Setting{Mode: Auto}, nil
	case "off":
		return Setting{Mode: Off}, nil
	}
	n, err := strconv.ParseInt(strings.TrimSuffix(v, "MiB"), 10, 64)
	if err != nil || n < 64 || n > 1<<30 {
		return Setting{}, fmt.Errorf("must be auto, off, or a limit in MiB from 64 (got %q)", v)
	}
	return Setting{Mode: Fixed, MiB: n}, nil
}

func (s Setting) String() string {
	switch s.Mode {
	case Off:
		return "off"
	case Fixed:
		return strconv.FormatInt(s.MiB, 10)
	}
	return "auto"
}

// Limit is the soft limit for a fleet of instances, a live heap and the
// memory Go holds outside the heap (stacks, its own structures).
func Limit(instances int, live, other uint64) uint64 {
	budget := uint64(Base) + uint64(max(instances, 0))*PerInstance
	return max(budget, live+max(MinHeadroom, live/4)+other)
}

// Apply puts s into effect for this process and, under Auto, follows the
// fleet (instances counts the registered container instances) and the
// live heap until ctx ends. GOMEMLIMIT in the environment wins over s, as
// GOMAXPROCS does over --procs-per-core. It logs what it chose.
func Apply(ctx context.Context, s Setting, log *slog.Logger, instances func() int) {
	if env := os.Getenv("GOMEMLIMIT"); env != "" {
		log.Info("memory limit from GOMEMLIMIT", "GOMEMLIMIT", env)
		return
	}
	switch s.Mode {
	case Off:
		debug.SetMemoryLimit(math.MaxInt64)
		log.Info("memory limit off: Go's default pacing (the heap grows to twice what is live)")
	case Fixed:
		debug.SetMemoryLimit(s.MiB << 20)
		log.Info("memory limit fixed", "limit_mib", s.MiB)
	default:
		log.Info("memory limit follows the fleet: 160 MiB + 48 KiB per registered instance, at least the live heap + max(32 MiB, live/4) + Go's memory outside the heap",
			"every", Every.String())
		go follow(ctx, Every, log, instances)
	}
}

// follow sets the limit every period until ctx ends.
func follow(ctx context.Context, every time.Duration, log *slog.Logger, instances func() int) {
	t := time.NewTicker(every)
	defer t.Stop()
	s := newSampler()
	var logged uint64
	for {
		live, other, err := s.read()
		if err == nil {
			n := instances()
			limit := Limit(n, live, other)
			debug.SetMemoryLimit(int64(limit))
			// Said again when it moved by a quarter: a fleet's growth
			// shows, a rollout's ups and downs mostly do not.
			if logged == 0 || limit > logged+logged/4 || limit < logged-logged/4 {
				log.Info("memory limit set", "limit_mib", limit>>20, "instances", n, "live_heap_mib", live>>20, "other_mib", other>>20)
				logged = limit
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// sampler reads the runtime's metrics the limit needs.
type sampler struct{ m []metrics.Sample }

const (
	mLive     = "/gc/heap/live:bytes"
	mTotal    = "/memory/classes/total:bytes"
	mObjects  = "/memory/classes/heap/objects:bytes"
	mUnused   = "/memory/classes/heap/unused:bytes"
	mFree     = "/memory/classes/heap/free:bytes"
	mReleased = "/memory/classes/heap/released:bytes"
)

func newSampler() *sampler {
	names := []string{mLive, mTotal, mObjects, mUnused, mFree, mReleased}
	s := &sampler{m: make([]metrics.Sample, len(names))}
	for i, n := range names {
		s.m[i].Name = n
	}
	return s
}

// read returns the live heap and the memory Go holds outside the heap.
func (s *sampler) read() (live, other uint64, err error) {
	metrics.Read(s.m)
	v := make([]uint64, len(s.m))
	for i, m := range s.m {
		if m.Value.Kind() != metrics.KindUint64 {
			return 0, 0, errors.New("memlimit: runtime metric " + m.Name + " not supported")
		}
		v[i] = m.Value.Uint64()
	}
	heap := v[2] + v[3] + v[4] + v[5]
	if v[1] > heap {
		other = v[1] - heap
	}
	return v[0], other, nil
}
