package control

import (
	"context"
	"errors"

	"github.com/capstanhq/capstan/internal/api"
	"github.com/capstanhq/capstan/internal/auth"
	"github.com/capstanhq/capstan/internal/fault"
	"github.com/capstanhq/capstan/internal/store"
)

// Credentials looks up agent credentials kept in the store; it implements
// auth.Lookup.
type Credentials struct{ st *store.Store }

// Credentials returns the store-backed credential lookup.
func (s *Service) Credentials() Credentials { return Credentials{s.st} }

func (c Credentials) Credential(ctx context.Context, keyID string) (auth.Credential, bool, error) {
	if !keyIDPattern(keyID) {
		return auth.Credential{}, false, nil
	}
	it, err := store.Get[store.AgentCredential](ctx, c.st, store.CredentialKey(keyID))
	if errors.Is(err, store.ErrNotFound) {
		return auth.Credential{}, false, nil
	}
	if err != nil {
		return auth.Credential{}, false, err
	}
	v := it.Value
	return auth.Credential{AccessKeyID: v.AccessKeyID, SecretAccessKey: v.SecretAccessKey, Role: auth.RoleAgent, InstanceID: v.InstanceID}, true, nil
}

func keyIDPattern(s string) bool {
	if len(s) < 4 || len(s) > 128 {
		return false
	}
	for _, r := range s {
		if !(r >= 'A' && r <= 'Z' || r >= '0' && r <= '9') {
			return false
		}
	}
	return true
}

// agentOperations are the ECS operations an agent credential may call; each
// also checks that the agent acts for its own instance.
var agentOperations = map[string]bool{
	"RegisterContainerInstance": true,
	"DiscoverPollEndpoint":      true,
}

// Authorize lets admins do everything and agents only what an instance
// needs for itself.
func Authorize(p auth.Principal, op string) error {
	switch {
	case p.Role == auth.RoleAdmin:
		return nil
	case p.Role == auth.RoleAgent && agentOperations[op]:
		return nil
	}
	return fault.Denied("credential %s (role %s) is not allowed to call %s", p.AccessKeyID, p.Role, op)
}

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
	cl, err := s.activeCluster(ctx, "cluster", req.Cluster)
	if err != nil {
		return nil, err
	}
	cred := s.MintAgentCredential(cl.Value.ClusterName, req.Description)
	tx := s.st.Txn().Unchanged(cl.Key, cl.Rev)
	if req.CapacityProvider != "" {
		// Instances of this credential belong to the capacity provider: its daemons run there.
		cp, err := s.clusterCapacityProvider(ctx, "capacityProvider", req.CapacityProvider, cl.Value.ClusterName)
		if err != nil {
			return nil, err
		}
		cred.CapacityProvider = cp.Value.Name
		tx.Unchanged(cp.Key, cp.Rev)
	}
	if _, err := tx.Create(store.CredentialKey(cred.AccessKeyID), cred).Commit(ctx); err != nil {
		return nil, storeErr(err)
	}
	return &CreateAgentCredentialResponse{AccessKeyID: cred.AccessKeyID, SecretAccessKey: cred.SecretAccessKey, Cluster: cred.Cluster}, nil
}

// MintAgentCredential returns a new, unsaved agent credential.
func (s *Service) MintAgentCredential(cluster, description string) store.AgentCredential {
	return store.AgentCredential{
		AccessKeyID:     auth.NewAccessKeyID("CSAG"),
		SecretAccessKey: auth.NewSecretAccessKey(),
		Cluster:         cluster,
		CreatedAt:       s.now(),
		Description:     description,
	}
}

func (s *Service) registerExtensions(h *api.Handler) {
	api.RegisterExtension(h, "CreateAgentCredential", s.CreateAgentCredential)
	api.RegisterExtension(h, "DescribeDaemonRollout", s.DescribeDaemonRollout)
	api.RegisterExtension(h, "PreviewDaemonUpdate", s.PreviewDaemonUpdate)
	api.RegisterExtension(h, "RollbackDaemon", s.RollbackDaemon)
	api.RegisterExtension(h, "DescribeDaemonConfiguration", s.DescribeDaemonConfiguration)
}
