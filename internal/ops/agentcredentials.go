package ops

import (
	"context"

	"github.com/capstanhq/capstan/internal/api"
	"github.com/capstanhq/capstan/internal/fault"
	"github.com/capstanhq/capstan/internal/fleet"
	"github.com/capstanhq/capstan/internal/store"
)

// CreateAgentCredentialRequest asks for credentials agents of a cluster
// register with (one instance per credential).
type CreateAgentCredentialRequest struct {
	Cluster          string `json:"cluster"`
	CapacityProvider string `json:"capacityProvider,omitempty"`
	Description      string `json:"description,omitempty"`
	// Count credentials are minted in one write (default 1), one for each
	// machine that joins.
	Count *int `json:"count,omitempty"`
}

// MaxAgentCredentials bounds the credentials one call mints: they are
// written in one etcd transaction, and a leaked batch is all a call can
// expose.
const MaxAgentCredentials = 100

// AgentCredentialSecret is one minted credential.
type AgentCredentialSecret struct {
	AccessKeyID     string `json:"accessKeyId"`
	SecretAccessKey string `json:"secretAccessKey"`
}

// CreateAgentCredentialResponse carries the new credentials (the first also
// at the top level); the secrets are shown only here.
type CreateAgentCredentialResponse struct {
	AccessKeyID      string                  `json:"accessKeyId"`
	SecretAccessKey  string                  `json:"secretAccessKey"`
	Cluster          string                  `json:"cluster"`
	CapacityProvider string                  `json:"capacityProvider,omitempty"`
	Credentials      []AgentCredentialSecret `json:"credentials"`
}

// CreateAgentCredential mints credentials for hand-started agents.
func (s *Service) CreateAgentCredential(ctx context.Context, req *CreateAgentCredentialRequest) (*CreateAgentCredentialResponse, error) {
	if len(req.Description) > 255 {
		return nil, fault.Invalid("description", "must be at most 255 characters")
	}
	n := 1
	if req.Count != nil {
		n = *req.Count
		if n < 1 || n > MaxAgentCredentials {
			return nil, fault.Invalid("count", "must be between 1 and %d", MaxAgentCredentials)
		}
	}
	cl, err := s.ActiveCluster(ctx, "cluster", req.Cluster)
	if err != nil {
		return nil, err
	}
	tx := s.Store.Txn().Unchanged(cl.Key, cl.Rev)
	cpName := ""
	if req.CapacityProvider != "" {
		// Instances of this credential belong to the capacity provider: its daemons run there.
		cp, err := s.ClusterCapacityProvider(ctx, "capacityProvider", req.CapacityProvider, cl.Value.ClusterName)
		if err != nil {
			return nil, err
		}
		cpName = cp.Value.Name
		tx.Unchanged(cp.Key, cp.Rev)
	}
	out := &CreateAgentCredentialResponse{Cluster: cl.Value.ClusterName, CapacityProvider: cpName}
	for range n {
		cred := s.MintAgentCredential(cl.Value.ClusterName, req.Description)
		// Not Managed: Capstan cannot replace a machine that joined, so
		// daemon rollouts change it in place (docs/own-machines.md).
		cred.CapacityProvider = cpName
		tx.Create(store.CredentialKey(cred.AccessKeyID), cred)
		out.Credentials = append(out.Credentials, AgentCredentialSecret{AccessKeyID: cred.AccessKeyID, SecretAccessKey: cred.SecretAccessKey})
	}
	if _, err := tx.Commit(ctx); err != nil {
		return nil, fleet.StoreErr(err)
	}
	out.AccessKeyID, out.SecretAccessKey = out.Credentials[0].AccessKeyID, out.Credentials[0].SecretAccessKey
	return out, nil
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
