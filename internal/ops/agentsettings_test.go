package ops

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/capstanhq/capstan/internal/api/shapes"
	"github.com/capstanhq/capstan/internal/fault"
	"github.com/capstanhq/capstan/internal/provision/agentenv"
	"github.com/capstanhq/capstan/internal/store"
)

// Agent-setting tags on a capacity provider are checked by the agent's
// parser at CreateCapacityProvider and TagResource: a refused one names
// the tag and the rule, and nothing is written.
func TestCapacityProviderAgentSettingTags(t *testing.T) {
	ctx := context.Background()
	s := newService(openStore(t))
	s.CheckAgentSettings = agentenv.Check
	if _, err := s.CreateCluster(ctx, &shapes.CreateClusterRequest{ClusterName: "c"}); err != nil {
		t.Fatal(err)
	}
	create := func(name string, tags ...shapes.Tag) (*shapes.CreateCapacityProviderResponse, error) {
		return s.CreateCapacityProvider(ctx, &shapes.CreateCapacityProviderRequest{Name: name, Cluster: "c", Tags: tags,
			ManagedInstancesProvider: &shapes.CreateManagedInstancesProviderConfiguration{InfrastructureRoleArn: "arn:aws:iam::123456789012:role/r"}})
	}
	tag := func(k, v string) shapes.Tag { return shapes.Tag{Key: k, Value: v} }
	bad := []struct {
		tags []shapes.Tag
		want []string
	}{
		{[]shapes.Tag{tag("team", "x"), tag("capstan:agent-env:ECS_IMAGE_PULL_BEHAVIOR", "sometimes")},
			[]string{"tags[1]", "ECS_IMAGE_PULL_BEHAVIOR", "must be one of"}},
		{[]shapes.Tag{tag("capstan:agent-env:ECS_CONTAINER_STOP_TIMEOUT", "soon")}, []string{"tags[0]", "ECS_CONTAINER_STOP_TIMEOUT"}},
		{[]shapes.Tag{tag("capstan:agent-env:ECS_NOT_A_SETTING", "1")}, []string{"tags[0]", "ECS_NOT_A_SETTING", "does not know"}},
		{[]shapes.Tag{tag("capstan:agent-env:ECS_CLUSTER", "other")}, []string{"tags[0].key", "ECS_CLUSTER", "cannot be changed"}},
		{[]shapes.Tag{tag("capstan:agent-env:ECS_DISABLE_PRIVILEGED", "false")}, []string{"tags[0].key", "ECS_DISABLE_PRIVILEGED"}},
		{[]shapes.Tag{tag("capstan:agent-env:AWS_REGION", "eu-west-1")}, []string{"tags[0].key", "ECS_*"}},
		{[]shapes.Tag{tag("Capstan:Agent-Env:ECS_LOGLEVEL", "debug")}, []string{"tags[0].key", "lower case"}},
	}
	for _, c := range bad {
		_, err := create("bad", c.tags...)
		var f *fault.Error
		if !errors.As(err, &f) {
			t.Fatalf("%v: want a refusal, got %v", c.tags, err)
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%v: %q does not say %q", c.tags, err, w)
			}
		}
		if _, err := store.Get[store.CapacityProvider](ctx, s.Store, store.CapacityProviderKey("bad")); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("%v: a refused capacity provider was written (%v)", c.tags, err)
		}
	}

	out, err := create("good", tag("capstan:agent-env:ECS_IMAGE_PULL_BEHAVIOR", "prefer-cached"))
	if err != nil {
		t.Fatal(err)
	}
	arn := out.CapacityProvider.CapacityProviderArn
	_, err = s.TagResource(ctx, &shapes.TagResourceRequest{ResourceArn: arn, Tags: []shapes.Tag{tag("capstan:agent-env:ECS_LOGLEVEL", "loud")}})
	if err == nil || !strings.Contains(err.Error(), "ECS_LOGLEVEL") {
		t.Fatalf("TagResource with a bad setting: %v", err)
	}
	if _, err := s.TagResource(ctx, &shapes.TagResourceRequest{ResourceArn: arn, Tags: []shapes.Tag{tag("capstan:agent-env:ECS_LOGLEVEL", "debug")}}); err != nil {
		t.Fatal(err)
	}
	it, err := store.Get[store.CapacityProvider](ctx, s.Store, store.CapacityProviderKey("good"))
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, tg := range it.Value.Tags {
		got[tg.Key] = tg.Value
	}
	if len(got) != 2 || got["capstan:agent-env:ECS_LOGLEVEL"] != "debug" || got["capstan:agent-env:ECS_IMAGE_PULL_BEHAVIOR"] != "prefer-cached" {
		t.Fatalf("tags %v", got)
	}
	// On other resources the prefix means nothing and is not checked.
	if _, err := s.TagResource(ctx, &shapes.TagResourceRequest{ResourceArn: s.ARNs.Cluster("c"),
		Tags: []shapes.Tag{tag("capstan:agent-env:ECS_LOGLEVEL", "loud")}}); err != nil {
		t.Fatalf("cluster tag: %v", err)
	}
}
