package fleet

import (
	"context"
	"errors"

	"github.com/capstanhq/capstan/internal/auth"
	"github.com/capstanhq/capstan/internal/store"
)

// Credentials looks up agent credentials kept in the store; it implements
// auth.Lookup.
type Credentials struct{ st *store.Store }

// Credentials returns the store-backed credential lookup.
func (s *State) Credentials() Credentials { return Credentials{s.Store} }

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

// SealCredentials rewrites sealed the agent credentials an earlier
// version stored with their secret in the clear; it says how many.
func (s *State) SealCredentials(ctx context.Context) (int, error) {
	return store.Reseal[store.AgentCredential](ctx, s.Store, "credentials/")
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

// MintAgentCredential returns a new, unsaved agent credential.
func (s *State) MintAgentCredential(cluster, description string) store.AgentCredential {
	return store.AgentCredential{
		AccessKeyID:     auth.NewAccessKeyID("CSAG"),
		SecretAccessKey: auth.NewSecretAccessKey(),
		Cluster:         cluster,
		CreatedAt:       s.Now(),
		Description:     description,
	}
}
