package main

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ecs"
	"github.com/aws/aws-sdk-go-v2/service/ecs/types"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"

	"github.com/capstanhq/capstan/bench/internal/benchkit"
	"github.com/capstanhq/capstan/internal/agent/daemonnet"
)

// Dist summarises samples in milliseconds.
type Dist struct {
	N    int     `json:"n"`
	Min  float64 `json:"minMs"`
	P50  float64 `json:"p50Ms"`
	P90  float64 `json:"p90Ms"`
	Max  float64 `json:"maxMs"`
	Mean float64 `json:"meanMs"`
}

// Sample is one measured start on either path. Times are milliseconds
// from the moment the first request was sent; the engine's own Created and
// StartedAt timestamps place the container inside that interval.
type Sample struct {
	Index int     `json:"index"`
	Path  string  `json:"path"` // "capstan" or "docker"
	First bool    `json:"ranFirst"`
	Total float64 `json:"totalMs"`
	// Capstan: the RunTask call; docker: the ContainerCreate call.
	Call float64 `json:"callMs"`
	// Docker only: the ContainerStart call.
	StartCall float64 `json:"startCallMs,omitempty"`
	// Created and Started are the engine's timestamps of the container.
	Created float64 `json:"engineCreatedMs"`
	Started float64 `json:"engineStartedMs"`
	// Network is the container's network mode as the engine has it.
	Network string `json:"network,omitempty"`
	// Polls is how many DescribeTasks calls the capstan sample made.
	Polls int `json:"polls,omitempty"`
}

// Latency is the start-latency comparison.
type Latency struct {
	Samples int     `json:"samplesPerPath"`
	Warmup  int     `json:"warmupPerPath"`
	PollMs  float64 `json:"pollIntervalMs"`
	Capstan Dist    `json:"capstan"`
	Docker  Dist    `json:"docker"`
	// CapstanNetwork is where the agent ran the bridge-mode task: "bridge"
	// (Docker's default bridge, the agent keeping firewall rules to the
	// daemon address) or the instance network.
	CapstanNetwork string `json:"capstanNetwork"`
	// DockerNet is the raw path on the agent's instance network, where
	// bridge-mode tasks go when the agent cannot keep those rules (or
	// CAPSTAN_TASK_BRIDGE=instance): what Docker itself charges for that
	// network. Empty when the instance has no network.
	Network        string  `json:"instanceNetwork,omitempty"`
	DockerNet      *Dist   `json:"dockerOnInstanceNetwork,omitempty"`
	RatioNet       float64 `json:"ratioOfMediansToInstanceNetwork,omitempty"`
	OverheadNetP50 float64 `json:"overheadP50ToInstanceNetworkMs,omitempty"`
	// Ratio is Capstan p50 over docker p50; OverheadP50 their difference.
	Ratio       float64 `json:"ratioOfMedians"`
	OverheadP50 float64 `json:"overheadP50Ms"`
	// PairedP50 is the median over rounds of Capstan's total less the raw
	// default-bridge total of the same round: the host's drift over the
	// run, which moves both, cancels out.
	PairedP50 float64 `json:"pairedOverheadP50Ms"`
	Goal      float64 `json:"goalRatio"`
	Met       bool    `json:"met"`
	// Stages split the Capstan path at the engine's timestamps:
	// dispatch (request sent → container created: API, placement, etcd
	// write, session push, agent persist and create call), engine (created
	// → started, inside dockerd) and report (started → RUNNING seen: agent
	// notices, reports, server writes, the client's next poll). The same
	// split of the docker path shows what the engine alone takes.
	CapstanStages map[string]Dist `json:"capstanStages"`
	DockerStages  map[string]Dist `json:"dockerStages"`
	NetStages     map[string]Dist `json:"dockerOnInstanceNetworkStages,omitempty"`
	DescribeCall  Dist            `json:"describeTasksCall"`
	NewConns      int64           `json:"newClientConnections"`
	Runs          []Sample        `json:"runs"`
}

func (b *bench) latency(ctx context.Context) (*Latency, error) {
	lat := &Latency{Samples: b.o.n, Warmup: b.o.warmup, PollMs: benchkit.Ms(b.o.poll), Goal: goalRatio}
	var capstan, raw, onNet []Sample
	var describe []time.Duration
	total := b.o.warmup + b.o.n
	// The third path is the raw create and start on the instance network.
	nets, err := b.rt.Networks(ctx, map[string]string{daemonnet.LabelRole: daemonnet.RoleNetwork, labelCluster: b.cluster})
	if err != nil {
		return nil, fmt.Errorf("the instance network: %w", err)
	}
	if len(nets) == 1 {
		lat.Network = nets[0].Name
	}
	paths := []string{"capstan", "docker"}
	if lat.Network != "" {
		paths = append(paths, "docker-net")
	}
	fmt.Fprintf(b.out, "latency: %d warm-up + %d measured rounds of %d paths, rotating which goes first\n", b.o.warmup, b.o.n, len(paths))
	dials0 := dials.Load()
	for i := range total {
		measured := i >= b.o.warmup
		if i == b.o.warmup {
			dials0 = dials.Load()
		}
		var cs, rs, ns Sample
		var calls []time.Duration
		for k := range paths {
			var err error
			switch p := paths[(i+k)%len(paths)]; p {
			case "capstan":
				cs, calls, err = b.capstanSample(ctx)
				cs.First = k == 0
			case "docker":
				rs, err = b.rawSample(ctx, "")
				rs.First = k == 0
			default:
				ns, err = b.rawSample(ctx, lat.Network)
				ns.First, ns.Path = k == 0, p
			}
			if err != nil {
				return nil, err
			}
			if err := benchkit.Sleep(ctx, b.o.gap); err != nil {
				return nil, err
			}
		}
		tag := "warm-up"
		if measured {
			tag = fmt.Sprintf("%d/%d", i-b.o.warmup+1, b.o.n)
			cs.Index, rs.Index, ns.Index = i-b.o.warmup, i-b.o.warmup, i-b.o.warmup
			capstan, raw = append(capstan, cs), append(raw, rs)
			if lat.Network != "" {
				onNet = append(onNet, ns)
			}
			describe = append(describe, calls...)
		}
		line := fmt.Sprintf("  %-7s capstan %7.1f ms (%d polls)   docker %6.1f ms", tag, cs.Total, cs.Polls, rs.Total)
		if lat.Network != "" {
			line += fmt.Sprintf("   docker on %s %6.1f ms", lat.Network, ns.Total)
		}
		fmt.Fprintln(b.out, line)
	}
	lat.NewConns = dials.Load() - dials0
	lat.Runs = append(append(capstan, raw...), onNet...)
	lat.Capstan = dist(totals(capstan, func(s Sample) float64 { return s.Total }))
	lat.Docker = dist(totals(raw, func(s Sample) float64 { return s.Total }))
	if lat.Docker.P50 > 0 {
		lat.Ratio = lat.Capstan.P50 / lat.Docker.P50
	}
	lat.OverheadP50 = lat.Capstan.P50 - lat.Docker.P50
	lat.PairedP50 = pairedMedian(capstan, raw)
	lat.Met = lat.Ratio <= goalRatio
	if len(capstan) > 0 {
		lat.CapstanNetwork = capstan[0].Network
	}
	lat.CapstanStages = stages(capstan)
	lat.CapstanStages["RunTask call"] = dist(totals(capstan, func(s Sample) float64 { return s.Call }))
	lat.DockerStages = rawStages(raw)
	if len(onNet) > 0 {
		d := dist(totals(onNet, func(s Sample) float64 { return s.Total }))
		lat.DockerNet = &d
		if d.P50 > 0 {
			lat.RatioNet = lat.Capstan.P50 / d.P50
		}
		lat.OverheadNetP50 = lat.Capstan.P50 - d.P50
		lat.NetStages = rawStages(onNet)
	}
	d := make([]float64, len(describe))
	for i, x := range describe {
		d[i] = benchkit.Ms(x)
	}
	lat.DescribeCall = dist(d)
	return lat, nil
}

// pairedMedian is the median of a's totals less b's of the same round.
func pairedMedian(a, b []Sample) float64 {
	byRound := map[int]float64{}
	for _, s := range b {
		byRound[s.Index] = s.Total
	}
	var d []float64
	for _, s := range a {
		if t, ok := byRound[s.Index]; ok {
			d = append(d, s.Total-t)
		}
	}
	return dist(d).P50
}

// Stage names, in the order the table prints them.
const (
	stageDispatch = "sent → created"
	stageEngine   = "created → started"
	stageReport   = "started → seen"
)

// rawStages are a raw path's stages with its two engine calls.
func rawStages(ss []Sample) map[string]Dist {
	m := stages(ss)
	m["create call"] = dist(totals(ss, func(s Sample) float64 { return s.Call }))
	m["start call"] = dist(totals(ss, func(s Sample) float64 { return s.StartCall }))
	return m
}

func stages(ss []Sample) map[string]Dist {
	return map[string]Dist{
		stageDispatch: dist(totals(ss, func(s Sample) float64 { return s.Created })),
		stageEngine:   dist(totals(ss, func(s Sample) float64 { return s.Started - s.Created })),
		stageReport:   dist(totals(ss, func(s Sample) float64 { return s.Total - s.Started })),
	}
}

func totals(ss []Sample, f func(Sample) float64) []float64 {
	out := make([]float64, len(ss))
	for i, s := range ss {
		out[i] = f(s)
	}
	return out
}

// capstanSample runs one task through the API and times it until a
// DescribeTasks poll sees RUNNING; then stops it and removes its container.
func (b *bench) capstanSample(ctx context.Context) (Sample, []time.Duration, error) {
	s := Sample{Path: "capstan"}
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	t0 := time.Now()
	out, err := b.ecs.RunTask(ctx, &ecs.RunTaskInput{Cluster: aws.String(b.cluster), TaskDefinition: aws.String(b.td)})
	if err != nil {
		return s, nil, fmt.Errorf("RunTask: %w", err)
	}
	s.Call = benchkit.Ms(time.Since(t0))
	if len(out.Tasks) != 1 {
		return s, nil, fmt.Errorf("RunTask: no task, failures %+v", out.Failures)
	}
	arn := aws.ToString(out.Tasks[0].TaskArn)
	var calls []time.Duration
	var task types.Task
	for {
		c0 := time.Now()
		d, err := b.ecs.DescribeTasks(ctx, &ecs.DescribeTasksInput{Cluster: aws.String(b.cluster), Tasks: []string{arn}})
		now := time.Now()
		calls = append(calls, now.Sub(c0))
		s.Polls++
		if err != nil {
			return s, calls, fmt.Errorf("DescribeTasks: %w", err)
		}
		if len(d.Tasks) != 1 {
			return s, calls, fmt.Errorf("DescribeTasks %s: %+v", arn, d.Failures)
		}
		task = d.Tasks[0]
		if st := aws.ToString(task.LastStatus); st == "RUNNING" {
			s.Total = benchkit.Ms(now.Sub(t0))
			break
		} else if st == "STOPPED" {
			return s, calls, fmt.Errorf("task %s stopped before RUNNING: %s", arn, stopReason(task))
		}
		if err := b.agent.alive(); err != nil {
			return s, calls, err
		}
		if err := benchkit.Sleep(ctx, b.o.poll); err != nil {
			return s, calls, fmt.Errorf("task %s not RUNNING after %s: %w", arn, callTimeout, err)
		}
	}
	if len(task.Containers) == 1 {
		if id := aws.ToString(task.Containers[0].RuntimeId); id != "" {
			if err := b.engineTimes(ctx, id, t0, &s); err != nil {
				return s, calls, err
			}
		}
	}
	return s, calls, b.stopTasks(ctx, []string{arn})
}

// rawSample creates and starts the same container on the engine directly,
// on network ("": the engine's default bridge).
func (b *bench) rawSample(ctx context.Context, network string) (Sample, error) {
	s := Sample{Path: "docker"}
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	opts := client.ContainerCreateOptions{
		Config: &container.Config{
			Image:  b.image,
			Cmd:    command,
			Labels: map[string]string{labelCluster: b.cluster, labelRaw: "raw"},
		},
		// The resources the agent sets for this task definition, so the
		// engine does the same work on both paths.
		HostConfig: &container.HostConfig{Resources: container.Resources{Memory: taskMemoryMiB << 20, CPUShares: b.o.rawShares}},
	}
	if network != "" {
		opts.HostConfig.NetworkMode = container.NetworkMode(network)
	}
	t0 := time.Now()
	res, err := b.dc.ContainerCreate(ctx, opts)
	if err != nil {
		return s, fmt.Errorf("docker create: %w", err)
	}
	t1 := time.Now()
	_, err = b.dc.ContainerStart(ctx, res.ID, client.ContainerStartOptions{})
	t2 := time.Now()
	s.Call, s.StartCall, s.Total = benchkit.Ms(t1.Sub(t0)), benchkit.Ms(t2.Sub(t1)), benchkit.Ms(t2.Sub(t0))
	if err == nil {
		err = b.engineTimes(ctx, res.ID, t0, &s)
	}
	if _, rerr := b.dc.ContainerRemove(ctx, res.ID, client.ContainerRemoveOptions{Force: true}); rerr != nil && err == nil {
		err = fmt.Errorf("docker rm: %w", rerr)
	}
	if err != nil {
		return s, fmt.Errorf("raw sample: %w", err)
	}
	return s, nil
}

// engineTimes places the engine's Created and StartedAt timestamps of a
// container relative to t0 (the engine shares this machine's clock).
func (b *bench) engineTimes(ctx context.Context, id string, t0 time.Time, s *Sample) error {
	res, err := b.dc.ContainerInspect(ctx, id, client.ContainerInspectOptions{})
	if err != nil {
		return fmt.Errorf("inspect %s: %w", id, err)
	}
	created, err := time.Parse(time.RFC3339Nano, res.Container.Created)
	if err != nil {
		return fmt.Errorf("inspect %s: created: %w", id, err)
	}
	if res.Container.State == nil {
		return fmt.Errorf("inspect %s: no state", id)
	}
	started, err := time.Parse(time.RFC3339Nano, res.Container.State.StartedAt)
	if err != nil {
		return fmt.Errorf("inspect %s: startedAt: %w", id, err)
	}
	s.Created, s.Started = benchkit.Ms(created.Sub(t0)), benchkit.Ms(started.Sub(t0))
	if res.Container.HostConfig != nil {
		s.Network = string(res.Container.HostConfig.NetworkMode)
	}
	return nil
}

func dist(xs []float64) Dist {
	if len(xs) == 0 {
		return Dist{}
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	var sum float64
	for _, x := range s {
		sum += x
	}
	return Dist{N: len(s), Min: s[0], P50: benchkit.Pct(s, 0.5), P90: benchkit.Pct(s, 0.9), Max: s[len(s)-1], Mean: sum / float64(len(s))}
}
