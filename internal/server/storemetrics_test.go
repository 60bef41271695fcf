package server_test

import (
	"context"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ecs"

	"github.com/capstanhq/capstan/internal/testenv"
)

// /metrics counts the records written by kind: a cluster created through
// the API shows up as a put of kind "clusters".
func TestMetricsCountStoreWritesByKind(t *testing.T) {
	srv := testenv.StartServer(t, t.TempDir())
	c := srv.ECS()
	if _, err := c.CreateCluster(context.Background(), &ecs.CreateClusterInput{ClusterName: aws.String("counted")}); err != nil {
		t.Fatal(err)
	}
	puts := regexp.MustCompile(`(?m)^capstan_store_writes_total\{kind="clusters",op="put"\} (\d+)$`)
	bytes := regexp.MustCompile(`(?m)^capstan_store_written_bytes_total\{kind="clusters"\} (\d+)$`)
	deadline := time.Now().Add(30 * time.Second)
	for {
		body := srv.Metrics(t)
		p, b := puts.FindStringSubmatch(body), bytes.FindStringSubmatch(body)
		if p != nil && b != nil {
			n, _ := strconv.Atoi(p[1])
			size, _ := strconv.Atoi(b[1])
			if n < 1 || size < len(`{"clusterName":"counted"}`) {
				t.Fatalf("clusters: %d puts of %d bytes after a CreateCluster", n, size)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no store writes of kind clusters in /metrics:\n%s", body)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
