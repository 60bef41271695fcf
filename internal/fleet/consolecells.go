package fleet

import (
	"context"
	"slices"
	"strings"
)

// DaemonCell is one instance of a cluster as a daemon's rollout grid shows
// it: the instance and the daemon's task placed on it.
type DaemonCell struct {
	ID, Status string
	// RevisionArn is the daemon revision the placed task runs; TaskID is
	// that task. Both empty when no live task of the daemon is placed.
	RevisionArn, TaskID string
	TaskLast            string // the task's last status
}

// DaemonCells lists the cluster's instances (INACTIVE ones left out) with
// the daemon's task on each, ordered by instance ID, from the fleet view:
// the console's live rollout page reads it on every change, and describing
// every instance and task through the API was most of its cost at 5,000
// instances. The slice is appended to buf.
func (s *State) DaemonCells(ctx context.Context, cluster, daemon string, buf []DaemonCell) ([]DaemonCell, error) {
	v, err := s.fleetView(ctx)
	if err != nil {
		return nil, StoreErr(err)
	}
	defer v.done()
	c := v.cluster(cluster)
	out := slices.Grow(buf[:0], len(c.instances))
	for _, fi := range c.instances {
		if !fi.rec || fi.status == "INACTIVE" {
			continue
		}
		dc := DaemonCell{ID: fi.id, Status: fi.status}
		if p, ok := fi.placements.get(daemon); ok && p.TaskID != "" {
			if t := c.tasks[p.TaskID]; t != nil && (t.Last != "STOPPED" || t.DesiredStatus != "STOPPED") {
				dc.TaskID, dc.TaskLast = p.TaskID, t.Last
				dc.RevisionArn = p.RevisionArn
				if p.TaskRevisionArn != "" {
					dc.RevisionArn = p.TaskRevisionArn
				}
			}
		}
		out = append(out, dc)
	}
	slices.SortFunc(out, func(a, b DaemonCell) int { return strings.Compare(a.ID, b.ID) })
	return out, nil
}
