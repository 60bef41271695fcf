// Package testenv starts real Capstan components for tests: a server with
// embedded etcd in a temporary directory, and real AWS SDK clients for it.
package testenv

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/ecs"

	"github.com/capstanhq/capstan/internal/server"
)

// Server is a running control plane for one test.
type Server struct {
	*server.Server
	Config server.Config
	URL    string
	once   sync.Once
}

// StartServer starts a server on a free loopback port with a fresh data
// directory (or dataDir, to restart on existing state); it stops at cleanup.
func StartServer(t testing.TB, dataDir string) *Server {
	t.Helper()
	return StartServerAt(t, dataDir, "127.0.0.1:0")
}

// StartServerAt is StartServer on a given listen address (to restart a
// server where its agents expect it).
func StartServerAt(t testing.TB, dataDir, listen string) *Server {
	t.Helper()
	return StartServerWith(t, func(c *server.Config) { c.DataDir, c.Listen = dataDir, listen })
}

// StartServerWith starts a server with the test defaults changed by edit.
// Managed instances are off ("none") unless edit sets a provisioner.
func StartServerWith(t testing.TB, edit func(*server.Config)) *Server {
	t.Helper()
	cfg := server.Config{
		Listen:      "127.0.0.1:0",
		Region:      "us-east-1",
		AccountID:   "123456789012",
		AdminKeyID:  "AKIDCAPSTANTEST",
		AdminSecret: "capstan-test-secret",
		Provisioner: "none",
	}
	if edit != nil {
		edit(&cfg)
	}
	if cfg.DataDir == "" {
		cfg.DataDir = t.TempDir()
	}
	if os.Getenv("CAPSTAN_TEST_LOG") != "" {
		cfg.Log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	s, err := server.Start(ctx, cfg)
	if err != nil {
		t.Fatalf("start server: %v", err)
	}
	ts := &Server{Server: s, Config: cfg, URL: s.URL}
	t.Cleanup(ts.Stop)
	return ts
}

// Stop closes the server; stopping twice is harmless.
func (s *Server) Stop() {
	s.once.Do(func() { s.Close() })
}

// Restart stops the server and starts a new one on the same data dir.
func (s *Server) Restart(t testing.TB) *Server {
	t.Helper()
	s.Stop()
	cfg := s.Config
	return StartServerWith(t, func(c *server.Config) { *c = cfg; c.Listen = s.Addr })
}

var (
	binOnce sync.Once
	binPath string
	binErr  error
)

// CapstanBinary builds cmd/capstan once per test process, statically (so
// it can also serve as a container's program), and returns its path.
func CapstanBinary(t testing.TB) string {
	t.Helper()
	binOnce.Do(func() {
		dir, err := os.MkdirTemp("", "capstan-test-bin")
		if err != nil {
			binErr = err
			return
		}
		binPath = filepath.Join(dir, "capstan")
		cmd := exec.Command("go", "build", "-o", binPath, "github.com/capstanhq/capstan/cmd/capstan")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			binErr = fmt.Errorf("go build capstan: %v\n%s", err, out)
		}
	})
	if binErr != nil {
		t.Fatal(binErr)
	}
	return binPath
}

// ECS returns a real aws-sdk-go-v2 ECS client signed with the admin credential.
func (s *Server) ECS() *ecs.Client {
	return s.ECSWith(s.Config.AdminKeyID, s.Config.AdminSecret)
}

// ECSWith returns an ECS client signed with the given credential.
func (s *Server) ECSWith(keyID, secret string) *ecs.Client {
	return ecs.New(ecs.Options{
		Region:       "us-east-1",
		BaseEndpoint: aws.String(s.URL),
		Credentials:  credentials.NewStaticCredentialsProvider(keyID, secret, ""),
		Retryer:      Retryer(),
	}, func(o *ecs.Options) {
		if s.TLS != nil {
			o.HTTPClient = s.HTTPClient()
		}
	})
}

// HTTPClient is a client for the server's URL: one that trusts its
// generated certificate when it serves TLS.
func (s *Server) HTTPClient() *http.Client {
	if s.TLS == nil || s.TLS.CABundle == "" {
		return http.DefaultClient
	}
	pem, err := os.ReadFile(s.TLS.CABundle)
	if err != nil {
		panic(err) // the server just wrote it
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pem)
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	return &http.Client{Transport: tr}
}

// Metrics returns the server's /metrics page.
func (s *Server) Metrics(t testing.TB) string {
	t.Helper()
	resp, err := s.HTTPClient().Get(s.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// Env returns environment variables that point the AWS CLI at the server.
func (s *Server) Env() []string {
	return append(os.Environ(),
		"AWS_ACCESS_KEY_ID="+s.Config.AdminKeyID,
		"AWS_SECRET_ACCESS_KEY="+s.Config.AdminSecret,
		"AWS_DEFAULT_REGION=us-east-1",
		"AWS_PAGER=",
		"AWS_CONFIG_FILE=/dev/null",
		"AWS_SHARED_CREDENTIALS_FILE=/dev/null",
	)
}
