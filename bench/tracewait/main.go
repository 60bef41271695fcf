// Command tracewait reads an execution trace of the server (bench/scale
// -trace) and says where its HTTP requests (the API's; websocket sessions
// are not requests) spent their time: from the moment the network poller
// made a connection's goroutine runnable until it went back to waiting for
// the next request, split into waiting for a core, running and blocked (on
// what). It also counts, once a millisecond, the goroutines waiting for a
// core and what they last blocked on: the queue a request joins.
//
//	go run ./bench/tracewait [-busiest] trace.out
package main

import (
	"cmp"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strings"
	"time"

	"golang.org/x/exp/trace"
)

var busiest = flag.Bool("busiest", false, "only the requests of the connection that made the most: in bench/scale, the API sampler's")

func main() {
	flag.Parse()
	if flag.NArg() != 1 {
		fmt.Fprintln(os.Stderr, "usage: tracewait TRACE")
		os.Exit(2)
	}
	f, err := os.Open(flag.Arg(0))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	defer f.Close()
	r, err := analyze(f)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if *busiest {
		r.onlyBusiest()
	}
	r.print(os.Stdout)
}

// causes sums the requests' time by cause.
func (r *report) causes() map[string]time.Duration {
	why := map[string]time.Duration{}
	for _, q := range r.requests {
		for k, v := range q.why {
			why[k] += v
		}
	}
	return why
}

// onlyBusiest keeps the requests of the connection goroutine that served
// the most.
func (r *report) onlyBusiest() {
	n := map[trace.GoID]int{}
	var top trace.GoID
	for _, q := range r.requests {
		n[q.g]++
		if n[q.g] > n[top] {
			top = q.g
		}
	}
	r.requests = slices.DeleteFunc(r.requests, func(q request) bool { return q.g != top })
}

// request is one request's time on its connection's goroutine.
type request struct {
	total, runnable, running, blocked time.Duration
	g                                 trace.GoID
	why                               map[string]time.Duration
}

type report struct {
	requests []request
	// queued is the average number of goroutines waiting for a core by
	// what they last blocked on.
	queued  map[string]float64
	samples int
}

// goroutine is what is followed of every goroutine.
type goroutine struct {
	state trace.GoState
	since trace.Time
	// reason is the top of the stack it last blocked or was preempted at.
	reason string
	// readied says what made it runnable.
	readied string
	// In a request: from readiness to the next wait for a request.
	inRequest       bool
	betweenRequests bool
	cur             request
	start           trace.Time
	why             map[string]time.Duration
}

func analyze(in io.Reader) (*report, error) {
	tr, err := trace.NewReader(in)
	if err != nil {
		return nil, err
	}
	rep := &report{queued: map[string]float64{}}
	gs := map[trace.GoID]*goroutine{}
	var next trace.Time
	for {
		ev, err := tr.ReadEvent()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, err
		}
		if ev.Kind() != trace.EventStateTransition {
			continue
		}
		st := ev.StateTransition()
		if st.Resource.Kind != trace.ResourceGoroutine {
			continue
		}
		now := ev.Time()
		if now >= next {
			if next != 0 {
				rep.census(gs)
			}
			next = now + trace.Time(time.Millisecond)
		}
		id := st.Resource.Goroutine()
		g := gs[id]
		if g == nil {
			g = &goroutine{why: map[string]time.Duration{}}
			gs[id] = g
		}
		from, to := st.Goroutine()
		if g.inRequest && g.since != 0 {
			d := now.Sub(g.since)
			switch from {
			case trace.GoRunnable:
				g.cur.runnable += d
				g.why["waiting for a core after "+g.readied] += d
			case trace.GoRunning, trace.GoSyscall:
				g.cur.running += d
			case trace.GoWaiting:
				g.cur.blocked += d
				g.why["blocked in "+g.reason] += d
			}
		}
		switch {
		case from == trace.GoRunning && to == trace.GoWaiting:
			g.reason = frames(st.Stack, 2)
			if waitsForRequest(st.Stack) {
				if g.inRequest {
					g.cur.total = now.Sub(g.start)
					g.cur.g, g.cur.why = id, maps.Clone(g.why)
					rep.requests = append(rep.requests, g.cur)
				}
				g.inRequest, g.betweenRequests = false, true
			}
		case from == trace.GoRunning && to == trace.GoRunnable:
			g.reason = frames(st.Stack, 2)
			g.readied = "preemption in " + g.reason
		case from == trace.GoWaiting && to == trace.GoRunnable:
			if g.betweenRequests {
				g.betweenRequests, g.inRequest = false, true
				g.cur, g.start = request{}, now
				clear(g.why)
				g.readied = "the network poller (a request came)"
			} else {
				g.readied = "a wake from " + g.reason
			}
		case from == trace.GoUndetermined:
			g.reason = "(as the trace began) " + frames(st.Stack, 2)
			g.readied = g.reason
		case from == trace.GoNotExist:
			g.reason = "created at " + frames(ev.Stack(), 2)
			g.readied = g.reason
			if hasFunc(ev.Stack(), "net/http.(*Server).Serve") {
				// A new connection: its first request starts here.
				g.inRequest, g.cur, g.start = true, request{}, now
				clear(g.why)
				g.readied = "a new connection"
			}
		}
		g.state, g.since = to, now
	}
	return rep, nil
}

// census counts the goroutines waiting for a core, by what they last
// blocked on.
func (r *report) census(gs map[trace.GoID]*goroutine) {
	r.samples++
	for _, g := range gs {
		if g.state == trace.GoRunnable {
			r.queued[cmp.Or(g.reason, "(unknown: already runnable when the trace began)")]++
		}
	}
}

// waitsForRequest tells a connection goroutine waiting for a request's
// bytes (net/http reads them through its connReader).
func waitsForRequest(s trace.Stack) bool {
	return hasFunc(s, "net/http.(*connReader).Read") || hasFunc(s, "net/http.(*conn).readRequest")
}

func hasFunc(s trace.Stack, sub string) bool {
	for f := range s.Frames() {
		if strings.Contains(f.Func, sub) {
			return true
		}
	}
	return false
}

// frames is the top n functions of s, innermost first.
func frames(s trace.Stack, n int) string {
	var out []string
	for f := range s.Frames() {
		out = append(out, f.Func)
		if len(out) == n {
			break
		}
	}
	return strings.Join(out, " < ")
}

func (r *report) print(w io.Writer) {
	why := r.causes()
	fmt.Fprintf(w, "requests: %d\n", len(r.requests))
	if len(r.requests) == 0 {
		return
	}
	for _, c := range []struct {
		name string
		get  func(request) time.Duration
	}{
		{"total (readiness → waiting for the next)", func(q request) time.Duration { return q.total }},
		{"waiting for a core", func(q request) time.Duration { return q.runnable }},
		{"running", func(q request) time.Duration { return q.running }},
		{"blocked", func(q request) time.Duration { return q.blocked }},
	} {
		ds := make([]time.Duration, len(r.requests))
		for i, q := range r.requests {
			ds[i] = c.get(q)
		}
		slices.Sort(ds)
		at := func(p float64) time.Duration {
			return ds[min(len(ds)-1, int(p*float64(len(ds))))].Round(10 * time.Microsecond)
		}
		fmt.Fprintf(w, "  %-42s p50 %-10v p90 %-10v p99 %-10v max %v\n", c.name, at(0.5), at(0.9), at(0.99), ds[len(ds)-1].Round(10*time.Microsecond))
	}
	fmt.Fprintln(w, "requests' time by cause (sum):")
	for _, k := range sortedByValue(why) {
		if why[k] < time.Millisecond {
			break
		}
		fmt.Fprintf(w, "  %10v  %s\n", why[k].Round(time.Millisecond), k)
	}
	total := 0.0
	for _, v := range r.queued {
		total += v
	}
	fmt.Fprintf(w, "goroutines waiting for a core, average of %d samples: %.1f; by what they last blocked on:\n", r.samples, total/float64(max(r.samples, 1)))
	for _, k := range sortedByValue(r.queued)[:min(len(r.queued), 15)] {
		fmt.Fprintf(w, "  %6.1f  %s\n", r.queued[k]/float64(max(r.samples, 1)), k)
	}
}

func sortedByValue[V time.Duration | float64](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b string) int {
		switch {
		case m[a] > m[b]:
			return -1
		case m[a] < m[b]:
			return 1
		}
		return strings.Compare(a, b)
	})
	return keys
}
