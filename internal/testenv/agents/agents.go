// Package agents starts real `capstan agent`s in-process for tests, against
// a testenv server and the real Docker Engine. It is apart from testenv so
// that the agent's own packages can use testenv without an import cycle.
package agents

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/capstanhq/capstan/internal/agent"
	"github.com/capstanhq/capstan/internal/agent/config"
	"github.com/capstanhq/capstan/internal/agent/daemonnet"
	"github.com/capstanhq/capstan/internal/ops"
	"github.com/capstanhq/capstan/internal/runtime"
	"github.com/capstanhq/capstan/internal/testenv"
)

// Agent is an in-process `capstan agent` for one test.
type Agent struct {
	agent.Endpoints
	DataDir string
	Env     map[string]string
	cancel  context.CancelFunc
	done    chan error

	mu        sync.Mutex
	instances []string // every instance it registered, for cleanup
}

// Credential mints an agent credential on the server.
func Credential(t testing.TB, s *testenv.Server, cluster string) (key, secret string) {
	t.Helper()
	out, err := s.Service.CreateAgentCredential(context.Background(), &ops.CreateAgentCredentialRequest{Cluster: cluster})
	if err != nil {
		t.Fatalf("mint agent credential: %v", err)
	}
	return out.AccessKeyID, out.SecretAccessKey
}

// EnvFor is Env for an instance of a capacity provider: its credential
// binds the instance to it, so the provider's daemons run there.
func EnvFor(t testing.TB, s *testenv.Server, cluster, capacityProvider, dataDir string) map[string]string {
	t.Helper()
	out, err := s.Service.CreateAgentCredential(context.Background(), &ops.CreateAgentCredentialRequest{Cluster: cluster, CapacityProvider: capacityProvider})
	if err != nil {
		t.Fatalf("mint agent credential: %v", err)
	}
	env := Env(t, s, cluster, dataDir)
	env["AWS_ACCESS_KEY_ID"], env["AWS_SECRET_ACCESS_KEY"] = out.AccessKeyID, out.SecretAccessKey
	return env
}

// Env is the environment a test agent starts with; tests may change
// it before StartAgentEnv.
func Env(t testing.TB, s *testenv.Server, cluster, dataDir string) map[string]string {
	key, secret := Credential(t, s, cluster)
	env := map[string]string{
		"CAPSTAN_ENDPOINT":                      s.URL,
		"ECS_CLUSTER":                           cluster,
		"ECS_DATADIR":                           dataDir,
		"AWS_ACCESS_KEY_ID":                     key,
		"AWS_SECRET_ACCESS_KEY":                 secret,
		"AWS_REGION":                            "us-east-1",
		"CAPSTAN_METRICS_ADDR":                  "127.0.0.1:0",
		"CAPSTAN_METADATA_ADDR":                 "0.0.0.0:0",
		"ECS_IMAGE_PULL_BEHAVIOR":               "prefer-cached",
		"ECS_CONTAINER_STOP_TIMEOUT":            "5s",
		"CAPSTAN_INSTANCE_CPU":                  "2048",
		"CAPSTAN_INSTANCE_MEMORY":               "2048",
		"ECS_DISABLE_IMAGE_CLEANUP":             "true",
		"ECS_ENGINE_TASK_CLEANUP_WAIT_DURATION": "1m",
	}
	if s.TLS != nil && s.TLS.CABundle != "" {
		env["CAPSTAN_CA_BUNDLE"] = s.TLS.CABundle
	}
	return env
}

// Start starts an agent of cluster against the server, using the
// real Docker runtime; it stops (leaving its containers) at cleanup.
func Start(t testing.TB, s *testenv.Server, cluster string) *Agent {
	t.Helper()
	return StartEnv(t, Env(t, s, cluster, t.TempDir()), nil)
}

// StartEnv starts an agent with the given environment; rt nil means Docker.
func StartEnv(t testing.TB, env map[string]string, rt runtime.Runtime) *Agent {
	t.Helper()
	if rt == nil {
		rt = testenv.RequireDocker(t)
	}
	cfg, err := config.Load(nil, func(k string) string { return env[k] }, "")
	if err != nil {
		t.Fatalf("agent config: %v", err)
	}
	var log *slog.Logger
	if os.Getenv("CAPSTAN_TEST_LOG") != "" {
		log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	} else {
		log = slog.New(slog.DiscardHandler)
	}
	ctx, cancel := context.WithCancel(context.Background())
	a := &Agent{DataDir: cfg.DataDir, Env: env, cancel: cancel, done: make(chan error, 1)}
	ready := make(chan agent.Endpoints, 1)
	go func() {
		a.done <- agent.Run(ctx, cfg, agent.Options{Runtime: rt, Log: log, Ready: func(e agent.Endpoints) {
			a.mu.Lock()
			a.instances = append(a.instances, e.InstanceArn)
			a.mu.Unlock()
			select {
			case ready <- e:
			default: // registered anew later (after a deregistration)
			}
		}})
	}()
	select {
	case a.Endpoints = <-ready:
	case err := <-a.done:
		cancel()
		t.Fatalf("agent exited during start: %v", err)
	case <-time.After(60 * time.Second):
		cancel()
		t.Fatal("agent not ready after 60s")
	}
	if drt, ok := rt.(daemonnet.Runtime); ok {
		// Runs after Stop: an agent leaves its network and namespace
		// holder behind by design, a test must not.
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			a.mu.Lock()
			instances := a.instances
			a.mu.Unlock()
			for _, inst := range instances {
				// Task containers too: a test's tasks must not outlive it.
				if cs, err := rt.List(ctx, map[string]string{"com.capstan.instance": inst}); err == nil {
					for _, c := range cs {
						rt.Remove(ctx, c.ID)
					}
				}
				if err := daemonnet.Remove(ctx, drt, inst); err != nil {
					t.Logf("cleanup: daemon networking of %s: %v", inst, err)
				}
			}
		})
	}
	t.Cleanup(a.Stop)
	// Ready means registered; tasks are placed only once the session is up.
	deadline := time.Now().Add(30 * time.Second)
	for !a.connected() {
		if time.Now().After(deadline) {
			t.Fatal("agent session not connected after 30s")
		}
		time.Sleep(20 * time.Millisecond)
	}
	return a
}

// connected reads the agent's own session gauge.
func (a *Agent) connected() bool {
	resp, err := http.Get("http://" + a.Metrics + "/metrics")
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return strings.Contains(string(b), "\ncapstan_agent_session_connected 1")
}

// Stop ends the agent without stopping its containers; stopping twice is harmless.
func (a *Agent) Stop() {
	if a.cancel == nil {
		return
	}
	a.cancel()
	<-a.done
	a.cancel = nil
}
