package ops

import "github.com/capstanhq/capstan/internal/api"

// Register adds every operation to h.
func (s *Service) Register(h *api.Handler) {
	s.registerClusters(h)
	s.registerCapacityProviders(h)
	s.registerTaskDefinitions(h)
	s.registerDaemonTaskDefinitions(h)
	s.registerDaemons(h)
	s.registerTags(h)
	s.registerInstances(h)
	s.registerAttributes(h)
	s.registerAccountSettings(h)
	s.registerClusterUpdates(h)
	s.registerProtection(h)
	s.registerServiceDeployments(h)
	s.registerUnavailable(h)
	s.registerTasks(h)
	s.registerServices(h)
	s.registerExtensions(h)
	s.registerDaemonStop(h)
	s.registerEvents(h)
}
