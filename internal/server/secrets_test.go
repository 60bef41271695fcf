package server_test

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ecs"
	"github.com/aws/smithy-go"

	"github.com/capstanhq/capstan/internal/iam"
	"github.com/capstanhq/capstan/internal/ops"
	"github.com/capstanhq/capstan/internal/server"
	"github.com/capstanhq/capstan/internal/store"
	"github.com/capstanhq/capstan/internal/testenv"
)

const allECS = `{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Action":"ecs:*","Resource":"*"}]}`

// authenticates says a signed call with the credential got past
// authentication (an agent's may then be denied the call itself).
func authenticates(t *testing.T, s *testenv.Server, id, secret string) {
	t.Helper()
	_, err := s.ECSWith(id, secret).ListClusters(context.Background(), &ecs.ListClustersInput{})
	var ae smithy.APIError
	if errors.As(err, &ae) && (strings.Contains(ae.ErrorCode(), "Signature") || strings.Contains(ae.ErrorCode(), "UnrecognizedClient")) {
		t.Fatalf("%s does not authenticate: %v", id, err)
	}
}

// sealed says etcd holds the record at key without secret, sealed.
func sealed(t *testing.T, s *testenv.Server, key, secret string) {
	t.Helper()
	raw, err := s.Store.RawJSON(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(raw, []byte(secret)) || !bytes.Contains(raw, []byte(`"sealedSecretAccessKey":"s1:`)) {
		t.Fatalf("etcd holds %s", raw)
	}
}

// Agent credentials' and users' secrets are sealed in etcd with a key
// kept in the data dir: nothing in etcd's files shows them, they still
// authenticate after a restart, and records an earlier version wrote in
// the clear are sealed at start. Another key is refused, naming the flag.
func TestSecretsSealedAtRest(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	dir := t.TempDir()
	start := func() *testenv.Server { return testenv.StartServerWith(t, func(c *server.Config) { c.DataDir = dir }) }
	s := start()
	if _, err := s.ECS().CreateCluster(ctx, &ecs.CreateClusterInput{ClusterName: aws.String("c1")}); err != nil {
		t.Fatal(err)
	}
	agent, err := s.Service.CreateAgentCredential(ctx, &ops.CreateAgentCredentialRequest{Cluster: "c1"})
	if err != nil {
		t.Fatal(err)
	}
	ids := iam.NewStore(s.Store, s.Config.AccountID)
	if _, err := ids.CreateUser(ctx, "alice", "/", nil); err != nil {
		t.Fatal(err)
	}
	alice, err := ids.CreateAccessKey(ctx, "alice")
	if err != nil {
		t.Fatal(err)
	}
	if err := ids.PutUserPolicy(ctx, "alice", "ecs", allECS); err != nil {
		t.Fatal(err)
	}
	sealed(t, s, store.CredentialKey(agent.AccessKeyID), agent.SecretAccessKey)
	sealed(t, s, store.IAMAccessKeyKey(alice.AccessKeyID), alice.SecretAccessKey)
	authenticates(t, s, agent.AccessKeyID, agent.SecretAccessKey)
	authenticates(t, s, alice.AccessKeyID, alice.SecretAccessKey)
	if c, ok, err := s.Service.Credentials().Credential(ctx, agent.AccessKeyID); !ok || err != nil || c.SecretAccessKey != agent.SecretAccessKey {
		t.Fatalf("agent credential lookup: %v %v", ok, err)
	}
	s.Stop()

	// A copy of etcd's files (database and log) shows neither secret.
	for _, secret := range []string{agent.SecretAccessKey, alice.SecretAccessKey} {
		if f := fileHolding(t, filepath.Join(dir, "etcd"), secret); f != "" {
			t.Errorf("%s holds a secret", f)
		}
	}
	for path, want := range map[string]fs.FileMode{dir: 0o700, filepath.Join(dir, "secrets.key"): 0o600} {
		if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != want {
			t.Errorf("%s: mode %v (%v), want %04o", path, fi.Mode().Perm(), err, want)
		}
	}

	// Records as an earlier version wrote them, secrets in the clear.
	plain, err := store.Open(ctx, store.Config{DataDir: filepath.Join(dir, "etcd")})
	if err != nil {
		t.Fatal(err)
	}
	old := store.AgentCredential{AccessKeyID: "CSAGOLDVERSION00000A", SecretAccessKey: "old-agent-secret-in-the-clear-0000000000", Cluster: "c1", CreatedAt: time.Now()}
	if _, err := plain.Txn().Create(store.CredentialKey(old.AccessKeyID), old).Commit(ctx); err != nil {
		t.Fatal(err)
	}
	oldIDs := iam.NewStore(plain, s.Config.AccountID)
	oldIDs.CreateUser(ctx, "bob", "/", nil)
	bob, err := oldIDs.CreateAccessKey(ctx, "bob")
	if err != nil {
		t.Fatal(err)
	}
	oldIDs.PutUserPolicy(ctx, "bob", "ecs", allECS)
	if raw, _ := plain.RawJSON(ctx, store.IAMAccessKeyKey(bob.AccessKeyID)); !bytes.Contains(raw, []byte(bob.SecretAccessKey)) {
		t.Fatalf("a store without a key wrote %s", raw)
	}
	plain.Close()
	// The search finds a secret etcd was given in the clear (in its log,
	// and there it stays until the log is compacted away: docs/security.md).
	if fileHolding(t, filepath.Join(dir, "etcd"), bob.SecretAccessKey) == "" {
		t.Fatal("a secret written in the clear is in none of etcd's files")
	}

	s = start()
	sealed(t, s, store.CredentialKey(old.AccessKeyID), old.SecretAccessKey)
	sealed(t, s, store.IAMAccessKeyKey(bob.AccessKeyID), bob.SecretAccessKey)
	for _, c := range [][2]string{{agent.AccessKeyID, agent.SecretAccessKey}, {alice.AccessKeyID, alice.SecretAccessKey},
		{old.AccessKeyID, old.SecretAccessKey}, {bob.AccessKeyID, bob.SecretAccessKey}} {
		authenticates(t, s, c[0], c[1])
	}
	cfg := s.Config
	s.Stop()

	cfg.SecretsKeyFile = filepath.Join(t.TempDir(), "other.key")
	if other, err := server.Start(ctx, cfg); err == nil {
		other.Close()
		t.Fatal("a server with another key started on the sealed secrets")
	} else if !strings.Contains(err.Error(), "--secrets-key-file") || !errors.Is(err, store.ErrOtherKey) {
		t.Fatalf("another key: %v", err)
	}
}

// fileHolding is a file under dir that holds secret, if any.
func fileHolding(t *testing.T, dir, secret string) (found string) {
	t.Helper()
	filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || d.Type()&fs.ModeSocket != 0 {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if bytes.Contains(b, []byte(secret)) {
			found = path
		}
		return nil
	})
	return found
}
