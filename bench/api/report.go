// The report: its shape, the goals it checks and the table it prints.

package main

import (
	"fmt"
	"io"
	"runtime"
	"slices"
	"text/tabwriter"
	"time"

	"github.com/capstanhq/capstan/bench/internal/benchkit"
)

// Machine describes where the numbers were taken.
type Machine struct {
	GOOS       string `json:"goos"`
	GOARCH     string `json:"goarch"`
	GOMAXPROCS int    `json:"gomaxprocs"`
	NumCPU     int    `json:"numCPU"`
	GoVersion  string `json:"goVersion"`
	CPUModel   string `json:"cpuModel,omitempty"`
	Revision   string `json:"vcsRevision,omitempty"`
	// LoadAvg is /proc/loadavg when the run started and ended: other work
	// on the machine shows up here.
	LoadAvgStart string `json:"loadAvgStart,omitempty"`
	LoadAvgEnd   string `json:"loadAvgEnd,omitempty"`
}

// GoalCheck is the read-latency target evaluated for one read operation.
type GoalCheck struct {
	Operation string   `json:"operation"`
	Clients   int      `json:"clients"`
	P99Ms     *float64 `json:"p99Ms"`
	LimitMs   float64  `json:"limitMs"`
	Met       *bool    `json:"met"` // null when 128 clients were not run
	Errors    int      `json:"errors"`
}

// Report is the JSON output.
type Report struct {
	Started         time.Time   `json:"started"`
	Machine         Machine     `json:"machine"`
	Endpoint        string      `json:"endpoint"`
	InProcess       bool        `json:"inProcessServer"`
	Daemons         int         `json:"daemons"`
	Clients         []int       `json:"clients"`
	Ops             []string    `json:"ops"`
	RawSDKBody      bool        `json:"rawSdkBody"`
	DurationSeconds float64     `json:"durationSeconds"`
	WarmupSeconds   float64     `json:"warmupSeconds"`
	SetupSeconds    float64     `json:"setupSeconds"`
	Rows            []Row       `json:"rows"`
	Goal            string      `json:"goal"`
	GoalChecks      []GoalCheck `json:"goalChecks"`
	// Compare is set with -compare-user.
	Compare *Comparison `json:"compareUser,omitempty"`
}

func goalChecks(rows []Row) []GoalCheck {
	var out []GoalCheck
	for _, op := range []string{opDescribe, opList} {
		g := GoalCheck{Operation: op, Clients: goalClients, LimitMs: benchkit.Ms(goalP99)}
		for _, r := range rows {
			if r.Operation == op && r.Clients == goalClients && (r.Principal == "" || r.Principal == principalRoot) {
				p99 := r.P99
				// Errors count against the goal: a run that failed requests
				// has not shown the latency it claims.
				met := r.P99 <= benchkit.Ms(goalP99) && r.Errors == 0 && r.Requests > 0
				g.P99Ms, g.Met, g.Errors = &p99, &met, r.Errors
			}
		}
		out = append(out, g)
	}
	return out
}

func printTable(w io.Writer, rep *Report) {
	m := rep.Machine
	fmt.Fprintf(w, "%s/%s, GOMAXPROCS=%d, NumCPU=%d, %s, %s; load average %s → %s; %d daemons; %gs per scenario after %gs warm-up\n\n",
		m.GOOS, m.GOARCH, m.GOMAXPROCS, m.NumCPU, m.GoVersion, m.CPUModel, m.LoadAvgStart, m.LoadAvgEnd, rep.Daemons, rep.DurationSeconds, rep.WarmupSeconds)
	if rep.Compare == nil {
		printRows(w, rep.Rows)
	} else {
		for _, who := range []string{principalRoot, principalUser} {
			fmt.Fprintf(w, "signed as the %s:\n", who)
			printRows(w, slices.DeleteFunc(slices.Clone(rep.Rows), func(r Row) bool { return r.Principal != who }))
			fmt.Fprintln(w)
		}
	}
	var errLines []string
	for _, r := range rep.Rows {
		for k, n := range r.ErrorKinds {
			errLines = append(errLines, fmt.Sprintf("  %s clients=%d: %d × %s (e.g. %s)", r.Operation, r.Clients, n, k, r.ErrorExamples[k]))
		}
	}
	if len(errLines) > 0 {
		slices.Sort(errLines)
		fmt.Fprintln(w, "\nerrors:")
		for _, l := range errLines {
			fmt.Fprintln(w, l)
		}
	}
	fmt.Fprintf(w, "\ngoal: %s\n", rep.Goal)
	for _, g := range rep.GoalChecks {
		switch {
		case g.Met == nil:
			fmt.Fprintf(w, "  %-15s not evaluated (%d clients not run)\n", g.Operation, g.Clients)
		default:
			verdict := "MET"
			if !*g.Met {
				verdict = "NOT MET"
			}
			fmt.Fprintf(w, "  %-15s p99 %.2f ms, %d errors: %s\n", g.Operation, *g.P99Ms, g.Errors, verdict)
		}
	}
}

func printRows(w io.Writer, rows []Row) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "operation\tclients\trequests\treq/s\tp50 ms\tp90 ms\tp99 ms\tmax ms\terrors\tnew conns\tcpu\tother cpu\t")
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%.0f\t%.2f\t%.2f\t%.2f\t%.2f\t%d\t%d\t%.2f\t%.2f\t\n",
			r.Operation, r.Clients, r.Requests, r.Throughput, r.P50, r.P90, r.P99, r.Max, r.Errors, r.NewConns, r.ProcessCPU, r.OtherCPU)
	}
	tw.Flush()
}

func machine() Machine {
	m := Machine{GOOS: runtime.GOOS, GOARCH: runtime.GOARCH, GOMAXPROCS: runtime.GOMAXPROCS(0),
		NumCPU: runtime.NumCPU(), GoVersion: runtime.Version()}
	m.LoadAvgStart = benchkit.LoadAvg()
	m.CPUModel, m.Revision = benchkit.CPUModel(), benchkit.VCSRevision()
	return m
}
