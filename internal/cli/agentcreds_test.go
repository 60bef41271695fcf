package cli

import (
	"context"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ecs"
	"github.com/aws/aws-sdk-go-v2/service/ecs/types"
)

func TestAgentCredential(t *testing.T) {
	h := newHarness(t)
	h.ok("cluster", "create", "edge")
	h.fails(2, "--cluster is required", "agent-credential", "create")
	h.fails(1, "ClusterNotFoundException", "agent-credential", "create", "--cluster", "nope")
	m := h.okJSON("agent-credential", "create", "--cluster", "edge")
	key, _ := m["accessKeyId"].(string)
	secret, _ := m["secretAccessKey"].(string)
	if key == "" || secret == "" || m["cluster"] != "edge" {
		t.Fatalf("credential: %v", m)
	}
	// The minted credential registers an instance and may do nothing else.
	c := h.srv.ECSWith(key, secret)
	_, err := c.RegisterContainerInstance(context.Background(), &ecs.RegisterContainerInstanceInput{Cluster: aws.String("edge"),
		TotalResources: []types.Resource{{Name: aws.String("CPU"), Type: aws.String("INTEGER"), IntegerValue: 1024},
			{Name: aws.String("MEMORY"), Type: aws.String("INTEGER"), IntegerValue: 512}}})
	if err != nil {
		t.Fatalf("register with minted credential: %v", err)
	}
	if _, err := c.ListClusters(context.Background(), &ecs.ListClustersInput{}); err == nil {
		t.Fatal("agent credential listed clusters")
	}
}
