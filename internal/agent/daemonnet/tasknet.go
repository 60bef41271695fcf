package daemonnet

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/capstanhq/capstan/internal/agent/engine"
	"github.com/capstanhq/capstan/internal/runtime"
)

// RoleTaskNamespace labels the holder of one awsvpc task's namespace.
const RoleTaskNamespace = "task-namespace"

var _ engine.TaskNetwork = (*Manager)(nil)

// TaskHolderName is the holder's container name for a task:
// capstan-<end of the task ID>-ns.
func TaskHolderName(taskArn string) string {
	_, holder := Names(taskArn) // the same sanitizing and length as instances'
	return strings.TrimSuffix(holder, "-daemons") + "-ns"
}

// Attach gives an awsvpc task its namespace: a holder like the daemons'
// (the pause image, nobody, no capabilities) on the instance network with
// an address Docker picks, and extraHosts in its hosts file, which the
// task's containers share. A running holder of the task is kept: Attach
// after an agent restart finds it.
func (m *Manager) Attach(ctx context.Context, taskArn string, extraHosts []string) (engine.TaskNet, error) {
	m.mu.Lock()
	s := m.setup
	m.mu.Unlock()
	if s.InstanceNetwork == "" {
		why := s.Degraded
		if why == "" {
			why = "daemon networking is not set up"
		}
		return engine.TaskNet{}, fmt.Errorf("this instance has no task network: %s", why)
	}
	cs, err := m.rt.List(ctx, m.taskSelector(taskArn))
	if err != nil {
		return engine.TaskNet{}, err
	}
	for _, c := range cs {
		if c.State == runtime.StateRunning && c.IPAddress != "" {
			return engine.TaskNet{Mode: "container:" + c.ID, Address: c.IPAddress}, nil
		}
	}
	// A holder that stopped has lost its namespace: make a new one.
	for _, c := range cs {
		if err := m.rt.Remove(ctx, c.ID); err != nil && !errors.Is(err, runtime.ErrNotFound) {
			return engine.TaskNet{}, err
		}
	}
	ref, err := m.pauseImage(ctx)
	if err != nil {
		return engine.TaskNet{}, err
	}
	labels := m.labels(RoleTaskNamespace)
	labels[engine.LabelNetworkOf] = taskArn
	spec := runtime.ContainerSpec{
		Name:           TaskHolderName(taskArn),
		Image:          ref,
		Labels:         labels,
		NetworkMode:    s.InstanceNetwork,
		ExtraHosts:     extraHosts,
		User:           "65534:65534",
		CapDrop:        []string{"ALL"},
		ReadonlyRootfs: true,
		CPUShares:      2,
		MemoryLimit:    64 << 20,
		StopTimeout:    2 * time.Second,
	}
	id, err := m.rt.Create(ctx, spec)
	if err != nil {
		return engine.TaskNet{}, fmt.Errorf("create the task's namespace holder: %w", err)
	}
	if err := m.rt.Start(ctx, id); err != nil {
		_ = m.rt.Remove(ctx, id)
		return engine.TaskNet{}, fmt.Errorf("start the task's namespace holder: %w", err)
	}
	c, err := m.rt.Inspect(ctx, id)
	if err == nil && (c.State != runtime.StateRunning || c.IPAddress == "") {
		err = fmt.Errorf("it is %s with address %q (exit code %d %s)", c.State, c.IPAddress, c.ExitCode, c.Error)
	}
	if err != nil {
		_ = m.rt.Remove(ctx, id)
		return engine.TaskNet{}, fmt.Errorf("start the task's namespace holder: %w", err)
	}
	m.log.Info("task networking: started a task's namespace holder", "task", taskArn, "address", c.IPAddress, "id", id)
	return engine.TaskNet{Mode: "container:" + id, Address: c.IPAddress}, nil
}

// Detach removes a task's holder.
func (m *Manager) Detach(ctx context.Context, taskArn string) error {
	cs, err := m.rt.List(ctx, m.taskSelector(taskArn))
	if err != nil {
		return err
	}
	var errs []error
	for _, c := range cs {
		if err := m.rt.Remove(ctx, c.ID); err != nil && !errors.Is(err, runtime.ErrNotFound) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func (m *Manager) taskSelector(taskArn string) map[string]string {
	return map[string]string{engine.LabelInstance: m.cfg.InstanceArn, LabelRole: RoleTaskNamespace, engine.LabelNetworkOf: taskArn}
}
