package daemonnet_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"log/slog"
	"maps"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/capstanhq/capstan/internal/agent/daemonnet"
	"github.com/capstanhq/capstan/internal/agent/engine"
	"github.com/capstanhq/capstan/internal/api/shapes"
	"github.com/capstanhq/capstan/internal/protocol"
	"github.com/capstanhq/capstan/internal/runtime"
	"github.com/capstanhq/capstan/internal/runtime/docker"
	"github.com/capstanhq/capstan/internal/testenv"
)

var _ daemonnet.Runtime = (*docker.Runtime)(nil)

const (
	cluster = "arn:aws:ecs:us-east-1:123456789012:cluster/test"
	wait    = 60 * time.Second
)

// env is one instance on the real Docker Engine: its daemon networking and
// a task engine wired to it, as the agent wires them.
type env struct {
	t        *testing.T
	rt       *docker.Runtime
	image    string
	instance string
	mgr      *daemonnet.Manager
	setup    daemonnet.Setup
	eng      *engine.Engine
	store    *memStore
	stopEng  func()
	stopMgr  func() // stops the manager's Run; more calls do nothing

	mu      sync.Mutex
	desired []protocol.Task
	states  map[string][]protocol.TaskState
	changed chan struct{}
}

func testLog() *slog.Logger {
	if os.Getenv("CAPSTAN_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.DiscardHandler)
}

func randomID() string {
	b := make([]byte, 6)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// newEnv sets up daemon networking for a fresh instance (pause image from
// a CGO_ENABLED=0 build of capstan), with the host's firewall as the agent
// has it, and starts an engine on it. Everything goes at cleanup.
func newEnv(t *testing.T) *env {
	t.Helper()
	return newEnvFirewall(t, requireFirewall(t))
}

// newEnvFirewall is newEnv with the firewall given; nil puts bridge tasks
// on the instance network.
func newEnvFirewall(t *testing.T, fw daemonnet.Firewall) *env {
	t.Helper()
	e := newEnvPause(t, testenv.CapstanBinary(t), fw)
	if e.setup.Degraded != "" {
		t.Fatalf("no shared daemon namespace: %s", e.setup.Degraded)
	}
	return e
}

// requireFirewall is the host's iptables; under CI, a host without one
// fails the test.
func requireFirewall(t *testing.T) *daemonnet.IPTables {
	t.Helper()
	testenv.RequireDocker(t)
	fw, err := daemonnet.HostFirewall()
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("the host's iptables (root, Docker's DOCKER-USER chain) is required in CI: %v", err)
		}
		t.Skipf("no usable iptables: %v", err)
	}
	return fw
}

// chainRules is Docker's DOCKER-USER chain as the host's iptables lists it.
func chainRules(t *testing.T) string {
	t.Helper()
	out, err := exec.Command(requireFirewall(t).Bin, "-w", "-S", "DOCKER-USER").CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v", out, err)
	}
	return string(out)
}

// newEnvPause is newEnv with the pause binary and firewall given.
func newEnvPause(t *testing.T, pause string, fw daemonnet.Firewall) *env {
	t.Helper()
	rt := testenv.RequireDocker(t)
	e := &env{t: t, rt: rt, image: testenv.BusyboxImage(t), states: map[string][]protocol.TaskState{}, changed: make(chan struct{}, 1),
		instance: "arn:aws:ecs:us-east-1:123456789012:container-instance/test/" + randomID()}
	// Cleanups run last first: the engine and manager stop, the
	// containers go, then the holder and the network.
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := daemonnet.Remove(ctx, rt, e.instance); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	})
	t.Cleanup(func() { testenv.RemoveLabeled(t, rt, map[string]string{engine.LabelInstance: e.instance}) })

	m, err := daemonnet.New(daemonnet.Config{Runtime: rt, InstanceArn: e.instance, Cluster: cluster,
		PauseBinary: pause, StopTimeout: 2 * time.Second, Firewall: fw, Log: testLog()})
	if err != nil {
		t.Fatal(err)
	}
	e.mgr = m
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	e.setup, err = m.Ensure(ctx)
	cancel()
	if err != nil {
		t.Fatal(err)
	}

	e.store = newMemStore()
	rctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() {
		if err := m.Run(rctx); err != nil {
			t.Errorf("daemon networking: %v", err)
		}
	})
	e.stopMgr = sync.OnceFunc(func() { stop(); wg.Wait() })
	t.Cleanup(e.stopMgr)
	e.startEngine()
	t.Cleanup(func() { e.stopEngine() })
	return e
}

// startEngine starts a task engine on the instance, as the agent wires it,
// with the records of the one before.
func (e *env) startEngine() {
	e.t.Helper()
	var tn engine.TaskNetwork
	if e.setup.InstanceNetwork != "" {
		tn = e.mgr
	}
	eng, err := engine.New(engine.Config{Runtime: e.rt, Store: e.store, Cluster: cluster, ContainerInstanceArn: e.instance,
		StopTimeout: 2 * time.Second, ReconcileInterval: time.Second, Log: testLog(),
		DaemonNetworkMode: e.setup.DaemonNetworkMode, BridgeNetwork: e.setup.BridgeNetwork, ExtraHosts: e.setup.ExtraHosts(),
		TaskNetwork: tn})
	if err != nil {
		e.t.Fatal(err)
	}
	e.eng = eng
	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() {
		if err := eng.Run(ctx); err != nil {
			e.t.Errorf("engine: %v", err)
		}
	})
	wg.Go(func() { e.collect(eng) })
	e.stopEng = func() { stop(); wg.Wait() }
}

// stopEngine stops the engine as an agent that exits does: its containers
// keep running.
func (e *env) stopEngine() {
	if e.stopEng != nil {
		e.stopEng()
		e.stopEng = nil
	}
}

func (e *env) collect(eng *engine.Engine) {
	for st := range eng.Changes() {
		e.mu.Lock()
		e.states[st.Arn] = append(e.states[st.Arn], st)
		e.mu.Unlock()
		select {
		case e.changed <- struct{}{}:
		default:
		}
	}
}

// run adds tasks to the desired set.
func (e *env) run(ts ...protocol.Task) {
	e.mu.Lock()
	e.desired = append(e.desired, ts...)
	d := append([]protocol.Task(nil), e.desired...)
	e.mu.Unlock()
	e.eng.SetDesired(d)
}

// waitStatus waits for arn to report status and returns that state.
func (e *env) waitStatus(arn, status string) protocol.TaskState {
	e.t.Helper()
	deadline := time.After(wait)
	for {
		e.mu.Lock()
		sts := e.states[arn]
		e.mu.Unlock()
		for _, st := range sts {
			if st.LastStatus == status {
				return st
			}
			if st.LastStatus == engine.StatusStopped {
				j, _ := json.Marshal(st)
				e.t.Fatalf("%s stopped while waiting for %s: %s", arn, status, j)
			}
		}
		select {
		case <-e.changed:
		case <-time.After(50 * time.Millisecond):
		case <-deadline:
			j, _ := json.Marshal(sts)
			e.t.Fatalf("%s not %s after %s: %s", arn, status, wait, j)
		}
	}
}

// container inspects the runtime container of one container of st.
func (e *env) container(st protocol.TaskState, name string) runtime.Container {
	e.t.Helper()
	for _, c := range st.Containers {
		if c.Name == name {
			rc, err := e.rt.Inspect(e.t.Context(), c.RuntimeID)
			if err != nil {
				e.t.Fatal(err)
			}
			return rc
		}
	}
	e.t.Fatalf("no container %s in %+v", name, st)
	return runtime.Container{}
}

// eventually polls cond until it holds or the wait is over.
func eventually(t *testing.T, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(wait)
	for {
		ok, last := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not after %s; last: %s", what, wait, last)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// exec runs cmd in a container and returns its output, or an error text.
func (e *env) exec(id string, cmd ...string) (bool, string) {
	code, out, err := e.rt.Exec(e.t.Context(), id, cmd)
	if err != nil {
		return false, err.Error()
	}
	return code == 0, string(out)
}

// httpGet fetches / from host:port inside container id with busybox nc
// (busybox wget crashes in name lookups of a static glibc build).
func (e *env) httpGet(id, host, port string) (bool, string) {
	ok, out := e.exec(id, "sh", "-c", `printf 'GET / HTTP/1.0\r\n\r\n' | nc -w 2 `+host+` `+port)
	return ok && strings.Contains(out, "200 OK"), out
}

// runRaw starts a busybox container on network outside the engine,
// labelled for the instance's cleanup, and returns its ID.
func (e *env) runRaw(name, network string, cmd ...string) string {
	e.t.Helper()
	id, err := e.rt.Create(e.t.Context(), runtime.ContainerSpec{Name: "capstan-test-" + name + "-" + randomID(), Image: e.image, Cmd: cmd,
		NetworkMode: network, Labels: map[string]string{engine.LabelInstance: e.instance}})
	if err != nil {
		e.t.Fatal(err)
	}
	if err := e.rt.Start(e.t.Context(), id); err != nil {
		e.t.Fatal(err)
	}
	return id
}

// otherNetwork makes a Docker network that is none of the instance's,
// removed at cleanup.
func otherNetwork(t *testing.T, e *env) string {
	t.Helper()
	name := "capstan-test-other-" + randomID()
	for third := 100; third < 170; third++ {
		subnet := netip.PrefixFrom(netip.AddrFrom4([4]byte{169, 254, byte(third), 0}), 24)
		id, err := e.rt.CreateNetwork(t.Context(), runtime.NetworkSpec{Name: name, Subnet: subnet, Gateway: subnet.Addr().Next()})
		if errors.Is(err, runtime.ErrAddressInUse) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			testenv.RemoveLabeled(t, e.rt, map[string]string{engine.LabelInstance: e.instance})
			e.rt.RemoveNetwork(context.Background(), id)
		})
		return name
	}
	t.Fatal("no free subnet in 169.254.100.0-169.254.169.0")
	return ""
}

// Task builders.

func task(kind, mode string, cs ...shapes.ContainerDefinition) protocol.Task {
	id := randomID()
	return protocol.Task{
		Arn:           "arn:aws:ecs:us-east-1:123456789012:task/test/" + id,
		ClusterArn:    cluster,
		Kind:          kind,
		DesiredStatus: engine.StatusRunning,
		Definition: shapes.TaskDefinition{Family: kind + "-" + id, Revision: new(int32(1)), NetworkMode: mode,
			ContainerDefinitions: cs},
		CreatedAt: time.Now(),
		Version:   1,
	}
}

func daemonTask(cs ...shapes.ContainerDefinition) protocol.Task {
	return task(protocol.KindDaemon, "daemon", cs...)
}

func (e *env) ctr(name string, cmd ...string) shapes.ContainerDefinition {
	return shapes.ContainerDefinition{Name: name, Image: e.image, Command: cmd, Essential: new(true), Memory: new(int32(64))}
}

// httpd serves body on port from a busybox httpd.
func (e *env) httpd(name, port, body string) shapes.ContainerDefinition {
	return e.ctr(name, "sh", "-c", "mkdir -p /www && echo "+body+" > /www/index.html && exec httpd -f -p "+port+" -h /www")
}

// memStore keeps task records in memory.
type memStore struct {
	mu   sync.Mutex
	data map[string][]byte
}

func newMemStore() *memStore { return &memStore{data: map[string][]byte{}} }

func (s *memStore) PutTask(arn string, data []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.data[arn] = append([]byte(nil), data...)
	return nil
}

func (s *memStore) DeleteTask(arn string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.data, arn)
	return nil
}

func (s *memStore) Tasks() (map[string][]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return maps.Clone(s.data), nil
}
