package main

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"
)

// AgentInfo is how the agent was run.
type AgentInfo struct {
	Binary      string   `json:"binary"`
	BinaryBytes int64    `json:"binaryBytes"`
	BuildSecs   float64  `json:"buildSeconds,omitempty"`
	ExtraEnv    []string `json:"extraEnv,omitempty"`
	StartSecs   float64  `json:"startToConnectedSeconds"`
}

// Report is the JSON output.
type Report struct {
	Started    time.Time   `json:"started"`
	Machine    Machine     `json:"machine"`
	Cluster    string      `json:"cluster"`
	Image      string      `json:"image"`
	RawShares  int64       `json:"rawCpuShares"`
	Command    []string    `json:"command"`
	MemoryMiB  int         `json:"containerMemoryMiB"`
	Agent      AgentInfo   `json:"agent"`
	Footprints []Footprint `json:"footprints"`
	Latency    *Latency    `json:"latency,omitempty"`
	Notes      []string    `json:"notes"`
}

func notes(rep *Report) []string {
	n := []string{
		"The server runs in this process, so its CPU use competes with the agent and the engine on the same machine; the agent is a separate process whose /proc figures are its own.",
		"RSS counts file-backed pages of the agent's binary (column file) as well as its own memory (anon).",
	}
	if rep.Latency != nil {
		n = append(n,
			"The Capstan path includes the API call, placement, the etcd write, the push over the agent's session, the agent persisting and acknowledging, image inspection (prefer-cached), create and start on the engine, the agent's state report (batched), its etcd write, and the client's next DescribeTasks poll; the docker path is only the two engine calls.",
			fmt.Sprintf("Raw containers get the agent's resource settings for this task (memory %d MiB, CPU shares %d).", taskMemoryMiB, rep.RawShares),
			"Percentiles are nearest-rank; with n samples, p90 and max rest on few observations. Stage medians are taken separately and need not add up to the total's median.")
	}
	if rep.Machine.Containers > 0 {
		n = append(n, fmt.Sprintf("The engine held %d other containers when the run started; other work on the engine adds noise to both paths alike.", rep.Machine.Containers))
	}
	return n
}

func printTable(w io.Writer, rep *Report) {
	m := rep.Machine
	fmt.Fprintf(w, "%s/%s, NumCPU=%d, %s, %s, %d MiB; Docker %s (API %s, %s, cgroup %s/%s); load average %s → %s\n",
		m.GOOS, m.GOARCH, m.NumCPU, m.GoVersion, m.CPUModel, m.MemTotalMiB, m.DockerVersion, m.DockerAPI,
		m.StorageDriver, m.CgroupDriver, m.CgroupVersion, m.LoadAvgStart, m.LoadAvgEnd)
	fmt.Fprintf(w, "agent: %s (%.1f MiB binary), connected %.2fs after exec", rep.Agent.Binary, float64(rep.Agent.BinaryBytes)/(1<<20), rep.Agent.StartSecs)
	if len(rep.Agent.ExtraEnv) > 0 {
		fmt.Fprintf(w, ", extra env %s", strings.Join(rep.Agent.ExtraEnv, " "))
	}
	fmt.Fprintln(w)

	if l := rep.Latency; l != nil {
		fmt.Fprintf(w, "\nstart latency, %s %q, %d MiB; %d samples per path (+%d warm-up), interleaved; DescribeTasks polled every %.0f ms\n\n",
			rep.Image, strings.Join(rep.Command, " "), rep.MemoryMiB, l.Samples, l.Warmup, l.PollMs)
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "path\tstage\tp50 ms\tp90 ms\tmax ms\tmin ms\t")
		row := func(path, stage string, d Dist) {
			fmt.Fprintf(tw, "%s\t%s\t%.1f\t%.1f\t%.1f\t%.1f\t\n", path, stage, d.P50, d.P90, d.Max, d.Min)
		}
		row("capstan RunTask→RUNNING", "total", l.Capstan)
		row("", "RunTask call", l.CapstanStages["RunTask call"])
		row("", stageDispatch, l.CapstanStages[stageDispatch])
		row("", stageEngine, l.CapstanStages[stageEngine])
		row("", stageReport, l.CapstanStages[stageReport])
		row("docker create+start", "total", l.Docker)
		row("", "create call", l.DockerStages["create call"])
		row("", "start call", l.DockerStages["start call"])
		row("", stageDispatch, l.DockerStages[stageDispatch])
		row("", stageEngine, l.DockerStages[stageEngine])
		row("", "started → returned", l.DockerStages[stageReport])
		if l.DockerNet != nil {
			row("docker, instance network", "total", *l.DockerNet)
			row("", "create call", l.NetStages["create call"])
			row("", "start call", l.NetStages["start call"])
			row("", stageEngine, l.NetStages[stageEngine])
		}
		row("DescribeTasks call", "", l.DescribeCall)
		tw.Flush()
		fmt.Fprintf(w, "\nratio of medians %.2f (goal ≤ %.1f): %s; p50 overhead %+.1f ms; %d new client connections while measuring\n",
			l.Ratio, l.Goal, verdict(l.Met), l.OverheadP50, l.NewConns)
		fmt.Fprintf(w, "paired by round, median of capstan less docker: %+.1f ms\n", l.PairedP50)
		fmt.Fprintf(w, "the agent ran the task on network %q\n", l.CapstanNetwork)
		if l.DockerNet != nil {
			fmt.Fprintf(w, "against docker on the instance network %s (where bridge-mode tasks go with CAPSTAN_TASK_BRIDGE=instance): ratio %.2f, p50 overhead %+.1f ms\n",
				l.Network, l.RatioNet, l.OverheadNetP50)
		}
		fmt.Fprintln(w, "(sent/created/started are the engine's own timestamps of the container)")
	}

	fmt.Fprintln(w, "\nagent process")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "phase\tRSS MiB\tanon\tfile\tHWM\tthreads\twindow s\tCPU s\tCPU %\tRSS max\tserver CPU s\tgoal\t")
	for _, f := range rep.Footprints {
		goal := ""
		if f.Met != nil {
			goal = fmt.Sprintf("≤ %.0f MiB %s", f.Goal, verdict(*f.Met))
		}
		steady := ""
		if !f.Steady && f.WindowS > 0 {
			steady = " (not steady)"
		}
		if f.WindowS > 0 {
			fmt.Fprintf(tw, "%s%s\t%.1f\t%.1f\t%.1f\t%.1f\t%d\t%.0f\t%.2f\t%.2f\t%.1f\t%.2f\t%s\t\n",
				f.Phase, steady, f.RSSMiB, f.AnonMiB, f.FileMiB, f.HWMMiB, f.Threads, f.WindowS, f.CPUSeconds, f.CPUPercent, f.WindowMax, f.ServerCPU, goal)
		} else {
			fmt.Fprintf(tw, "%s\t%.1f\t%.1f\t%.1f\t%.1f\t%d\t\t\t\t\t\t%s\t\n",
				f.Phase, f.RSSMiB, f.AnonMiB, f.FileMiB, f.HWMMiB, f.Threads, goal)
		}
	}
	tw.Flush()
	fmt.Fprintln(w)
	for _, n := range rep.Notes {
		fmt.Fprintln(w, "note:", n)
	}
}

func verdict(met bool) string {
	if met {
		return "MET"
	}
	return "NOT MET"
}
