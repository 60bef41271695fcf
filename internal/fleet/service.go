// Package fleet is the domain both edges of the control plane work on: the
// fleet's state in the store and an in-memory view of it (clusters,
// instances with their free resources, the tasks and daemons on them), and
// every decision more than one caller makes: where a task goes (placement),
// starting and stopping tasks, daemon placements, managed-instance
// records, applying agent reports, events and expiry. The ECS operations
// (internal/ops), the controllers and the agent gateway call it; it calls
// none of them.
package fleet

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/capstanhq/capstan/internal/fault"
	"github.com/capstanhq/capstan/internal/store"
)

// Config wires a Service.
type Config struct {
	Store     *store.Store
	Region    string
	AccountID string
	Now       func() time.Time
	Log       *slog.Logger
	// Endpoint is the URL agents use to reach this server.
	Endpoint string
	// EventRetention is how long events are kept (default an hour).
	EventRetention time.Duration
	// EventLimit is the most events a cluster keeps (default
	// DefaultEventLimit).
	EventLimit int
	// AlarmSource says whether deployments can watch alarms: without one,
	// a daemon asking for alarms is refused rather than rolled out unwatched.
	AlarmSource bool
	// ProgressDeadline is reported with rollouts (0: none).
	ProgressDeadline time.Duration
}

// Service holds the operations.
type State struct {
	Store *store.Store
	ARNs  ARNs
	Now   func() time.Time
	Log   *slog.Logger
	IDs   *idSource
	// endpoint is what DiscoverPollEndpoint answers.
	endpoint string
	events   *Emitter
	model    *model
	// placing serializes this process's placements per cluster (a
	// *sync.Mutex by cluster name): two services placing at once picked
	// the same instances and one of them redid its whole chunk.
	placing sync.Map
	// healthChecks remembers whether a daemon revision's task definition
	// has a health check, by revision ARN: both are immutable, and the
	// daemons controller asks on every pass over every instance.
	healthChecks sync.Map
	// waitingMemo keeps the waiting tasks Waiting decoded, and
	// managedMemo the managed instance records: the instances and
	// deployments controllers read thousands of each per pass.
	waitingMemo store.Memo[store.Task]
	managedMemo store.Memo[ManagedInstance]

	AlarmSource      bool
	ProgressDeadline time.Duration

	// expiryTicks, when set (tests), stands in for RunExpiry's ticker of
	// the given interval: its looks are counted tick by tick.
	expiryTicks func(every time.Duration) (<-chan time.Time, func())
}

// New returns a Service.
func New(cfg Config) *State {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	s := &State{
		Store:    cfg.Store,
		ARNs:     ARNs{Partition: "aws", region: cfg.Region, Account: cfg.AccountID},
		Now:      func() time.Time { return cfg.Now().UTC().Truncate(time.Millisecond) }, // API timestamps have millisecond precision
		Log:      cfg.Log,
		IDs:      newIDSource(cfg.Now),
		endpoint: cfg.Endpoint,

		AlarmSource:      cfg.AlarmSource,
		ProgressDeadline: cfg.ProgressDeadline,
	}
	s.events = newEmitter(s.Store, s.Log, s.Now, s.ARNs, cfg.EventRetention, cfg.EventLimit)
	s.model = newModel()
	s.model.attach(s.Store)
	return s
}

// storeErr classifies store failures that reach an operation: a conflict
// that survived retries means heavy contention, anything else is internal.
func StoreErr(err error) error {
	if err == nil || fault.As(err) != nil {
		return err
	}
	if errors.Is(err, store.ErrConflict) {
		return &fault.Error{Kind: fault.Throttled, Message: "too many concurrent changes to the same resource; retry", Err: err}
	}
	return fmt.Errorf("state: %w", err)
}

// retry runs fn with optimistic concurrency and classifies the outcome.
func Retry(ctx context.Context, fn func() error) error {
	return StoreErr(store.Retry(ctx, fn))
}
