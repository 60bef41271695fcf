package engine

// Runtime calls: each runs in a goroutine of its own and posts an opResult
// to the task's inbox; onResult (task_results.go) applies it.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/capstanhq/capstan/internal/runtime"
)

// Operation kinds; each runs in its own goroutine and reports back.
const (
	opPull    = "pull"
	opCreate  = "create"
	opStart   = "start"
	opStop    = "stop"
	opInspect = "inspect"
	opCleanup = "cleanup"
)

// Timeouts of runtime calls the engine has no setting for.
const (
	inspectTimeout = 30 * time.Second
	removeTimeout  = 2 * time.Minute
	stopGrace      = 2 * time.Minute // beyond the stop timeout, for a slow engine
	pullTimeout    = 2 * time.Hour
	retryMax       = 30 * time.Second
)

// removeTask removes a task's containers, including any the engine lost
// track of, and its scratch volumes.
func (e *Engine) removeTask(ctx context.Context, arn string, ids []string, dir string) error {
	rctx, cancel := context.WithTimeout(ctx, removeTimeout)
	defer cancel()
	listed, err := e.rt.List(rctx, map[string]string{LabelInstance: e.cfg.ContainerInstanceArn, LabelTaskArn: arn})
	if err != nil {
		return err
	}
	for _, c := range listed {
		if !slices.Contains(ids, c.ID) {
			ids = append(ids, c.ID)
		}
	}
	for _, id := range ids {
		if err := e.rt.Remove(rctx, id); err != nil && !errors.Is(err, runtime.ErrNotFound) {
			return err
		}
	}
	if dir != "" {
		if err := os.RemoveAll(dir); err != nil {
			return fmt.Errorf("remove task volumes: %w", err)
		}
	}
	return nil
}

// do runs an operation in its own goroutine and posts its result.
func (t *task) do(ctx context.Context, c *ctr, kind string, f func(ctx context.Context) opResult) {
	ctx, cancel := context.WithCancel(ctx)
	if c != nil {
		c.op, c.cancel = kind, cancel
	}
	t.ops.Go(func() {
		defer cancel()
		r := f(ctx)
		r.c, r.kind = c, kind
		t.post(r)
	})
}

func (t *task) pull(ctx context.Context, c *ctr) {
	image := c.def.Image
	t.do(ctx, c, opPull, func(ctx context.Context) opResult {
		ctx, cancel := context.WithTimeout(ctx, pullTimeout)
		defer cancel()
		img, err := t.e.cfg.Images.Ensure(ctx, image, nil)
		return opResult{img: img, err: err}
	})
}

func (t *task) create(ctx context.Context, i int) {
	c := t.cs[i]
	in := specInput{
		cfg:         &t.e.cfg,
		task:        &t.desired,
		def:         &t.def,
		index:       i,
		networkMode: t.netMode,
		volumes:     t.volumes,
		cpuShares:   t.shares[i],
	}
	if t.holder >= 0 && t.holder != i {
		in.holderID = t.cs[t.holder].id
	}
	if t.awsvpc() && t.tnet != nil {
		in.networkMode = t.tnet.Mode
	}
	if t.netMode == "bridge" {
		for _, l := range c.def.Links {
			name, alias, _ := strings.Cut(l, ":")
			if dc := t.container(name); dc != nil && dc.ip != "" {
				in.linkHosts = append(in.linkHosts, name+":"+dc.ip)
				if alias != "" && alias != name {
					in.linkHosts = append(in.linkHosts, alias+":"+dc.ip)
				}
			}
		}
	}
	spec := buildSpec(in)
	var dirs []string
	if vd := t.e.cfg.VolumeDir; vd != "" {
		for _, m := range spec.Mounts {
			if strings.HasPrefix(m.Source, vd+"/") {
				dirs = append(dirs, m.Source)
			}
		}
	}
	e := t.e
	t.do(ctx, c, opCreate, func(ctx context.Context) opResult {
		for _, d := range dirs {
			// Open to any container user, as a Docker volume would be.
			if err := os.MkdirAll(d, 0o777); err != nil {
				return opResult{err: fmt.Errorf("volume directory: %w", err)}
			}
			if err := os.Chmod(d, 0o777); err != nil {
				return opResult{err: fmt.Errorf("volume directory: %w", err)}
			}
		}
		ctx, cancel := context.WithTimeout(ctx, e.cfg.StartTimeout)
		defer cancel()
		id, err := e.rt.Create(ctx, spec)
		if err == nil {
			return opResult{id: id}
		}
		// Created before a crash or a timeout? Find it by its labels,
		// never by name alone, and adopt it rather than make another.
		found, lerr := e.rt.List(ctx, map[string]string{
			LabelInstance:      e.cfg.ContainerInstanceArn,
			LabelTaskArn:       spec.Labels[LabelTaskArn],
			LabelContainerName: spec.Labels[LabelContainerName],
		})
		if lerr == nil && len(found) > 0 {
			return opResult{id: found[0].ID}
		}
		return opResult{err: err}
	})
}

func (t *task) start(ctx context.Context, c *ctr) {
	id, e := c.id, t.e
	t.do(ctx, c, opStart, func(ctx context.Context) opResult {
		sctx, cancel := context.WithTimeout(ctx, e.cfg.StartTimeout)
		err := e.rt.Start(sctx, id)
		cancel()
		ictx, cancel := context.WithTimeout(ctx, inspectTimeout)
		defer cancel()
		rc, ierr := e.rt.Inspect(ictx, id)
		var output string
		if ierr == nil && failed(rc) { // already over: a fast crash
			output = lastOutput(ictx, e.rt, id)
		}
		return opResult{err: err, rc: rc, inspected: ierr == nil, ierr: ierr, output: output}
	})
}

func (t *task) stopContainer(ctx context.Context, c *ctr) {
	id, e := c.id, t.e
	timeout := e.cfg.StopTimeout
	if c.def != nil {
		timeout = stopTimeout(c.def, timeout)
	}
	t.do(ctx, c, opStop, func(ctx context.Context) opResult {
		sctx, cancel := context.WithTimeout(ctx, timeout+stopGrace)
		err := e.rt.Stop(sctx, id, timeout)
		cancel()
		ictx, cancel := context.WithTimeout(ctx, inspectTimeout)
		defer cancel()
		rc, ierr := e.rt.Inspect(ictx, id)
		return opResult{err: err, rc: rc, inspected: ierr == nil, ierr: ierr}
	})
}

func (t *task) inspect(ctx context.Context, c *ctr) {
	id, e := c.id, t.e
	t.do(ctx, c, opInspect, func(ctx context.Context) opResult {
		ctx, cancel := context.WithTimeout(ctx, inspectTimeout)
		defer cancel()
		rc, err := e.rt.Inspect(ctx, id)
		var output string
		if err == nil && failed(rc) {
			output = lastOutput(ctx, e.rt, id)
		}
		return opResult{rc: rc, err: err, output: output}
	})
}

// failed reports a container that exited non-zero with no reason known
// from the runtime (out of memory, a start error). Its last output is
// wanted only when the engine did not stop it, which exited decides.
func failed(rc runtime.Container) bool {
	return (rc.State == runtime.StateExited || rc.State == runtime.StateDead) && rc.ExitCode != 0 && !rc.OOMKilled && rc.Error == ""
}

// lastOutput is the last lines a container wrote, joined; "" when its log
// cannot be read (a log driver without reads, say). Several lines, since
// stdout and stderr are not ordered against each other in the log.
func lastOutput(ctx context.Context, rt runtime.Runtime, id string) string {
	r, err := rt.Logs(ctx, id, 3)
	if err != nil {
		return ""
	}
	defer r.Close()
	b, _ := io.ReadAll(io.LimitReader(r, 64<<10))
	var lines []string
	for _, l := range strings.Split(string(b), "\n") {
		if l = strings.TrimSpace(l); l != "" {
			lines = append(lines, l)
		}
	}
	out := strings.ToValidUTF8(strings.Join(lines, " | "), "?")
	if len(out) > 200 {
		// The end says most about why it exited.
		out = "..." + strings.ToValidUTF8(out[len(out)-200:], "")
	}
	return out
}
