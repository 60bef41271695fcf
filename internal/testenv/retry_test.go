package testenv

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/ecs"
)

// TestRetryerResendsOnlyLostResponses: a response cut by a TCP reset is
// asked for again; an error the server answered with is not.
func TestRetryerResendsOnlyLostResponses(t *testing.T) {
	var calls atomic.Int32
	var fail atomic.Bool
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := calls.Add(1)
		if fail.Load() {
			w.Header().Set("X-Amzn-ErrorType", "ServerException")
			w.WriteHeader(500)
			w.Write([]byte(`{"__type":"ServerException","message":"no"}`))
			return
		}
		if n == 1 {
			// Headers and half a body, then a reset.
			conn, buf, err := w.(http.Hijacker).Hijack()
			if err != nil {
				t.Error(err)
				return
			}
			buf.WriteString("HTTP/1.1 200 OK\r\nContent-Type: application/x-amz-json-1.1\r\nContent-Length: 40\r\n\r\n{\"clusters\":[")
			buf.Flush()
			conn.(*net.TCPConn).SetLinger(0)
			conn.Close()
			return
		}
		w.Header().Set("Content-Type", "application/x-amz-json-1.1")
		w.Write([]byte(`{"clusters":[{"clusterName":"a"}],"failures":[]}`))
	}))
	defer srv.Close()
	c := ecs.New(ecs.Options{Region: "us-east-1", BaseEndpoint: aws.String(srv.URL),
		Credentials: credentials.NewStaticCredentialsProvider("k", "s", ""), Retryer: Retryer()})
	out, err := c.DescribeClusters(context.Background(), &ecs.DescribeClustersInput{})
	if err != nil {
		t.Fatalf("a reset response was not retried: %v", err)
	}
	if len(out.Clusters) != 1 || calls.Load() != 2 {
		t.Fatalf("clusters %d after %d calls", len(out.Clusters), calls.Load())
	}
	fail.Store(true)
	calls.Store(0)
	if _, err := c.DescribeClusters(context.Background(), &ecs.DescribeClustersInput{}); err == nil {
		t.Fatal("a ServerException came back as success")
	}
	if calls.Load() != 1 {
		t.Fatalf("a ServerException was sent %d times", calls.Load())
	}
}
