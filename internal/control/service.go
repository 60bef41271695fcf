// Package control implements the ECS API operations: it validates requests,
// reads and writes objects through the store, and returns ECS-shaped
// results. Long-running work (rollouts, placement) belongs to controllers,
// which pick up what these operations record.
package control

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/capstanhq/capstan/internal/api"
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
type Service struct {
	st   *store.Store
	arns arns
	now  func() time.Time
	log  *slog.Logger
	ids  *idSource
	// endpoint is what DiscoverPollEndpoint answers.
	endpoint string
	events   *Emitter
	fleet    *fleet
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

	alarmSource      bool
	progressDeadline time.Duration
}

// New returns a Service.
func New(cfg Config) *Service {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	s := &Service{
		st:       cfg.Store,
		arns:     arns{partition: "aws", region: cfg.Region, account: cfg.AccountID},
		now:      func() time.Time { return cfg.Now().UTC().Truncate(time.Millisecond) }, // API timestamps have millisecond precision
		log:      cfg.Log,
		ids:      newIDSource(cfg.Now),
		endpoint: cfg.Endpoint,

		alarmSource:      cfg.AlarmSource,
		progressDeadline: cfg.ProgressDeadline,
	}
	s.events = newEmitter(s.st, s.log, s.now, s.arns, cfg.EventRetention, cfg.EventLimit)
	s.fleet = newFleet()
	s.fleet.attach(s.st)
	return s
}

// Register adds every operation to h.
func (s *Service) Register(h *api.Handler) {
	s.registerClusters(h)
	s.registerCapacityProviders(h)
	s.registerTaskDefinitions(h)
	s.registerDaemonTaskDefinitions(h)
	s.registerDaemons(h)
	s.registerTags(h)
	s.registerInstances(h)
	s.registerTasks(h)
	s.registerServices(h)
	s.registerExtensions(h)
	s.registerEvents(h)
}

// storeErr classifies store failures that reach an operation: a conflict
// that survived retries means heavy contention, anything else is internal.
func storeErr(err error) error {
	if err == nil || fault.As(err) != nil {
		return err
	}
	if errors.Is(err, store.ErrConflict) {
		return &fault.Error{Kind: fault.Throttled, Message: "too many concurrent changes to the same resource; retry", Err: err}
	}
	return fmt.Errorf("state: %w", err)
}

// retry runs fn with optimistic concurrency and classifies the outcome.
func retry(ctx context.Context, fn func() error) error {
	return storeErr(store.Retry(ctx, fn))
}
