// Command telemetry is the sample daemon `capstan dev` runs on every
// instance: applications POST events to /ingest, and /metrics shows what
// arrived, per source, in the Prometheus text format.
//
//	TELEMETRY_ADDR=:8125 go run ./examples/telemetry
//
// It listens on TELEMETRY_ADDR (default :8125).
//
// An /ingest body holds one event per line, either a JSON object
// ({"source": "web", "name": "http_requests", "value": 1}) or a plain
// counter ("http_requests:1|c", "http_requests 1", or just "http_requests").
// The source is the line's own, else the ?source= parameter, else the
// sender's address.
//
// TELEMETRY_ERROR_RATE=N (errors a second, default 0) makes the daemon
// count N synthetic errors a second in telemetry_errors_total, so that a
// revision can be made bad in a way only an alarm sees (a Prometheus rule
// such as `rate(telemetry_errors_total[10s]) > 0`), while it stays healthy.
//
// `telemetry healthcheck` exits 0 when the daemon answers on /metrics; the
// image has no shell, so the health check runs it directly.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"math"
	"net"
	"net/http"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

func main() {
	addr := os.Getenv("TELEMETRY_ADDR")
	if addr == "" {
		addr = ":8125"
	}
	if len(os.Args) > 1 && os.Args[1] == "healthcheck" {
		os.Exit(healthcheck(addr))
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	rate, err := errorRate(os.Getenv("TELEMETRY_ERROR_RATE"))
	if err != nil {
		log.Fatal(err)
	}
	s := newStats()
	s.errorRate = rate
	mux := http.NewServeMux()
	mux.HandleFunc("POST /ingest", s.ingest)
	mux.HandleFunc("GET /metrics", s.metrics)
	srv := &http.Server{Addr: addr, Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		<-ctx.Done()
		shut, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(shut)
	}()
	log.Printf("telemetry listening on %s", addr)
	if err := srv.ListenAndServe(); !errors.Is(err, http.ErrServerClosed) {
		log.Fatal(err)
	}
}

func healthcheck(addr string) int {
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	c := http.Client{Timeout: 2 * time.Second}
	resp, err := c.Get("http://127.0.0.1:" + port + "/metrics")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		fmt.Fprintln(os.Stderr, "metrics:", resp.Status)
		return 1
	}
	return 0
}

type source struct {
	requests, bytes uint64
	lastSeen        time.Time
	counters        map[string]float64
}

type stats struct {
	mu      sync.Mutex
	sources map[string]*source
	invalid uint64

	errorRate float64   // synthetic errors a second
	started   time.Time // errors count from here
}

func newStats() *stats { return &stats{sources: map[string]*source{}, started: time.Now()} }

// errorRate reads TELEMETRY_ERROR_RATE: "" is 0.
func errorRate(v string) (float64, error) {
	if v == "" {
		return 0, nil
	}
	r, err := strconv.ParseFloat(v, 64)
	if err != nil || r < 0 || math.IsInf(r, 0) || math.IsNaN(r) {
		return 0, fmt.Errorf("TELEMETRY_ERROR_RATE=%q: must be a number of errors a second, 0 or more", v)
	}
	return r, nil
}

// errorCount is how many synthetic errors have been raised by now: a counter
// that grows steadily, as a failing agent's would.
func (s *stats) errorCount(now time.Time) float64 {
	return math.Floor(s.errorRate * now.Sub(s.started).Seconds())
}

func (s *stats) source(name string) *source {
	src := s.sources[name]
	if src == nil {
		src = &source{counters: map[string]float64{}}
		s.sources[name] = src
	}
	return src
}

type event struct {
	Source string   `json:"source"`
	Name   string   `json:"name"`
	Value  *float64 `json:"value"`
}

func (s *stats) ingest(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 1<<20))
	if err != nil {
		http.Error(w, err.Error(), http.StatusRequestEntityTooLarge)
		return
	}
	from := r.URL.Query().Get("source")
	if !validName(from) {
		from, _, _ = net.SplitHostPort(r.RemoteAddr)
	}
	var events []event
	bad := 0
	for line := range strings.Lines(string(body)) {
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		ev, ok := parseLine(line)
		if !ok {
			bad++
			continue
		}
		if ev.Source == "" {
			ev.Source = from
		}
		events = append(events, ev)
	}

	s.mu.Lock()
	src := s.source(from)
	src.requests++
	src.bytes += uint64(len(body))
	src.lastSeen = time.Now()
	for _, ev := range events {
		s.source(ev.Source).counters[ev.Name] += *ev.Value
	}
	s.invalid += uint64(bad)
	s.mu.Unlock()

	if bad > 0 {
		http.Error(w, fmt.Sprintf("accepted %d events, rejected %d malformed lines", len(events), bad), http.StatusBadRequest)
		return
	}
	fmt.Fprintf(w, "accepted %d events\n", len(events))
}

// parseLine reads one JSON or plain-counter event; the value defaults to 1.
func parseLine(line string) (event, bool) {
	var ev event
	if strings.HasPrefix(line, "{") {
		if json.Unmarshal([]byte(line), &ev) != nil {
			return ev, false
		}
	} else {
		name, rest, _ := strings.Cut(strings.TrimSuffix(line, "|c"), ":")
		if f := strings.Fields(name); rest == "" && len(f) == 2 {
			name, rest = f[0], f[1]
		}
		ev.Name = name
		if rest != "" {
			v, err := strconv.ParseFloat(rest, 64)
			if err != nil {
				return ev, false
			}
			ev.Value = &v
		}
	}
	if !validName(ev.Name) || ev.Source != "" && !validName(ev.Source) {
		return ev, false
	}
	if ev.Value == nil {
		one := 1.0
		ev.Value = &one
	}
	return ev, true
}

// validName keeps names and sources to characters that need no escaping
// in label values (":" for IPv6 senders).
func validName(s string) bool {
	if s == "" || len(s) > 128 {
		return false
	}
	for _, r := range s {
		if !(strings.ContainsRune("_.-/:", r) || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9') {
			return false
		}
	}
	return true
}

func (s *stats) metrics(w http.ResponseWriter, _ *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	names := make([]string, 0, len(s.sources))
	for n := range s.sources {
		names = append(names, n)
	}
	slices.Sort(names)
	w.Header().Set("Content-Type", "text/plain; version=0.0.4")

	fmt.Fprintln(w, "# HELP telemetry_ingest_requests_total Ingest requests received, by sender.")
	fmt.Fprintln(w, "# TYPE telemetry_ingest_requests_total counter")
	s.each(w, names, func(src *source) (float64, bool) { return float64(src.requests), src.requests > 0 }, "telemetry_ingest_requests_total")
	fmt.Fprintln(w, "# HELP telemetry_ingest_bytes_total Ingest body bytes received, by sender.")
	fmt.Fprintln(w, "# TYPE telemetry_ingest_bytes_total counter")
	s.each(w, names, func(src *source) (float64, bool) { return float64(src.bytes), src.requests > 0 }, "telemetry_ingest_bytes_total")
	fmt.Fprintln(w, "# HELP telemetry_last_seen_timestamp_seconds When the sender last sent anything.")
	fmt.Fprintln(w, "# TYPE telemetry_last_seen_timestamp_seconds gauge")
	s.each(w, names, func(src *source) (float64, bool) {
		return float64(src.lastSeen.UnixMilli()) / 1000, !src.lastSeen.IsZero()
	}, "telemetry_last_seen_timestamp_seconds")
	fmt.Fprintln(w, "# HELP telemetry_events_total Sum of event values, by source and name.")
	fmt.Fprintln(w, "# TYPE telemetry_events_total counter")
	for _, n := range names {
		src := s.sources[n]
		events := make([]string, 0, len(src.counters))
		for e := range src.counters {
			events = append(events, e)
		}
		slices.Sort(events)
		for _, e := range events {
			fmt.Fprintf(w, "telemetry_events_total{source=%q,name=%q} %s\n", n, e, num(src.counters[e]))
		}
	}
	fmt.Fprintln(w, "# HELP telemetry_invalid_lines_total Malformed ingest lines rejected.")
	fmt.Fprintln(w, "# TYPE telemetry_invalid_lines_total counter")
	fmt.Fprintf(w, "telemetry_invalid_lines_total %d\n", s.invalid)
	// Always present (0 when healthy), so a rule on it is evaluated from
	// the first scrape instead of seeing no series.
	fmt.Fprintln(w, "# HELP telemetry_errors_total Synthetic errors raised, TELEMETRY_ERROR_RATE a second.")
	fmt.Fprintln(w, "# TYPE telemetry_errors_total counter")
	fmt.Fprintf(w, "telemetry_errors_total %s\n", num(s.errorCount(time.Now())))
}

func (s *stats) each(w io.Writer, names []string, value func(*source) (float64, bool), metric string) {
	for _, n := range names {
		if v, ok := value(s.sources[n]); ok {
			fmt.Fprintf(w, "%s{source=%q} %s\n", metric, n, num(v))
		}
	}
}

func num(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }
