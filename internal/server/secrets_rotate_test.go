package server_test

import (
	"bytes"
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ecs"

	"github.com/capstanhq/capstan/internal/iam"
	"github.com/capstanhq/capstan/internal/ops"
	"github.com/capstanhq/capstan/internal/secrets"
	"github.com/capstanhq/capstan/internal/server"
	"github.com/capstanhq/capstan/internal/store"
	"github.com/capstanhq/capstan/internal/testenv"
)

// Rotating the secrets key: a start with the new key and the previous one
// seals every secret anew under the new key and records it; the secrets
// still authenticate, and later starts take the new key alone and refuse
// the previous one.
func TestSecretsKeyRotation(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	dir := t.TempDir()
	oldKey := filepath.Join(dir, "secrets.key")
	newKey := filepath.Join(t.TempDir(), "new.key")
	start := func(keyFile, prevFile string) *testenv.Server {
		return testenv.StartServerWith(t, func(c *server.Config) { c.DataDir, c.SecretsKeyFile, c.SecretsPreviousKeyFile = dir, keyFile, prevFile })
	}
	// refused starts a server expected not to start, for its error.
	refused := func(keyFile, prevFile string) error {
		srv, err := server.Start(ctx, server.Config{Listen: "127.0.0.1:0", DataDir: dir, AdminKeyID: "AKIDCAPSTANTEST",
			AdminSecret: "capstan-test-secret", Provisioner: "none", SecretsKeyFile: keyFile, SecretsPreviousKeyFile: prevFile})
		if err == nil {
			srv.Close()
			t.Fatalf("started with --secrets-key-file %s --secrets-previous-key-file %q", keyFile, prevFile)
		}
		return err
	}
	s := start(oldKey, "")
	if _, err := s.ECS().CreateCluster(ctx, &ecs.CreateClusterInput{ClusterName: aws.String("c1")}); err != nil {
		t.Fatal(err)
	}
	agent, err := s.Service.CreateAgentCredential(ctx, &ops.CreateAgentCredentialRequest{Cluster: "c1"})
	if err != nil {
		t.Fatal(err)
	}
	ids := iam.NewStore(s.Store, s.Config.AccountID)
	ids.CreateUser(ctx, "alice", "/", nil)
	alice, err := ids.CreateAccessKey(ctx, "alice")
	if err != nil {
		t.Fatal(err)
	}
	if err := ids.PutUserPolicy(ctx, "alice", "ecs", allECS); err != nil {
		t.Fatal(err)
	}
	s.Stop()

	nb, _, err := secrets.LoadOrCreate(newKey)
	if err != nil {
		t.Fatal(err)
	}
	ob, _ := secrets.Load(oldKey)
	// The new key alone is refused, and says how to rotate.
	if err := refused(newKey, ""); !errors.Is(err, store.ErrOtherKey) || !strings.Contains(err.Error(), "--secrets-previous-key-file") {
		t.Fatalf("the new key alone: %v", err)
	}
	// The same key as its own previous one is refused, naming both flags.
	if err := refused(oldKey, oldKey); !strings.Contains(err.Error(), "--secrets-previous-key-file") || !strings.Contains(err.Error(), "--secrets-key-file") {
		t.Fatalf("same key twice: %v", err)
	}

	s = start(newKey, oldKey)
	for key, secret := range map[string]string{store.CredentialKey(agent.AccessKeyID): agent.SecretAccessKey,
		store.IAMAccessKeyKey(alice.AccessKeyID): alice.SecretAccessKey} {
		raw, err := s.Store.RawJSON(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		if bytes.Contains(raw, []byte(secret)) || !bytes.Contains(raw, []byte(`"sealedSecretAccessKey":"s1:`+nb.KeyID()+`:`)) {
			t.Fatalf("after the rotation etcd holds %s (new key %s, old %s)", raw, nb.KeyID(), ob.KeyID())
		}
	}
	if raw, _ := s.Store.RawJSON(ctx, "secrets/key"); !bytes.Contains(raw, []byte(nb.KeyID())) {
		t.Fatalf("the recorded key: %s", raw)
	}
	authenticates(t, s, agent.AccessKeyID, agent.SecretAccessKey)
	authenticates(t, s, alice.AccessKeyID, alice.SecretAccessKey)
	s.Stop()

	// The new key alone now; the old one alone is refused.
	s = start(newKey, "")
	authenticates(t, s, agent.AccessKeyID, agent.SecretAccessKey)
	authenticates(t, s, alice.AccessKeyID, alice.SecretAccessKey)
	s.Stop()
	if err := refused(oldKey, ""); !errors.Is(err, store.ErrOtherKey) {
		t.Fatalf("the previous key alone: %v", err)
	}
}
