package session_test

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/ecs"
	"github.com/aws/smithy-go/middleware"

	"github.com/capstanhq/capstan/internal/agent/session"
)

// TestAPIFailover: the agent's registration skips a server that refuses
// and one that takes the request and dies, and reaches a live one with a
// request signed for that server's host.
func TestAPIFailover(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	refused := "http://" + l.Addr().String()
	l.Close()
	dropping, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dropping.Close() })
	go func() {
		for {
			c, err := dropping.Accept()
			if err != nil {
				return
			}
			c.Read(make([]byte, 1))
			c.Close()
		}
	}()
	var hits atomic.Int64
	var signedHost atomic.Value
	live := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		signedHost.Store(r.Host + " " + r.Header.Get("Authorization"))
		w.Header().Set("Content-Type", "application/x-amz-json-1.1")
		w.Write([]byte(`{"containerInstance":{"containerInstanceArn":"arn:aws:ecs:us-east-1:123456789012:container-instance/c/i"}}`))
	}))
	t.Cleanup(live.Close)

	eps := []string{refused, "http://" + dropping.Addr().String(), live.URL}
	c := ecs.New(ecs.Options{Region: "us-east-1", BaseEndpoint: aws.String(eps[0]),
		Credentials: credentials.NewStaticCredentialsProvider("AK", "s", ""),
		APIOptions:  []func(*middleware.Stack) error{session.APIFailover(eps)}})
	out, err := c.RegisterContainerInstance(context.Background(), &ecs.RegisterContainerInstanceInput{Cluster: aws.String("c")})
	if err != nil {
		t.Fatalf("register through a refused and a dropping server: %v", err)
	}
	if aws.ToString(out.ContainerInstance.ContainerInstanceArn) == "" || hits.Load() != 1 {
		t.Fatalf("live server hit %d times, answer %+v", hits.Load(), out.ContainerInstance)
	}
	if h, _ := signedHost.Load().(string); !strings.HasPrefix(h, strings.TrimPrefix(live.URL, "http://")+" AWS4-HMAC-SHA256 ") {
		t.Fatalf("request reached the live server as %q", h)
	}
	if session.APIFailover(eps[:1]) != nil {
		t.Fatal("a single endpoint needs no failover")
	}
}
