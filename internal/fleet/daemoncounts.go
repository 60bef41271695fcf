package fleet

import (
	"context"
	"maps"
)

// DaemonCount is how a daemon stands on the instances of one capacity
// provider: instances running it at a revision, draining instances still
// running it, and instances without a running task of it.
type DaemonCount struct {
	Running       map[string]int // by revision ARN
	Draining      map[string]int // by revision ARN
	WithoutDaemon int
	Instances     int // instances in scope (not INACTIVE)
}

// DaemonCounts counts, per capacity provider ARN, the daemon's tasks on the
// cluster's instances, from the counts the fleet view keeps as placements,
// tasks and instances change (the same records the daemons controller acts
// on): no walk over the fleet per call.
func (s *State) DaemonCounts(ctx context.Context, cluster, daemon string, cpArns []string) (map[string]*DaemonCount, error) {
	if err := s.Store.Sync(ctx); err != nil {
		return nil, err
	}
	s.model.counts.RLock()
	defer s.model.counts.RUnlock()
	c := s.model.clusters[cluster]
	if c == nil {
		c = &fleetCluster{}
	}
	out := map[string]*DaemonCount{}
	for _, cp := range cpArns {
		out[cp] = c.daemonCount(daemon, LastPart(cp)) // by name: the ARNs are this server's
	}
	return out, nil
}

// daemonCount is how daemon stands on the instances of the capacity
// provider named cp, from the kept counts.
func (c *fleetCluster) daemonCount(daemon, cp string) *DaemonCount {
	n := &DaemonCount{Running: map[string]int{}, Draining: map[string]int{}}
	st := c.cps[cp]
	if st == nil {
		return n
	}
	n.Instances, n.WithoutDaemon = st.instances, st.active
	if ds := c.stands[daemon][cp]; ds != nil {
		maps.Copy(n.Running, ds.running)
		maps.Copy(n.Draining, ds.draining)
		n.WithoutDaemon -= ds.runningActive
	}
	return n
}
