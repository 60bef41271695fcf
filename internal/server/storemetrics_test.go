package server_test

import (
	"context"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ecs"
	"github.com/aws/aws-sdk-go-v2/service/ecs/types"

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

// TestMetricsCountReconciles: a service created is reconciled by the
// services controller, and /metrics and Reconciles say so.
func TestMetricsCountReconciles(t *testing.T) {
	ctx := context.Background()
	srv := testenv.StartServer(t, t.TempDir())
	c := srv.ECS()
	if _, err := c.CreateCluster(ctx, &ecs.CreateClusterInput{ClusterName: aws.String("busy")}); err != nil {
		t.Fatal(err)
	}
	td, err := c.RegisterTaskDefinition(ctx, &ecs.RegisterTaskDefinitionInput{Family: aws.String("web"),
		ContainerDefinitions: []types.ContainerDefinition{{Name: aws.String("web"), Image: aws.String("busybox"), Memory: aws.Int32(64)}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.CreateService(ctx, &ecs.CreateServiceInput{Cluster: aws.String("busy"), ServiceName: aws.String("web"),
		TaskDefinition: td.TaskDefinition.TaskDefinitionArn, DesiredCount: aws.Int32(0)}); err != nil {
		t.Fatal(err)
	}
	passes := regexp.MustCompile(`(?m)^capstan_reconciles_total\{controller="services"\} (\d+)$`)
	deadline := time.Now().Add(30 * time.Second)
	for {
		body := srv.Metrics(t)
		if m := passes.FindStringSubmatch(body); m != nil && m[1] != "0" {
			if st := srv.Reconciles()["services"]; st.Passes < 1 || st.Seconds <= 0 {
				t.Fatalf("Reconciles: %+v after /metrics counted %s", st, m[1])
			}
			if !strings.Contains(body, `capstan_reconcile_seconds_total{controller="services"}`) {
				t.Fatalf("no reconcile time on /metrics:\n%s", body)
			}
			for _, m := range []string{"capstan_store_cache_waits_total", "capstan_store_cache_wait_seconds_total"} {
				if !regexp.MustCompile(`(?m)^` + m + ` [0-9.e+-]+$`).MatchString(body) {
					t.Fatalf("no %s on /metrics:\n%s", m, body)
				}
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no services reconcile counted on /metrics:\n%s", body)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
