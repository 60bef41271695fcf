package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ecs"
	"github.com/aws/aws-sdk-go-v2/service/ecs/types"

	"github.com/capstanhq/capstan/bench/internal/benchkit"
	"github.com/capstanhq/capstan/internal/coverage"
)

// bench is the running fixture: a local fleet, and what the scenarios
// keep of it.
type bench struct {
	*benchkit.Fleet
	o options
	// histories are the clusters' records as read, for -events.
	histories []*coverage.History
}

// daemon registers a daemon task definition running Loop (32 MiB) and
// creates a daemon of it on one capacity provider. With sidecarStop > 0
// the task also has a non-essential container that ignores SIGTERM and is
// killed only after that many seconds.
func (b *bench) daemon(ctx context.Context, cluster, name, cpName, cpArn string, critical bool, sidecarStop int32) (coverage.Daemon, error) {
	cds := []types.DaemonContainerDefinition{{Name: aws.String(name), Image: aws.String(b.Image), Memory: aws.Int32(32), Command: benchkit.Loop}}
	if sidecarStop > 0 {
		cds = append(cds, types.DaemonContainerDefinition{Name: aws.String("sidecar"), Image: aws.String(b.Image), Memory: aws.Int32(16),
			Essential: aws.Bool(false), StopTimeout: aws.Int32(sidecarStop),
			Command: []string{"sh", "-c", "trap '' TERM; while true; do sleep 1; done"}})
	}
	td, err := b.C.RegisterDaemonTaskDefinition(ctx, &ecs.RegisterDaemonTaskDefinitionInput{Family: aws.String(name), ContainerDefinitions: cds})
	if err != nil {
		return coverage.Daemon{}, fmt.Errorf("register daemon task definition %s: %w", name, err)
	}
	created := time.Now()
	out, err := b.C.CreateDaemon(ctx, &ecs.CreateDaemonInput{DaemonName: aws.String(name), ClusterArn: aws.String(cluster),
		DaemonTaskDefinitionArn: td.DaemonTaskDefinitionArn, CapacityProviderArns: []string{cpArn}, Critical: aws.Bool(critical)})
	if err != nil {
		return coverage.Daemon{}, fmt.Errorf("create daemon %s: %w", name, err)
	}
	return coverage.Daemon{Name: name, Arn: aws.ToString(out.DaemonArn), Critical: critical, CPs: []string{cpName}, Created: created}, nil
}

// orphans are the capacity provider's instances that are not INACTIVE
// but belong to no managed instance the server knows: nothing will ever
// run their tasks or retire them.
func (b *bench) orphans(ctx context.Context, cluster, cp string) ([]string, error) {
	cis, err := b.Instances(ctx, cluster, cp)
	if err != nil {
		return nil, err
	}
	ms, err := b.Srv.Service.ManagedInstances(ctx, cluster, cp)
	if err != nil {
		return nil, err
	}
	known := map[string]bool{}
	for _, m := range ms {
		ci, ok, err := b.Srv.Service.InstanceOf(ctx, m.Value)
		if err != nil {
			return nil, err
		}
		if ok {
			known[ci.ContainerInstanceArn] = true
		}
	}
	var out []string
	for _, ci := range cis {
		if arn := aws.ToString(ci.ContainerInstanceArn); !known[arn] {
			out = append(out, fmt.Sprintf("%s (%s, agent connected %v, registered %s, %d pending tasks)", arn, aws.ToString(ci.Status), ci.AgentConnected,
				aws.ToTime(ci.RegisteredAt).Format("15:04:05.000"), ci.PendingTasksCount))
		}
	}
	return out, nil
}

// restartAgent restarts the agent of a managed instance in place: a shell
// that waits for the old agent to exit and then becomes `capstan agent`
// with the same environment and data directory is started first and
// recorded as the instance's process, then the old agent gets SIGTERM. The
// provisioner (which checks that the recorded process is alive and an
// agent) never sees the instance without a process, so the restart is an
// agent restart, not a lost instance. It returns the time from SIGTERM
// until the old agent had exited.
func (b *bench) restartAgent(ctx context.Context, cluster, cp, instanceArn string) (time.Duration, error) {
	ms, err := b.Srv.Service.ManagedInstances(ctx, cluster, cp)
	if err != nil {
		return 0, err
	}
	handle := ""
	for _, m := range ms {
		ci, ok, err := b.Srv.Service.InstanceOf(ctx, m.Value)
		if err != nil {
			return 0, err
		}
		if ok && ci.ContainerInstanceArn == instanceArn {
			handle = m.Value.Handle
		}
	}
	if handle == "" {
		return 0, fmt.Errorf("no managed instance for %s", instanceArn)
	}
	dir := filepath.Join(b.Cfg.DataDir, "instances", handle)
	raw, err := os.ReadFile(filepath.Join(dir, "pid"))
	if err != nil {
		return 0, err
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(raw)))
	if err != nil {
		return 0, err
	}
	environ, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
	if err != nil {
		return 0, fmt.Errorf("agent environment: %w", err)
	}
	logf, err := os.OpenFile(filepath.Join(dir, "agent.log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		return 0, err
	}
	defer logf.Close()
	cmd := exec.Command("/bin/sh", "-c", `while kill -0 "$1" 2>/dev/null; do sleep 0.02; done; exec "$0" agent`, b.Bin, strconv.Itoa(pid))
	cmd.Env = strings.Split(strings.TrimRight(string(environ), "\x00"), "\x00")
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return 0, fmt.Errorf("start agent: %w", err)
	}
	b.Restarted = append(b.Restarted, cmd)
	go cmd.Wait()
	tmp := filepath.Join(dir, "pid.new")
	if err := os.WriteFile(tmp, []byte(strconv.Itoa(cmd.Process.Pid)), 0o600); err != nil {
		return 0, err
	}
	if err := os.Rename(tmp, filepath.Join(dir, "pid")); err != nil {
		return 0, err
	}
	// A liveness check that read the old pid just before the swap must
	// have looked at /proc before the old agent exits, or it would take
	// the instance for lost.
	if err := benchkit.Sleep(ctx, 200*time.Millisecond); err != nil {
		return 0, err
	}
	t0 := time.Now()
	if err := syscall.Kill(pid, syscall.SIGTERM); err != nil {
		return 0, fmt.Errorf("stop agent %d: %w", pid, err)
	}
	err = b.Until(ctx, 30*time.Second, "old agent exited", func(context.Context) (bool, error) {
		_, err := os.Stat(fmt.Sprintf("/proc/%d", pid))
		return errors.Is(err, os.ErrNotExist), nil
	})
	return time.Since(t0), err
}
