package control

import (
	"context"
	"strings"
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
// cluster's instances. It reads placements and tasks, the same records the
// daemons controller acts on.
func (s *Service) DaemonCounts(ctx context.Context, cluster, daemon string, cpArns []string) (map[string]*DaemonCount, error) {
	out := map[string]*DaemonCount{}
	// By name: the ARNs are this server's, and building one per instance
	// was most of the walk's garbage.
	byName := map[string]*DaemonCount{}
	for _, cp := range cpArns {
		out[cp] = &DaemonCount{Running: map[string]int{}, Draining: map[string]int{}}
		byName[cp[strings.LastIndexByte(cp, '/')+1:]] = out[cp]
	}
	v, err := s.fleetView(ctx)
	if err != nil {
		return nil, err
	}
	defer v.done()
	c := v.cluster(cluster)
	for _, fi := range c.instances {
		if !fi.rec || fi.status == "INACTIVE" || fi.cp == "" {
			continue
		}
		n, ok := byName[fi.cp]
		if !ok {
			continue
		}
		n.Instances++
		rev, running := c.daemonOn(fi, daemon)
		if running {
			if fi.status == "DRAINING" {
				n.Draining[rev]++
			} else {
				n.Running[rev]++
			}
		}
		if !running && fi.status == "ACTIVE" {
			n.WithoutDaemon++
		}
	}
	return out, nil
}
