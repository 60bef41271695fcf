package ops_test

import (
	"context"
	"errors"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ecs"
	"github.com/aws/aws-sdk-go-v2/service/ecs/types"
	"github.com/aws/smithy-go"

	"github.com/capstanhq/capstan/internal/testenv"
)

// apiCode returns the ECS error code of err, failing the test if err is nil.
func apiCode(t *testing.T, err error) string {
	t.Helper()
	var ae smithy.APIError
	if !errors.As(err, &ae) {
		t.Fatalf("want an API error, got %v", err)
	}
	return ae.ErrorCode()
}

func TestClusterLifecycle(t *testing.T) {
	ctx := context.Background()
	srv := testenv.StartServer(t, "")
	c := srv.ECS()

	out, err := c.CreateCluster(ctx, &ecs.CreateClusterInput{ClusterName: aws.String("prod"),
		Tags: []types.Tag{{Key: aws.String("team"), Value: aws.String("platform")}}})
	if err != nil {
		t.Fatal(err)
	}
	if got := aws.ToString(out.Cluster.ClusterArn); got != "arn:aws:ecs:us-east-1:123456789012:cluster/prod" {
		t.Fatalf("arn %s", got)
	}
	if aws.ToString(out.Cluster.Status) != "ACTIVE" {
		t.Fatalf("status %v", out.Cluster.Status)
	}
	// Idempotent create returns the same cluster.
	again, err := c.CreateCluster(ctx, &ecs.CreateClusterInput{ClusterName: aws.String("prod")})
	if err != nil || aws.ToString(again.Cluster.ClusterArn) != aws.ToString(out.Cluster.ClusterArn) {
		t.Fatalf("second create: %v %v", again, err)
	}
	_, err = c.CreateCluster(ctx, &ecs.CreateClusterInput{ClusterName: aws.String("bad name!")})
	if code := apiCode(t, err); code != "InvalidParameterException" {
		t.Fatalf("bad name: %s", code)
	}

	d, err := c.DescribeClusters(ctx, &ecs.DescribeClustersInput{Clusters: []string{"prod", "nope"}, Include: []types.ClusterField{types.ClusterFieldTags}})
	if err != nil {
		t.Fatal(err)
	}
	if len(d.Clusters) != 1 || len(d.Failures) != 1 || aws.ToString(d.Failures[0].Reason) != "MISSING" {
		t.Fatalf("describe: %+v", d)
	}
	if len(d.Clusters[0].Tags) != 1 || aws.ToString(d.Clusters[0].Tags[0].Value) != "platform" {
		t.Fatalf("tags: %+v", d.Clusters[0].Tags)
	}

	for _, n := range []string{"a", "b", "c"} {
		if _, err := c.CreateCluster(ctx, &ecs.CreateClusterInput{ClusterName: aws.String(n)}); err != nil {
			t.Fatal(err)
		}
	}
	var all []string
	p := ecs.NewListClustersPaginator(c, &ecs.ListClustersInput{MaxResults: aws.Int32(2)})
	pages := 0
	for p.HasMorePages() {
		pg, err := p.NextPage(ctx)
		if err != nil {
			t.Fatal(err)
		}
		pages++
		all = append(all, pg.ClusterArns...)
	}
	if len(all) != 4 || pages != 2 {
		t.Fatalf("list: %d clusters in %d pages: %v", len(all), pages, all)
	}
	_, err = c.ListClusters(ctx, &ecs.ListClustersInput{MaxResults: aws.Int32(101)})
	if code := apiCode(t, err); code != "InvalidParameterException" {
		t.Fatalf("maxResults 101: %s", code)
	}
	_, err = c.ListClusters(ctx, &ecs.ListClustersInput{NextToken: aws.String("garbage")})
	if code := apiCode(t, err); code != "InvalidParameterException" {
		t.Fatalf("bad token: %s", code)
	}

	del, err := c.DeleteCluster(ctx, &ecs.DeleteClusterInput{Cluster: aws.String("a")})
	if err != nil || aws.ToString(del.Cluster.Status) != "INACTIVE" {
		t.Fatalf("delete: %v %v", del, err)
	}
	_, err = c.DeleteCluster(ctx, &ecs.DeleteClusterInput{Cluster: aws.String("a")})
	if code := apiCode(t, err); code != "ClusterNotFoundException" {
		t.Fatalf("delete twice: %s", code)
	}

	srv = srv.Restart(t)
	d, err = srv.ECS().DescribeClusters(ctx, &ecs.DescribeClustersInput{Clusters: []string{"prod", "a"}})
	if err != nil || len(d.Clusters) != 2 || aws.ToString(d.Clusters[0].Status) != "ACTIVE" || aws.ToString(d.Clusters[1].Status) != "INACTIVE" {
		t.Fatalf("after restart: %+v %v", d, err)
	}
}
