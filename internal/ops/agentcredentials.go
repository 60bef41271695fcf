package ops

import (
	"context"

	"github.com/capstanhq/capstan/internal/api"
	"github.com/capstanhq/capstan/internal/fault"
	"github.com/capstanhq/capstan/internal/fleet"
	"github.com/capstanhq/capstan/internal/store"
)

// CreateAgentCredentialRequest asks for a credential agents of a cluster
// register with (one instance per credential).
type CreateAgentCredentialRequest struct {
	Cluster          string `json:"cluster"`
	CapacityProvider string `json:"capacityProvider,omitempty"`
	Description      string `json:"description,omitempty"`
}

// CreateAgentCredentialResponse carries the new credential; the secret is
// shown only here.
type CreateAgentCredentialResponse struct {
	AccessKeyID     string `json:"accessKeyId"`
	SecretAccessKey string `json:"secretAccessKey"`
	Cluster         string `json:"cluster"`
}

// CreateAgentCredential mints a credential for a hand-started agent.
func (s *Service) CreateAgentCredential(ctx context.Context, req *CreateAgentCredentialRequest) (*CreateAgentCredentialResponse, error) {
	if len(req.Description) > 255 {
		return nil, fault.Invalid("description", "must be at most 255 characters")
	}
	cl, err := s.ActiveCluster(ctx, "cluster", req.Cluster)
	if err != nil {
		return nil, err
	}
	cred := s.MintAgentCredential(cl.Value.ClusterName, req.Description)
	tx := s.Store.Txn().Unchanged(cl.Key, cl.Rev)
	if req.CapacityProvider != "" {
		// Instances of this credential belong to the capacity provider: its daemons run there.
		cp, err := s.ClusterCapacityProvider(ctx, "capacityProvider", req.CapacityProvider, cl.Value.ClusterName)
		if err != nil {
			return nil, err
		}
		cred.CapacityProvider = cp.Value.Name
		tx.Unchanged(cp.Key, cp.Rev)
	}
	if _, err := tx.Create(store.CredentialKey(cred.AccessKeyID), cred).Commit(ctx); err != nil {
		return nil, fleet.StoreErr(err)
	}
	return &CreateAgentCredentialResponse{AccessKeyID: cred.AccessKeyID, SecretAccessKey: cred.SecretAccessKey, Cluster: cred.Cluster}, nil
}

func (s *Service) registerExtensions(h *api.Handler) {
	api.RegisterExtension(h, "CreateAgentCredential", s.CreateAgentCredential)
	api.RegisterExtension(h, "DescribeDaemonRollout", s.DescribeDaemonRollout)
	api.RegisterExtension(h, "PreviewDaemonUpdate", s.PreviewDaemonUpdate)
	api.RegisterExtension(h, "RollbackDaemon", s.RollbackDaemon)
	api.RegisterExtension(h, "DescribeDaemonConfiguration", s.DescribeDaemonConfiguration)
}

// agentOperations are the ECS operations an agent credential may call; each
// also checks that the agent acts for its own instance.
var agentOperations = map[string]bool{
	"RegisterContainerInstance": true,
	"DiscoverPollEndpoint":      true,
}
