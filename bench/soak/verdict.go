package main

import (
	"encoding/csv"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	"github.com/capstanhq/capstan/bench/internal/benchkit"
)

// Report is what a soak measured.
type Report struct {
	Started         time.Time        `json:"started"`
	Revision        string           `json:"vcsRevision,omitempty"`
	CPUs            int              `json:"numCPU"`
	CPUModel        string           `json:"cpuModel,omitempty"`
	LoadAvgStart    string           `json:"loadAvgStart"`
	LoadAvgEnd      string           `json:"loadAvgEnd"`
	Instances       int              `json:"instances"`
	DurationSeconds float64          `json:"durationSeconds"`
	SampleSeconds   float64          `json:"sampleSeconds"`
	SetupSeconds    float64          `json:"setupSeconds"`
	Actions         map[string]int64 `json:"actions"`
	Errors          int64            `json:"errors"`
	LastErrors      []string         `json:"firstErrors,omitempty"`
	Samples         []Sample         `json:"samples"`
	Series          []Series         `json:"series"`
	Growing         []string         `json:"growing"`
	// Defrags are the member's defragmentations: the size each left is
	// what the records took then.
	Defrags []DefragRecord `json:"defrags"`
}

// DefragRecord is one defragmentation of the embedded member.
type DefragRecord struct {
	At        float64 `json:"at"` // seconds into the soak
	BeforeMiB float64 `json:"beforeMiB"`
	AfterMiB  float64 `json:"afterMiB"`
}

// Series is one measured quantity's verdict.
type Series struct {
	Name string `json:"name"`
	// MedianFirst and MedianLast are the medians of the two halves of
	// the samples after the warm-up; Rise is how much a least-squares
	// line through the last half climbs over it.
	MedianFirst float64 `json:"medianFirstHalf"`
	MedianLast  float64 `json:"medianLastHalf"`
	Rise        float64 `json:"riseLastHalf"`
	Min         float64 `json:"min"`
	Max         float64 `json:"max"`
	// Allowed is the growth tolerated: Tolerance of the first half's
	// median, and at least Floor.
	Allowed float64 `json:"allowed"`
	Grows   bool    `json:"grows"`
	// NotJudged says why the series is shown but not judged.
	NotJudged string `json:"notJudged,omitempty"`
}

// metric is a series the verdict judges: its tolerance is a share of the
// first half's median, its floor an absolute amount below which growth is
// noise (a p99 of a few ms on shared cores moves by tens).
type metric struct {
	name      string
	tolerance float64
	floor     float64
	get       func(Sample) float64
	// without says a sample has no reading of the series.
	without func(Sample) bool
	// raceBlind: under the race detector the series says nothing of a
	// leak (RSS holds its shadow memory, which only grows).
	raceBlind bool
}

var metrics = []metric{
	{"rss MiB", 0.2, 32, func(s Sample) float64 { return s.RSSMiB }, nil, true},
	{"goroutines", 0.1, 100, func(s Sample) float64 { return float64(s.Goroutines) }, nil, false},
	{"open files", 0.1, 20, func(s Sample) float64 { return float64(s.OpenFiles) }, nil, false},
	{"etcd in use MiB", 0.25, 4, func(s Sample) float64 { return s.EtcdInUseMiB }, nil, false},
	{"api p99 ms", 1.0, 50, func(s Sample) float64 { return s.APIp99Ms }, func(s Sample) bool { return s.Calls == 0 }, false},
	{"live heap MiB", 0.25, 16, func(s Sample) float64 { return s.HeapLiveMiB }, nil, false},
}

// analyse judges each series. A series grows without bound when, after
// the warm-up, the median of its last half exceeds the first half's by
// more than is allowed AND it still climbs through the last half by more
// than half of that: a cache that fills and then stays passes the second
// test, a leak fails both. With race set (a build with the race
// detector), series blind to it are shown but not judged.
func analyse(samples []Sample, warmup float64, race bool) []Series {
	skip := int(float64(len(samples)) * warmup)
	var out []Series
	for _, m := range metrics {
		// A window without a successful call has no p99 (0 would pull
		// the median down).
		var rest []Sample
		for _, s := range samples[skip:] {
			if m.without == nil || !m.without(s) {
				rest = append(rest, s)
			}
		}
		if len(rest) < 4 {
			out = append(out, Series{Name: m.name})
			continue
		}
		vals := make([]float64, len(rest))
		for i, s := range rest {
			vals[i] = m.get(s)
		}
		a, b := vals[:len(vals)/2], vals[len(vals)/2:]
		se := Series{Name: m.name, MedianFirst: median(a), MedianLast: median(b), Min: slices.Min(vals), Max: slices.Max(vals)}
		var xs []float64
		for _, s := range rest[len(vals)/2:] {
			xs = append(xs, s.At)
		}
		se.Rise = slope(xs, b) * (xs[len(xs)-1] - xs[0])
		se.Allowed = max(m.tolerance*se.MedianFirst, m.floor)
		se.Grows = se.MedianLast-se.MedianFirst > se.Allowed && se.Rise > se.Allowed/2
		if race && m.raceBlind {
			se.Grows, se.NotJudged = false, "the race detector's shadow memory"
		}
		out = append(out, se)
	}
	return out
}

func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// slope is the least-squares slope of ys over xs.
func slope(xs, ys []float64) float64 {
	n := float64(len(xs))
	var sx, sy, sxx, sxy float64
	for i := range xs {
		sx += xs[i]
		sy += ys[i]
		sxx += xs[i] * xs[i]
		sxy += xs[i] * ys[i]
	}
	d := n*sxx - sx*sx
	if d == 0 {
		return 0
	}
	return (n*sxy - sx*sy) / d
}

// print writes the series over time (about a dozen rows) and the verdicts.
func (r *Report) print(w io.Writer) {
	fmt.Fprintf(w, "\nsoak: %d instances for %s after a setup of %.0fs; load %s → %s; %d CPUs\n",
		r.Instances, time.Duration(r.DurationSeconds*float64(time.Second)), r.SetupSeconds, r.LoadAvgStart, r.LoadAvgEnd, r.CPUs)
	fmt.Fprintf(w, "actions %v, errors %d\n\n", r.Actions, r.Errors)
	fmt.Fprintf(w, "%8s %9s %9s %10s %6s %9s %9s %9s\n", "at", "rss MiB", "live heap", "goroutines", "fds", "db MiB", "in use", "p99 ms")
	step := max(1, len(r.Samples)/12)
	for i, s := range r.Samples {
		if i%step == 0 || i == len(r.Samples)-1 {
			fmt.Fprintf(w, "%7.0fs %9.1f %9.1f %10d %6d %9.1f %9.1f %9.1f\n", s.At, s.RSSMiB, s.HeapLiveMiB, s.Goroutines, s.OpenFiles, s.EtcdDBMiB, s.EtcdInUseMiB, s.APIp99Ms)
		}
	}
	fmt.Fprintf(w, "\n%d defragmentations; the database after each (MiB):", len(r.Defrags))
	for _, d := range r.Defrags {
		fmt.Fprintf(w, " %.1f (at %.0fs)", d.AfterMiB, d.At)
	}
	fmt.Fprintln(w)
	fmt.Fprintf(w, "\n%-15s %12s %12s %10s %10s  %s\n", "series", "median 1st", "median 2nd", "rise 2nd", "allowed", "verdict")
	for _, s := range r.Series {
		v := "bounded"
		switch {
		case s.NotJudged != "":
			v = "not judged: " + s.NotJudged
		case s.Grows:
			v = "GROWS"
		}
		fmt.Fprintf(w, "%-15s %12.1f %12.1f %10.1f %10.1f  %s\n", s.Name, s.MedianFirst, s.MedianLast, s.Rise, s.Allowed, v)
	}
}

// write puts report.json and samples.csv into dir.
func (r *Report) write(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if err := benchkit.WriteJSON(filepath.Join(dir, "report.json"), r); err != nil {
		return err
	}
	f, err := os.Create(filepath.Join(dir, "samples.csv"))
	if err != nil {
		return err
	}
	cw := csv.NewWriter(f)
	cw.Write([]string{"at_s", "rss_mib", "heap_live_mib", "goroutines", "open_files", "etcd_db_mib", "etcd_in_use_mib", "api_p99_ms", "calls", "hollow_instances", "tasks", "events", "audit_records"})
	ff := func(v float64) string { return strconv.FormatFloat(v, 'f', 1, 64) }
	for _, s := range r.Samples {
		cw.Write([]string{ff(s.At), ff(s.RSSMiB), ff(s.HeapLiveMiB), strconv.Itoa(s.Goroutines), strconv.Itoa(s.OpenFiles), ff(s.EtcdDBMiB), ff(s.EtcdInUseMiB), ff(s.APIp99Ms),
			strconv.Itoa(s.Calls), strconv.Itoa(s.Instances), strconv.Itoa(s.Tasks), strconv.Itoa(s.Events), strconv.Itoa(s.AuditRecords)})
	}
	cw.Flush()
	if err := cw.Error(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
