package docker

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/moby/moby/api/pkg/stdcopy"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"

	"github.com/capstanhq/capstan/internal/runtime"
)

// MaxExecOutput caps what Exec keeps of a command's output; the rest is
// read and dropped so a chatty command cannot exhaust the agent's memory.
const MaxExecOutput = 1 << 20

// Exec runs cmd in a running container and returns its exit code and its
// stdout and stderr interleaved (the first MaxExecOutput bytes).
func (r *Runtime) Exec(ctx context.Context, id string, cmd []string) (int, []byte, error) {
	ex, err := r.c.ExecCreate(ctx, id, client.ExecCreateOptions{Cmd: cmd, AttachStdout: true, AttachStderr: true})
	if err != nil {
		return 0, nil, wrap(err, "exec in container %s", id)
	}
	att, err := r.c.ExecAttach(ctx, ex.ID, client.ExecAttachOptions{})
	if err != nil {
		return 0, nil, wrap(err, "exec in container %s", id)
	}
	stop := context.AfterFunc(ctx, att.Close) // unblock the read on cancel
	out := &capped{max: MaxExecOutput}
	_, err = stdcopy.StdCopy(out, out, att.Reader)
	stop()
	att.Close()
	if ctx.Err() != nil {
		return 0, nil, fmt.Errorf("exec in container %s: %w", id, ctx.Err())
	}
	if err != nil {
		return 0, nil, fmt.Errorf("exec in container %s: read output: %w", id, err)
	}
	// The stream can end a moment before the engine records the exit.
	for wait := time.Millisecond; ; wait = min(2*wait, 100*time.Millisecond) {
		in, err := r.c.ExecInspect(ctx, ex.ID, client.ExecInspectOptions{})
		if err != nil {
			return 0, nil, wrap(err, "exec in container %s", id)
		}
		if !in.Running {
			return in.ExitCode, out.buf.Bytes(), nil
		}
		select {
		case <-time.After(wait):
		case <-ctx.Done():
			return 0, nil, fmt.Errorf("exec in container %s: %w", id, ctx.Err())
		}
	}
}

// capped keeps the first max bytes written and discards the rest.
type capped struct {
	buf bytes.Buffer
	max int
}

func (c *capped) Write(p []byte) (int, error) {
	if room := c.max - c.buf.Len(); room > 0 {
		c.buf.Write(p[:min(room, len(p))])
	}
	return len(p), nil
}

// Logs returns the container's stdout and stderr as one stream, the last
// tail lines only if tail > 0. The caller closes it.
func (r *Runtime) Logs(ctx context.Context, id string, tail int) (io.ReadCloser, error) {
	// A TTY container's log is raw; any other is framed per stream.
	in, err := r.c.ContainerInspect(ctx, id, client.ContainerInspectOptions{})
	if err != nil {
		return nil, wrap(err, "logs of container %s", id)
	}
	opts := client.ContainerLogsOptions{ShowStdout: true, ShowStderr: true}
	if tail > 0 {
		opts.Tail = strconv.Itoa(tail)
	}
	body, err := r.c.ContainerLogs(ctx, id, opts)
	if err != nil {
		return nil, wrap(err, "logs of container %s", id)
	}
	if in.Container.Config != nil && in.Container.Config.Tty {
		return body, nil
	}
	pr, pw := io.Pipe()
	go func() {
		// Ends when body does: at EOF, or when Close closes it.
		_, err := stdcopy.StdCopy(pw, pw, body)
		pw.CloseWithError(err)
	}()
	return &demuxed{PipeReader: pr, body: body}, nil
}

type demuxed struct {
	*io.PipeReader
	body io.Closer
}

func (d *demuxed) Close() error {
	err := d.body.Close()
	d.PipeReader.Close()
	return err
}

// maxStatsBody bounds the one stats document read.
const maxStatsBody = 4 << 20

// Stats takes one sample of the container's resource usage without the
// engine's one-second wait for a previous sample; cumulative counters let
// callers compute rates from two samples.
func (r *Runtime) Stats(ctx context.Context, id string) (runtime.Stats, error) {
	res, err := r.c.ContainerStats(ctx, id, client.ContainerStatsOptions{})
	if err != nil {
		return runtime.Stats{}, wrap(err, "stats of container %s", id)
	}
	defer res.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(res.Body, maxStatsBody))
	if err != nil {
		return runtime.Stats{}, fmt.Errorf("stats of container %s: %w", id, err)
	}
	var s container.StatsResponse
	if err := json.Unmarshal(raw, &s); err != nil {
		return runtime.Stats{}, fmt.Errorf("stats of container %s: decode: %w", id, err)
	}
	out := fromStats(s)
	out.Raw = raw
	return out, nil
}

func fromStats(s container.StatsResponse) runtime.Stats {
	out := runtime.Stats{
		Time:             s.Read,
		CPUTotalNanos:    s.CPUStats.CPUUsage.TotalUsage,
		SystemCPUNanos:   s.CPUStats.SystemUsage,
		OnlineCPUs:       int(s.CPUStats.OnlineCPUs),
		MemoryUsageBytes: memoryUsage(s.MemoryStats),
		MemoryLimitBytes: s.MemoryStats.Limit,
		Pids:             s.PidsStats.Current,
	}
	if out.OnlineCPUs == 0 {
		out.OnlineCPUs = len(s.CPUStats.CPUUsage.PercpuUsage)
	}
	for _, n := range s.Networks {
		out.NetworkRxBytes += n.RxBytes
		out.NetworkTxBytes += n.TxBytes
	}
	for _, e := range s.BlkioStats.IoServiceBytesRecursive {
		switch strings.ToLower(e.Op) {
		case "read":
			out.BlockReadBytes += e.Value
		case "write":
			out.BlockWriteBytes += e.Value
		}
	}
	return out
}

// memoryUsage leaves out reclaimable page cache, as docker stats does, so
// a container that reads files does not look close to its limit.
func memoryUsage(m container.MemoryStats) uint64 {
	if v, ok := m.Stats["total_inactive_file"]; ok && v < m.Usage { // cgroup v1
		return m.Usage - v
	}
	if v, ok := m.Stats["inactive_file"]; ok && v < m.Usage { // cgroup v2
		return m.Usage - v
	}
	return m.Usage
}
