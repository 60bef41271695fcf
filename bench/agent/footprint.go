package main

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/capstanhq/capstan/bench/internal/benchkit"
)

// Footprint is the agent process at one point of the run.
type Footprint struct {
	Phase   string  `json:"phase"`
	Tasks   int     `json:"tasks"`
	Steady  bool    `json:"steady"`
	WaitedS float64 `json:"waitedForSteadySeconds"`
	// RSSMiB is the largest VmRSS over the steady interval; the split into
	// anonymous and file-backed pages is from the same reading.
	RSSMiB     float64 `json:"rssMiB"`
	AnonMiB    float64 `json:"rssAnonMiB"`
	FileMiB    float64 `json:"rssFileMiB"`
	HWMMiB     float64 `json:"vmHWMMiB"`
	Threads    int     `json:"threads"`
	WindowS    float64 `json:"windowSeconds,omitempty"`
	CPUSeconds float64 `json:"cpuSeconds,omitempty"` // utime+stime over the window
	CPUPercent float64 `json:"cpuPercentOfOneCore,omitempty"`
	WindowMax  float64 `json:"rssMaxInWindowMiB,omitempty"`
	// ServerCPU is this process's CPU (in-process server and the
	// benchmark, which is idle then) over the same window, for context.
	ServerCPU float64 `json:"serverProcessCpuSeconds,omitempty"`
	Goal      float64 `json:"goalMiB,omitempty"`
	Met       *bool   `json:"met,omitempty"`
}

// procStatus is what /proc/<pid>/status and /proc/<pid>/stat say about a process.
type procStatus struct {
	rss, anon, file, hwm int64 // KiB
	threads              int
	cpuTicks             int64 // utime+stime
}

func readProc(pid int) (procStatus, error) {
	var s procStatus
	bs, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return s, err
	}
	for line := range strings.Lines(string(bs)) {
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		f := strings.Fields(v)
		if len(f) == 0 {
			continue
		}
		n, _ := strconv.ParseInt(f[0], 10, 64)
		switch k {
		case "VmRSS":
			s.rss = n
		case "RssAnon":
			s.anon = n
		case "RssFile":
			s.file = n
		case "VmHWM":
			s.hwm = n
		case "Threads":
			s.threads = int(n)
		}
	}
	bs, err = os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return s, err
	}
	// Fields after the command name, which may hold spaces and parentheses.
	i := strings.LastIndexByte(string(bs), ')')
	f := strings.Fields(string(bs[i+1:]))
	if len(f) < 13 {
		return s, fmt.Errorf("/proc/%d/stat: %d fields after the name", pid, len(f))
	}
	ut, _ := strconv.ParseInt(f[11], 10, 64) // field 14 of stat(5)
	st, _ := strconv.ParseInt(f[12], 10, 64) // field 15
	s.cpuTicks = ut + st
	return s, nil
}

func mib(kib int64) float64 { return float64(kib) / 1024 }

func (a *agentProc) snapshot(phase string) (Footprint, error) {
	s, err := readProc(a.pid())
	if err != nil {
		return Footprint{}, err
	}
	return Footprint{Phase: phase, RSSMiB: mib(s.rss), AnonMiB: mib(s.anon), FileMiB: mib(s.file), HWMMiB: mib(s.hwm), Threads: s.threads}, nil
}

// footprint waits until the agent's RSS has held within 2% for -steady,
// records the largest reading of that interval, then measures CPU and RSS
// over -window.
func (b *bench) footprint(ctx context.Context, phase string, tasks int, goal float64) (Footprint, error) {
	const every = 250 * time.Millisecond
	fp := Footprint{Phase: phase, Tasks: tasks, Goal: goal}
	pid := b.agent.pid()
	need := int(b.o.steady/every) + 1
	var win []procStatus
	start := time.Now()
	for {
		if err := b.agent.alive(); err != nil {
			return fp, err
		}
		s, err := readProc(pid)
		if err != nil {
			return fp, err
		}
		win = append(win, s)
		if len(win) > need {
			win = win[1:]
		}
		if len(win) == need {
			lo, hi := win[0], win[0]
			for _, w := range win {
				if w.rss < lo.rss {
					lo = w
				}
				if w.rss > hi.rss {
					hi = w
				}
			}
			timedOut := time.Since(start) > b.o.steadyLimit
			if float64(hi.rss-lo.rss) <= 0.02*float64(hi.rss) || timedOut {
				fp.Steady = !timedOut
				fp.RSSMiB, fp.AnonMiB, fp.FileMiB, fp.HWMMiB, fp.Threads = mib(hi.rss), mib(hi.anon), mib(hi.file), mib(hi.hwm), hi.threads
				break
			}
		}
		if err := benchkit.Sleep(ctx, every); err != nil {
			return fp, err
		}
	}
	fp.WaitedS = time.Since(start).Seconds()

	first, err := readProc(pid)
	if err != nil {
		return fp, err
	}
	self0, t0 := processCPU(), time.Now()
	maxRSS := first.rss
	for time.Since(t0) < b.o.window {
		if err := benchkit.Sleep(ctx, every); err != nil {
			return fp, err
		}
		if err := b.agent.alive(); err != nil {
			return fp, err
		}
		s, err := readProc(pid)
		if err != nil {
			return fp, err
		}
		maxRSS = max(maxRSS, s.rss)
	}
	last, err := readProc(pid)
	if err != nil {
		return fp, err
	}
	elapsed := time.Since(t0).Seconds()
	fp.WindowS = elapsed
	fp.CPUSeconds = float64(last.cpuTicks-first.cpuTicks) / userHZ
	fp.CPUPercent = 100 * fp.CPUSeconds / elapsed
	fp.WindowMax = mib(max(maxRSS, last.rss))
	fp.ServerCPU = (processCPU() - self0).Seconds()
	if goal > 0 {
		met := fp.RSSMiB <= goal && fp.WindowMax <= goal
		fp.Met = &met
	}
	fmt.Fprintf(b.out, "  %s: RSS %.1f MiB (anon %.1f, file %.1f), CPU %.2fs over %.0fs\n",
		phase, fp.RSSMiB, fp.AnonMiB, fp.FileMiB, fp.CPUSeconds, elapsed)
	return fp, nil
}

// processCPU is the user and system CPU time of this process so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
