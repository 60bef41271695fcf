// Package provision declares how the control plane gets managed instances:
// a Provisioner launches an instance running `capstan agent` with the
// credential and settings it is given, and terminates it. Implementations:
// local (agent processes on this machine), sim (hollow agents, for scale
// tests) and ec2 (EC2 instances, docs/ec2.md).
package provision

import (
	"context"
	"errors"
)

// ErrUnknown means the provisioner does not know the instance (it is gone).
var ErrUnknown = errors.New("provision: unknown instance")

// Request is one instance to launch.
type Request struct {
	// ID names the instance for the provisioner (stable across retries).
	ID               string
	Cluster          string
	CapacityProvider string
	// CPU (units, 1024 per vCPU) and MemoryMiB size the instance.
	CPU       int
	MemoryMiB int
	// Env is the agent's environment: endpoint, cluster, credential and
	// instance-specific settings (daemon address, ports, data dir).
	Env map[string]string
	// Settings are the operator's ECS_* agent settings (capstan server
	// --agent-env), already checked by the agent's parser and also in Env.
	// A provisioner that boots a machine writes them where its agent reads
	// its configuration (the env file), as ECS takes them from user data.
	Settings map[string]string
}

// Provisioner launches and terminates instances. Launch returns once the
// instance is starting; its agent registers by itself.
type Provisioner interface {
	Name() string
	Launch(ctx context.Context, req Request) (handle string, err error)
	// Terminate stops the instance and removes what ran on it.
	Terminate(ctx context.Context, handle string) error
	// Alive reports whether the instance is still running.
	Alive(ctx context.Context, handle string) (bool, error)
}

// BatchLauncher is a Provisioner that launches many instances in one call,
// as a cloud's run-instances call takes a count: a rollout that asks for
// hundreds of replacements at once then makes a few calls, inside the
// API's rate limits, instead of hundreds that queue.
type BatchLauncher interface {
	Provisioner
	// LaunchBatch launches the instances and returns, in the order of
	// reqs, each one's handle or why it did not launch: one may fail and
	// the others start.
	LaunchBatch(ctx context.Context, reqs []Request) []Launched
}

// Launched is the outcome of one request of a batch.
type Launched struct {
	Handle string
	Err    error
}

// LaunchEach launches reqs one Launch call at a time, as a batch: for
// provisioners whose API takes one instance a call.
func LaunchEach(ctx context.Context, p Provisioner, reqs []Request) []Launched {
	out := make([]Launched, len(reqs))
	for i, req := range reqs {
		out[i].Handle, out[i].Err = p.Launch(ctx, req)
	}
	return out
}

// LaunchAll launches reqs in one LaunchBatch call where p takes batches,
// else one at a time.
func LaunchAll(ctx context.Context, p Provisioner, reqs []Request) []Launched {
	if bl, ok := p.(BatchLauncher); ok && len(reqs) > 0 {
		return bl.LaunchBatch(ctx, reqs)
	}
	return LaunchEach(ctx, p, reqs)
}
