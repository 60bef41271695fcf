package ops

import (
	"context"
	"strings"
	"testing"

	"github.com/capstanhq/capstan/internal/api/shapes"
	"github.com/capstanhq/capstan/internal/store"
)

func TestCreateAgentCredentialCount(t *testing.T) {
	ctx := context.Background()
	st := openStore(t)
	s := newService(st)
	if _, err := s.CreateCluster(ctx, &shapes.CreateClusterRequest{ClusterName: "c"}); err != nil {
		t.Fatal(err)
	}
	stored := func() int {
		items, _, err := store.List[store.AgentCredential](ctx, st, "credentials/", "", 0)
		if err != nil {
			t.Fatal(err)
		}
		return len(items)
	}
	three := 3
	out, err := s.CreateAgentCredential(ctx, &CreateAgentCredentialRequest{Cluster: "c", Count: &three})
	if err != nil {
		t.Fatal(err)
	}
	if len(out.Credentials) != 3 || out.AccessKeyID != out.Credentials[0].AccessKeyID {
		t.Fatalf("credentials = %+v", out)
	}
	seen := map[string]bool{}
	for _, c := range out.Credentials {
		seen[c.AccessKeyID] = true
		got, err := store.Get[store.AgentCredential](ctx, st, store.CredentialKey(c.AccessKeyID))
		if err != nil || got.Value.Cluster != "c" || got.Value.Managed {
			t.Fatalf("stored %s: %+v %v", c.AccessKeyID, got.Value, err)
		}
	}
	if len(seen) != 3 || stored() != 3 {
		t.Fatalf("distinct %d, stored %d", len(seen), stored())
	}

	zero, many := 0, MaxAgentCredentials+1
	for _, bad := range []*CreateAgentCredentialRequest{
		{Cluster: "c", Count: &zero},
		{Cluster: "c", Count: &many},
		{Cluster: "c", CapacityProvider: "nope"},
	} {
		_, err := s.CreateAgentCredential(ctx, bad)
		field := "count"
		if bad.CapacityProvider != "" {
			field = "nope"
		}
		if err == nil || !strings.Contains(err.Error(), field) {
			t.Errorf("%+v: err = %v, want one naming %q", bad, err, field)
		}
	}
	if n := stored(); n != 3 {
		t.Fatalf("refused calls wrote credentials: %d stored", n)
	}
}
