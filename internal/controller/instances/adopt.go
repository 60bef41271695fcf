package instances

import (
	"context"

	"github.com/capstanhq/capstan/internal/fleet"
	"github.com/capstanhq/capstan/internal/store"
)

// finder is a provisioner that finds an instance by the request ID it was
// launched with (the local one: its directory is named so).
type finder interface {
	Find(id string) (handle string, ok bool)
}

// adopt notes the handle of an instance launched by a server that stopped
// before noting it, where the provisioner can find it by ID: it is then
// watched and terminated like any other, not left running unknown or
// launched again. A provisioner that cannot (ec2) relies on its sweep
// (docs/ec2.md, Leaks). It reports whether it adopted m.
func (r *Reconciler) adopt(ctx context.Context, m store.Item[fleet.ManagedInstance]) (bool, error) {
	if m.Value.Handle != "" || m.Value.Terminating {
		return false, nil
	}
	f, ok := r.Provisioner.(finder)
	if !ok {
		return false, nil
	}
	h, found := f.Find(m.Value.ID)
	if !found {
		return false, nil
	}
	if err := r.noteHandles(ctx, []store.Item[fleet.ManagedInstance]{m}, map[string]string{m.Key: h}); err != nil {
		return false, err
	}
	r.Log.Warn("adopted a launched instance whose handle was not recorded", "instance", m.Value.ID, "handle", h)
	return true, nil
}
