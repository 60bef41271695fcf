package session_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ecs"
	"github.com/aws/aws-sdk-go-v2/service/ecs/types"

	"github.com/capstanhq/capstan/internal/agent/session"
	"github.com/capstanhq/capstan/internal/ops"
	"github.com/capstanhq/capstan/internal/server"
	"github.com/capstanhq/capstan/internal/testenv"
)

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// The session's websocket goes over TLS with the CA bundle; with another
// CA's bundle it is refused, the error names the server and the problem,
// and the client keeps retrying.
func TestSessionOverTLS(t *testing.T) {
	ctx := context.Background()
	srv := testenv.StartServerWith(t, func(c *server.Config) { c.TLSSelfSigned = true })
	other := testenv.StartServerWith(t, func(c *server.Config) { c.TLSSelfSigned = true })
	r := &rig{srv: srv, admin: srv.ECS()}
	if _, err := r.admin.CreateCluster(ctx, &ecs.CreateClusterInput{ClusterName: aws.String("edge")}); err != nil {
		t.Fatal(err)
	}
	cred, err := srv.Service.CreateAgentCredential(ctx, &ops.CreateAgentCredentialRequest{Cluster: "edge"})
	if err != nil {
		t.Fatal(err)
	}
	r.cred = *cred
	out, err := srv.ECSWith(cred.AccessKeyID, cred.SecretAccessKey).RegisterContainerInstance(ctx, &ecs.RegisterContainerInstanceInput{
		Cluster: aws.String("edge"),
		TotalResources: []types.Resource{
			{Name: aws.String("CPU"), Type: aws.String("INTEGER"), IntegerValue: 1024},
			{Name: aws.String("MEMORY"), Type: aws.String("INTEGER"), IntegerValue: 1024},
		},
		VersionInfo: &types.VersionInfo{AgentVersion: aws.String("test"), DockerVersion: aws.String("none")},
	})
	if err != nil {
		t.Fatal(err)
	}
	r.instance = aws.ToString(out.ContainerInstance.ContainerInstanceArn)

	run := func(bundle string) (*lockedBuffer, func()) {
		hc, err := session.NewHTTPClient(bundle)
		if err != nil {
			t.Fatal(err)
		}
		var logs lockedBuffer
		cctx, cancel := context.WithCancel(ctx)
		c := session.New(session.Config{Endpoint: srv.URL, CABundle: bundle, AccessKeyID: cred.AccessKeyID, SecretKey: cred.SecretAccessKey,
			Region: "us-east-1", InstanceArn: r.instance, AgentVersion: "test", Store: openDB(t, t.TempDir()), Engine: newFakeEngine(),
			HTTPClient: hc, Log: slog.New(slog.NewTextHandler(&logs, nil)), MinBackoff: 50 * time.Millisecond, MaxBackoff: 200 * time.Millisecond})
		done := make(chan error, 1)
		go func() { done <- c.Run(cctx) }()
		return &logs, func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("session ended with %v", err)
			}
		}
	}

	logs, stop := run(other.TLS.CABundle)
	want := "server " + srv.URL + ": its certificate is not trusted: x509: certificate signed by unknown authority; checked against the CA bundle " +
		other.TLS.CABundle
	eventually(t, 20*time.Second, "two refused attempts", func() bool { return strings.Count(logs.String(), want) >= 2 })
	if r.connected(t) {
		t.Fatal("connected through a certificate its bundle does not sign")
	}
	stop()

	_, stop = run(srv.TLS.CABundle)
	defer stop()
	eventually(t, 20*time.Second, "session over TLS", func() bool { return r.connected(t) })
}

func TestExplainTLS(t *testing.T) {
	plain := httptest.NewServer(nil)
	defer plain.Close()
	hc, err := session.NewHTTPClient(testenv.StartServerWith(t, func(c *server.Config) { c.TLSSelfSigned = true }).TLS.CABundle)
	if err != nil {
		t.Fatal(err)
	}
	endpoint := "https://" + plain.Listener.Addr().String()
	_, err = hc.Get(endpoint)
	var ce *session.CertError
	if err = session.ExplainTLS(err, endpoint, "ca.pem"); !errors.As(err, &ce) || err.Error() != "server "+endpoint+" does not speak TLS: is its URL http://?" {
		t.Fatalf("https to a plain server: %v", err)
	}
	if err := session.ExplainTLS(errors.New("connection refused"), endpoint, ""); err.Error() != "connection refused" {
		t.Fatalf("other errors pass: %v", err)
	}
	if _, err := session.NewHTTPClient("/nonexistent/ca.pem"); err == nil || !strings.Contains(err.Error(), "cannot read the CA bundle") {
		t.Fatalf("missing bundle: %v", err)
	}
}
