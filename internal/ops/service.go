// Package ops serves the ECS API operations (and Capstan's CapstanV1
// extensions): each validates its request, reads and writes through the
// fleet's state, and answers in ECS's shapes. Decisions the controllers
// share (placement, task starts and stops, instance records, agent reports)
// live in internal/fleet, so that neither side imports the other.
package ops

import (
	"strconv"

	"github.com/capstanhq/capstan/internal/fleet"
)

// Service holds the operations. The fleet state it embeds is the domain
// every operation reads and writes through.
type Service struct {
	*fleet.State
	// CheckAgentSettings runs ECS_* settings through the agent's parser
	// (agentenv.Check; the server gives it, as ops may not import the agent).
	CheckAgentSettings func(map[string]string) error
}

// New returns the operations over a fleet state.
func New(st *fleet.State) *Service { return &Service{State: st} }

func fieldIndex(field string, i int) string { return field + "[" + strconv.Itoa(i) + "]" }

func ptr[T any](v T) *T { return &v }
