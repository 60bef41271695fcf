package fleet

import (
	"context"

	"github.com/capstanhq/capstan/internal/store"
)

// Reasons a drain records on its instance. They are read back to decide
// what happens next (the daemons controller, an operator's activation).
const (
	// RepairFailedReason starts the reason of an instance auto-repair gave
	// up on: it stays DRAINING until an operator activates it.
	RepairFailedReason = "Auto-repair failed"
	// RepairPrefix starts (or, for a joined machine repaired in place, is
	// inside) the reason of an auto-repair drain.
	RepairPrefix = "auto-repair: "
	// ReplacedPrefix and RetiredPrefix start the reasons of a daemon
	// rollout's drain of a provisioned instance it replaces or retires.
	ReplacedPrefix = "Replaced by daemon deployment "
	RetiredPrefix  = "Retired by daemon deployment "
)

// InstanceTasks reads the tasks placed on an instance that have not left
// it (their desired entry is still there), from their records.
func (s *State) InstanceTasks(ctx context.Context, ci store.ContainerInstance) ([]store.Item[store.Task], error) {
	return s.instanceTasks(ctx, ci)
}
