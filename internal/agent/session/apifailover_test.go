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

// TestAPIFailover: the agent's registration skips a server that refuses,
// one that takes the request and dies, and one that answers a server
// error, and reaches a live one with a
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

	// A server cut off from etcd answers, with a server error.
	var cutHits atomic.Int64
	cut := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		cutHits.Add(1)
		w.Header().Set("Content-Type", "application/x-amz-json-1.1")
		w.Header().Set("X-Amzn-ErrorType", "ServerException")
		w.WriteHeader(http.StatusInternalServerError)
		w.Write([]byte(`{"__type":"ServerException","message":"the store (etcd) is unavailable"}`))
	}))
	t.Cleanup(cut.Close)

	eps := []string{refused, "http://" + dropping.Addr().String(), cut.URL, live.URL}
	c := ecs.New(ecs.Options{Region: "us-east-1", BaseEndpoint: aws.String(eps[0]),
		Credentials: credentials.NewStaticCredentialsProvider("AK", "s", ""),
		APIOptions:  []func(*middleware.Stack) error{session.APIFailover(eps)}})
	out, err := c.RegisterContainerInstance(context.Background(), &ecs.RegisterContainerInstanceInput{Cluster: aws.String("c")})
	if err != nil {
		t.Fatalf("register through a refused, a dropping and a failing server: %v", err)
	}
	if aws.ToString(out.ContainerInstance.ContainerInstanceArn) == "" || hits.Load() != 1 || cutHits.Load() == 0 {
		t.Fatalf("live server hit %d times (failing one %d), answer %+v", hits.Load(), cutHits.Load(), out.ContainerInstance)
	}
	if h, _ := signedHost.Load().(string); !strings.HasPrefix(h, strings.TrimPrefix(live.URL, "http://")+" AWS4-HMAC-SHA256 ") {
		t.Fatalf("request reached the live server as %q", h)
	}
	if session.APIFailover(eps[:1]) != nil {
		t.Fatal("a single endpoint needs no failover")
	}
}
