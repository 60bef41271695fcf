// Timing calls and summing them into rows.

package main

import (
	"context"
	"errors"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/ecs"
	"github.com/aws/smithy-go"
	"github.com/capstanhq/capstan/bench/internal/benchkit"
)

// series collects one operation's outcomes on one worker.
type series struct {
	lat      []time.Duration // successful requests only
	errs     map[string]int
	errExamp map[string]string
}

// recorder is one worker's measurements; samples that started before
// measureFrom are warm-up and dropped.
type recorder struct {
	measureFrom time.Time
	ops         map[string]*series
	prefix      string // put before op names (-compare-user's mixed mode)
}

func (r *recorder) add(op string, started time.Time, d time.Duration, err error) {
	if started.Before(r.measureFrom) {
		return
	}
	op = r.prefix + op
	s := r.ops[op]
	if s == nil {
		s = &series{errs: map[string]int{}, errExamp: map[string]string{}}
		r.ops[op] = s
	}
	if err != nil {
		k := errorKind(err)
		s.errs[k]++
		if _, ok := s.errExamp[k]; !ok {
			s.errExamp[k] = err.Error()
		}
		return
	}
	s.lat = append(s.lat, d)
}

func errorKind(err error) string {
	var ae smithy.APIError
	switch {
	case errors.As(err, &ae):
		return ae.ErrorCode()
	case errors.Is(err, context.DeadlineExceeded):
		return "Timeout"
	default:
		return "Transport"
	}
}

// workload is one client's loop body: one iteration, recorded into r.
type workload func(ctx context.Context, worker, iter int, c *ecs.Client, r *recorder)

// Row is one line of the report.
type Row struct {
	Operation     string            `json:"operation"`
	Clients       int               `json:"clients"`
	Requests      int               `json:"requests"`
	Errors        int               `json:"errors"`
	ErrorKinds    map[string]int    `json:"errorKinds,omitempty"`
	ErrorExamples map[string]string `json:"errorExamples,omitempty"`
	Seconds       float64           `json:"seconds"`
	Throughput    float64           `json:"throughputPerSec"`
	P50           float64           `json:"p50Ms"`
	P90           float64           `json:"p90Ms"`
	P99           float64           `json:"p99Ms"`
	Max           float64           `json:"maxMs"`
	SettleSeconds float64           `json:"settleSeconds,omitempty"`
	// Principal is "root" or "user" with -compare-user, else empty.
	Principal string `json:"principal,omitempty"`
	// NewConns is TCP connections the clients opened while measuring (all
	// operations of the scenario); with keep-alive working it stays near 0.
	NewConns int64 `json:"newConns"`
	// ProcessCPU is CPU time this process (clients and in-process server)
	// used per second of the scenario; below GOMAXPROCS on a saturated run
	// means something else on the machine took the rest.
	ProcessCPU float64 `json:"processCpuCores"`
	// OtherCPU is the machine's busy CPU (from /proc/stat) not used by this
	// process: other work competing with the run, and the server itself
	// when -endpoint names one on this machine.
	OtherCPU float64 `json:"otherCpuCores"`
}

// runScenario runs len(clients) workers for warmup+duration and reports
// one row per operation recorded. Workers stop starting requests at the
// deadline; requests in flight then are finished and counted.
func runScenario(ctx context.Context, clients []*ecs.Client, warmup, duration time.Duration, w workload) ([]Row, error) {
	ph, err := measure(ctx, clients, warmup, duration, w)
	if err != nil {
		return nil, err
	}
	return summarize(len(clients), ph), nil
}

// phase is what one measured run of a scenario recorded, before
// percentiles: phases of the same kind are merged by summarize.
type phase struct {
	ops      map[string]*series
	order    []string
	elapsed  time.Duration
	newConns int64
	cpu      time.Duration // this process's CPU over elapsed
	other    time.Duration // the rest of the machine's
}

func measure(ctx context.Context, clients []*ecs.Client, warmup, duration time.Duration, w workload) (*phase, error) {
	start := time.Now()
	measureFrom := start.Add(warmup)
	end := measureFrom.Add(duration)
	recs := make([]*recorder, len(clients))
	var dialsAtStart atomic.Int64
	dialsAtStart.Store(dials.Load())
	mark := time.AfterFunc(warmup, func() { dialsAtStart.Store(dials.Load()) })
	defer mark.Stop()
	var cpuAtStart, hostAtStart atomic.Int64
	cpuAtStart.Store(int64(processCPU()))
	hostAtStart.Store(int64(hostBusyCPU()))
	mark2 := time.AfterFunc(warmup, func() {
		cpuAtStart.Store(int64(processCPU()))
		hostAtStart.Store(int64(hostBusyCPU()))
	})
	defer mark2.Stop()
	var wg sync.WaitGroup
	for i, c := range clients {
		recs[i] = &recorder{measureFrom: measureFrom, ops: map[string]*series{}}
		wg.Go(func() {
			for iter := 0; ctx.Err() == nil && time.Now().Before(end); iter++ {
				w(ctx, i, iter, c, recs[i])
			}
		})
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	ph := &phase{ops: map[string]*series{}, elapsed: time.Since(measureFrom), newConns: dials.Load() - dialsAtStart.Load()}
	ph.cpu = processCPU() - time.Duration(cpuAtStart.Load())
	ph.other = max(0, hostBusyCPU()-time.Duration(hostAtStart.Load())-ph.cpu)
	for _, r := range recs {
		ph.add(r.ops)
	}
	return ph, nil
}

// add merges one worker's (or one phase's) series into ph.
func (ph *phase) add(ops map[string]*series) {
	for op, s := range ops {
		m := ph.ops[op]
		if m == nil {
			m = &series{errs: map[string]int{}, errExamp: map[string]string{}}
			ph.ops[op] = m
			ph.order = append(ph.order, op)
		}
		m.lat = append(m.lat, s.lat...)
		for k, n := range s.errs {
			m.errs[k] += n
			if _, ok := m.errExamp[k]; !ok {
				m.errExamp[k] = s.errExamp[k]
			}
		}
	}
}

// summarize reports the phases together, as one run of their summed
// length: one row per operation.
func summarize(clients int, phases ...*phase) []Row {
	all := &phase{ops: map[string]*series{}}
	for _, ph := range phases {
		all.add(ph.ops)
		all.elapsed += ph.elapsed
		all.newConns += ph.newConns
		all.cpu += ph.cpu
		all.other += ph.other
	}
	secs := all.elapsed.Seconds()
	sort.Slice(all.order, func(i, j int) bool { return opRank(all.order[i]) < opRank(all.order[j]) })
	var rows []Row
	for _, op := range all.order {
		s := all.ops[op]
		slices.Sort(s.lat)
		row := Row{Operation: op, Clients: clients, Seconds: secs, NewConns: all.newConns,
			ProcessCPU: all.cpu.Seconds() / secs, OtherCPU: all.other.Seconds() / secs}
		for _, n := range s.errs {
			row.Errors += n
		}
		if row.Errors > 0 {
			row.ErrorKinds, row.ErrorExamples = s.errs, s.errExamp
		}
		row.Requests = len(s.lat) + row.Errors
		row.Throughput = float64(row.Requests) / secs
		row.P50, row.P90, row.P99 = benchkit.Ms(benchkit.Pct(s.lat, 0.50)), benchkit.Ms(benchkit.Pct(s.lat, 0.90)), benchkit.Ms(benchkit.Pct(s.lat, 0.99))
		if len(s.lat) > 0 {
			row.Max = benchkit.Ms(s.lat[len(s.lat)-1])
		}
		rows = append(rows, row)
	}
	return rows
}

func opRank(op string) int {
	return slices.Index([]string{opDescribe, opList, opPair, opCreate, opDelete}, op)
}

// processCPU is the user and system CPU time of this process so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// hostBusyCPU is the machine's non-idle CPU time so far (Linux; 0 elsewhere).
func hostBusyCPU() time.Duration {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 8 || f[0] != "cpu" {
		return 0
	}
	var busy int64
	for i, v := range f[1:] {
		n, _ := strconv.ParseInt(v, 10, 64)
		if i != 3 && i != 4 && i < 8 { // skip idle and iowait; guest is inside user
			busy += n
		}
	}
	return time.Duration(busy) * time.Second / 100 // USER_HZ
}
