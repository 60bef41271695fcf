package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"net/netip"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/ecs"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/capstanhq/capstan/internal/agent/config"
	"github.com/capstanhq/capstan/internal/agent/daemonnet"
	"github.com/capstanhq/capstan/internal/agent/engine"
	"github.com/capstanhq/capstan/internal/agent/resources"
	"github.com/capstanhq/capstan/internal/agent/state"
	"github.com/capstanhq/capstan/internal/api"
	"github.com/capstanhq/capstan/internal/api/shapes"
	"github.com/capstanhq/capstan/internal/auth"
	"github.com/capstanhq/capstan/internal/fault"
	"github.com/capstanhq/capstan/internal/protocol"
	"github.com/capstanhq/capstan/internal/runtime"
	"github.com/capstanhq/capstan/internal/runtime/sim"
)

var discard = slog.New(slog.DiscardHandler)

const (
	arnX = "arn:aws:ecs:us-east-1:123456789012:container-instance/prod/0000000000000000000000000000000x"
	arnY = "arn:aws:ecs:us-east-1:123456789012:container-instance/prod/0000000000000000000000000000000y"
)

// controlPlane answers RegisterContainerInstance as the test says, behind
// the real API handler and SigV4 verifier, and keeps every request.
type controlPlane struct {
	answer func(n int, req *shapes.RegisterContainerInstanceRequest) (*shapes.RegisterContainerInstanceResponse, error)

	mu   sync.Mutex
	reqs []shapes.RegisterContainerInstanceRequest
}

func (c *controlPlane) requests() []shapes.RegisterContainerInstanceRequest {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.reqs)
}

var agentCred = auth.Credential{AccessKeyID: "AKIDAGENTTEST", SecretAccessKey: "agent-secret", Role: auth.RoleAgent}

// startControl serves cp and returns what register needs to reach it: a
// configuration and an SDK client without retries of its own, so that
// every attempt is register's.
func startControl(t *testing.T, cp *controlPlane) (config.Config, *ecs.Client) {
	t.Helper()
	h := api.NewHandler(&auth.Verifier{Lookup: auth.NewStaticLookup(agentCred)}, func(context.Context, auth.Principal, string, any) (api.Checked, error) { return api.Checked{}, nil }, discard)
	api.Register(h, "RegisterContainerInstance", func(_ context.Context, req *shapes.RegisterContainerInstanceRequest) (*shapes.RegisterContainerInstanceResponse, error) {
		cp.mu.Lock()
		cp.reqs = append(cp.reqs, *req)
		n := len(cp.reqs)
		cp.mu.Unlock()
		return cp.answer(n, req)
	})
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	cfg := config.Config{Endpoint: srv.URL, Cluster: "prod", Region: "us-east-1", AccessKeyID: agentCred.AccessKeyID,
		SecretAccessKey: config.Secret(agentCred.SecretAccessKey), ReservedPortsUDP: []int{53}, InstanceAttributes: map[string]string{"stack": "blue"}}
	client := ecs.New(ecs.Options{Region: cfg.Region, BaseEndpoint: aws.String(cfg.Endpoint), Retryer: aws.NopRetryer{},
		Credentials: credentials.NewStaticCredentialsProvider(cfg.AccessKeyID, cfg.SecretAccessKey.Reveal(), "")})
	return cfg, client
}

func registered(arn string) (*shapes.RegisterContainerInstanceResponse, error) {
	return &shapes.RegisterContainerInstanceResponse{ContainerInstance: &shapes.ContainerInstance{ContainerInstanceArn: arn}}, nil
}

func openDB(t *testing.T) *state.DB {
	t.Helper()
	db, err := state.Open(filepath.Join(t.TempDir(), state.FileName))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// registerDeadline ends a register that retries what it should not
// (each retry waits longer), so that such a test fails instead of hanging.
const registerDeadline = 20 * time.Second

var (
	testCapacity = resources.Capacity{CPU: 2048, MemoryMiB: 4096, ReservedMemoryMiB: 512}
	testInfo     = runtime.Info{Version: "28.2.2", APIVersion: "1.47"}
)

// TestRegisterNewInstance: a data directory without an instance registers
// a new one with the instance's resources and attributes, and keeps the
// ARN it gets.
func TestRegisterNewInstance(t *testing.T) {
	cp := &controlPlane{answer: func(int, *shapes.RegisterContainerInstanceRequest) (*shapes.RegisterContainerInstanceResponse, error) {
		return registered(arnX)
	}}
	cfg, client := startControl(t, cp)
	db := openDB(t)
	arn, err := register(context.Background(), client, db, cfg, testCapacity, testInfo, discard)
	if err != nil || arn != arnX {
		t.Fatalf("register = %q, %v", arn, err)
	}
	if kept, _ := db.InstanceARN(); kept != arnX {
		t.Fatalf("data dir keeps %q, want %q", kept, arnX)
	}
	reqs := cp.requests()
	if len(reqs) != 1 {
		t.Fatalf("%d requests", len(reqs))
	}
	r := reqs[0]
	if r.ContainerInstanceArn != "" || r.Cluster != "prod" {
		t.Errorf("request names instance %q in cluster %q; want a new one in prod", r.ContainerInstanceArn, r.Cluster)
	}
	got := map[string]string{}
	for _, res := range r.TotalResources {
		switch {
		case res.IntegerValue != nil:
			got[res.Name] = fmt.Sprint(*res.IntegerValue)
		default:
			got[res.Name] = strings.Join(res.StringSetValue, ",")
		}
	}
	want := map[string]string{"CPU": "2048", "MEMORY": "3584", "PORTS": "22,2375,2376,51678,51679", "PORTS_UDP": "53"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("resources %v, want %v (memory less the reserve, the default reserved ports)", got, want)
	}
	attrs := map[string]string{}
	for _, a := range r.Attributes {
		attrs[a.Name] = a.Value
	}
	if attrs["capstan.agent-version"] != Version || attrs["stack"] != "blue" {
		t.Errorf("attributes %v", attrs)
	}
	if _, ok := attrs["ecs.capability.docker-remote-api.1.47"]; !ok {
		t.Errorf("attributes %v lack the Docker API capability", attrs)
	}
	if v := r.VersionInfo; v == nil || v.AgentVersion != Version || !strings.Contains(v.DockerVersion, "28.2.2") {
		t.Errorf("version info %+v", v)
	}
}

// TestRegisterKnownInstance: a data directory that holds an instance
// registers it again, by its ARN.
func TestRegisterKnownInstance(t *testing.T) {
	cp := &controlPlane{answer: func(_ int, req *shapes.RegisterContainerInstanceRequest) (*shapes.RegisterContainerInstanceResponse, error) {
		return registered(req.ContainerInstanceArn)
	}}
	cfg, client := startControl(t, cp)
	db := openDB(t)
	db.SetInstanceARN(arnX)
	arn, err := register(context.Background(), client, db, cfg, testCapacity, testInfo, discard)
	if err != nil || arn != arnX {
		t.Fatalf("register = %q, %v", arn, err)
	}
	if reqs := cp.requests(); len(reqs) != 1 || reqs[0].ContainerInstanceArn != arnX {
		t.Fatalf("requests %+v", reqs)
	}
}

// TestRegisterAfterDeregistration: the instance of the data directory was
// deregistered meanwhile; the agent registers a new one instead of
// retrying the old one forever.
func TestRegisterAfterDeregistration(t *testing.T) {
	cp := &controlPlane{answer: func(_ int, req *shapes.RegisterContainerInstanceRequest) (*shapes.RegisterContainerInstanceResponse, error) {
		if req.ContainerInstanceArn == arnX {
			// The control plane's wording, which the agent looks for.
			return nil, fault.ClientError("container instance %s was deregistered; register as a new instance (start the agent with a fresh data directory)", arnX)
		}
		return registered(arnY)
	}}
	cfg, client := startControl(t, cp)
	db := openDB(t)
	db.SetInstanceARN(arnX)
	ctx, cancel := context.WithTimeout(context.Background(), registerDeadline)
	defer cancel()
	arn, err := register(ctx, client, db, cfg, testCapacity, testInfo, discard)
	if err != nil || arn != arnY {
		t.Fatalf("register = %q, %v; want the new instance %s", arn, err, arnY)
	}
	if kept, _ := db.InstanceARN(); kept != arnY {
		t.Fatalf("data dir keeps %q", kept)
	}
	reqs := cp.requests()
	if len(reqs) != 2 || reqs[0].ContainerInstanceArn != arnX || reqs[1].ContainerInstanceArn != "" {
		t.Fatalf("requests for instances %q; want the old one, then a new one", arns(reqs))
	}
}

// TestRegisterGivesUp: refusals that no retry can change end register at
// once, with the control plane's reason; nothing is kept.
func TestRegisterGivesUp(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		code string
	}{
		{"denied", fault.Denied("credential for another cluster"), "AccessDeniedException"},
		{"no cluster", fault.Missing("ClusterNotFoundException", "Cluster not found."), "ClusterNotFoundException"},
		{"invalid", fault.Invalid("totalResources", "bad"), "InvalidParameterException"},
		// A deregistered instance is news only about a known one.
		{"unknown instance", fault.ClientError("container instance %s was deregistered", arnX), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// The last case is no refusal to give up on: register retries
			// it until ctx ends, which the first answer brings about.
			ctx, cancel := context.WithTimeout(context.Background(), registerDeadline)
			defer cancel()
			cp := &controlPlane{answer: func(int, *shapes.RegisterContainerInstanceRequest) (*shapes.RegisterContainerInstanceResponse, error) {
				if tc.code == "" {
					cancel()
				}
				return nil, tc.err
			}}
			cfg, client := startControl(t, cp)
			db := openDB(t)
			_, err := register(ctx, client, db, cfg, testCapacity, testInfo, discard)
			switch {
			case tc.code == "" && (!errors.Is(err, context.Canceled) || ctx.Err() != context.Canceled):
				t.Fatalf("register = %v, want it to retry until cancelled", err)
			case tc.code != "" && (err == nil || !strings.Contains(err.Error(), tc.code)):
				t.Fatalf("register = %v, want %s", err, tc.code)
			}
			if n := len(cp.requests()); n != 1 {
				t.Errorf("%d requests, want 1", n)
			}
			if kept, _ := db.InstanceARN(); kept != "" {
				t.Errorf("data dir keeps %q", kept)
			}
		})
	}

	// A credential the control plane does not know is refused by its
	// authentication, before any operation.
	cp := &controlPlane{answer: func(int, *shapes.RegisterContainerInstanceRequest) (*shapes.RegisterContainerInstanceResponse, error) {
		return registered(arnX)
	}}
	cfg, _ := startControl(t, cp)
	client := ecs.New(ecs.Options{Region: cfg.Region, BaseEndpoint: aws.String(cfg.Endpoint), Retryer: aws.NopRetryer{},
		Credentials: credentials.NewStaticCredentialsProvider(cfg.AccessKeyID, "wrong-secret", "")})
	if _, err := register(context.Background(), client, openDB(t), cfg, testCapacity, testInfo, discard); err == nil ||
		!strings.Contains(err.Error(), auth.CodeInvalidSignature) {
		t.Fatalf("register with a wrong secret = %v", err)
	}
}

// TestRegisterRetries: any other failure is retried.
func TestRegisterRetries(t *testing.T) {
	cp := &controlPlane{answer: func(n int, _ *shapes.RegisterContainerInstanceRequest) (*shapes.RegisterContainerInstanceResponse, error) {
		if n == 1 {
			return nil, fault.Conflicting("", "the cluster changed meanwhile")
		}
		return registered(arnX)
	}}
	cfg, client := startControl(t, cp)
	arn, err := register(context.Background(), client, openDB(t), cfg, testCapacity, testInfo, discard)
	if err != nil || arn != arnX || len(cp.requests()) != 2 {
		t.Fatalf("register = %q, %v after %d requests; want %s after 2", arn, err, len(cp.requests()), arnX)
	}
}

func mustPrefix(t *testing.T, s string) netip.Prefix {
	t.Helper()
	p, err := netip.ParsePrefix(s)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func arns(reqs []shapes.RegisterContainerInstanceRequest) []string {
	var out []string
	for _, r := range reqs {
		out = append(out, r.ContainerInstanceArn)
	}
	return out
}

// TestRetire: what a deregistered instance left on the host and in the
// data directory goes, and nothing of another instance.
func TestRetire(t *testing.T) {
	ctx := context.Background()
	rt := sim.New(sim.Config{})
	defer rt.Close()
	labels := func(instance, role string) map[string]string {
		l := map[string]string{engine.LabelInstance: instance}
		if role != "" {
			l[daemonnet.LabelRole] = role
		}
		return l
	}
	create := func(name, instance string, start bool) string {
		l := labels(instance, "")
		l[engine.LabelTaskArn] = "arn:aws:ecs:us-east-1:123456789012:task/prod/" + name
		id, err := rt.Create(ctx, runtime.ContainerSpec{Name: name, Image: "busybox", Labels: l})
		if err != nil {
			t.Fatal(err)
		}
		if start {
			if err := rt.Start(ctx, id); err != nil {
				t.Fatal(err)
			}
		}
		return id
	}
	create("old-running", arnX, true)
	create("old-exited", arnX, false)
	keep := create("other", arnY, true)
	for _, n := range []struct{ name, instance, subnet string }{{"old-net", arnX, "169.254.172.0/24"}, {"other-net", arnY, "169.254.173.0/24"}} {
		if _, err := rt.CreateNetwork(ctx, runtime.NetworkSpec{Name: n.name, Subnet: mustPrefix(t, n.subnet), Labels: labels(n.instance, daemonnet.RoleNetwork)}); err != nil {
			t.Fatal(err)
		}
	}

	db := openDB(t)
	for _, arn := range []string{"a", "b"} {
		db.PutTask(arn, []byte(`{}`))
	}
	for id := uint64(1); id <= 3; id++ {
		db.AppendBatch(id, []byte(`{}`))
	}
	db.AckThrough(1)
	db.PutManifest(5, []byte(`{"seq":5,"tasks":[{"arn":"a"},{"arn":"b"}]}`))

	if err := retire(ctx, rt, db, arnX, discard); err != nil {
		t.Fatal(err)
	}
	if cs, _ := rt.List(ctx, labels(arnX, "")); len(cs) != 0 {
		t.Errorf("containers of the old instance left: %v", cs)
	}
	if cs, _ := rt.List(ctx, labels(arnY, "")); len(cs) != 1 || cs[0].ID != keep || cs[0].State != runtime.StateRunning {
		t.Errorf("another instance's containers: %+v", cs)
	}
	if ns, _ := rt.Networks(ctx, labels(arnX, daemonnet.RoleNetwork)); len(ns) != 0 {
		t.Errorf("the old instance's network is left: %+v", ns)
	}
	if ns, _ := rt.Networks(ctx, labels(arnY, daemonnet.RoleNetwork)); len(ns) != 1 {
		t.Errorf("another instance's network: %+v", ns)
	}
	if tasks, _ := db.Tasks(); len(tasks) != 0 {
		t.Errorf("task records left: %v", tasks)
	}
	// Its state batches are settled, and numbering goes on above them.
	if bs, _ := db.Batches(); len(bs) != 0 {
		t.Errorf("unacknowledged batches left: %v", bs)
	}
	if last, _ := db.LastBatchID(); last != 3 {
		t.Errorf("last batch ID %d, want 3", last)
	}
	// The manifest keeps its number (the server's next is higher) but lists
	// nothing, so the new instance resumes none of the old one's tasks.
	seq, data, err := db.Manifest()
	var m protocol.Manifest
	if err != nil || json.Unmarshal(data, &m) != nil || seq != 5 || m.Seq != 5 || len(m.Tasks) != 0 {
		t.Errorf("manifest %d %s (%v)", seq, data, err)
	}
}

// TestEngineAdapters: what the metadata endpoint and /metrics read from a
// running engine.
func TestEngineAdapters(t *testing.T) {
	rt := sim.New(sim.Config{})
	defer rt.Close()
	eng, err := engine.New(engine.Config{Runtime: rt, Store: openDB(t), Cluster: "arn:aws:ecs:us-east-1:123456789012:cluster/prod",
		ContainerInstanceArn: arnX, Resources: testCapacity, Log: discard})
	if err != nil {
		t.Fatal(err)
	}
	src := &metadataSource{}
	if src.TaskARNs() != nil {
		t.Fatal("tasks before the engine is set")
	}
	if _, ok := src.Task("x"); ok {
		t.Fatal("a task before the engine is set")
	}
	src.eng = eng
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- eng.Run(ctx) }()
	defer func() { cancel(); <-done }()
	go func() {
		for range eng.Changes() {
		}
	}()

	task := protocol.Task{Arn: "arn:aws:ecs:us-east-1:123456789012:task/prod/0a1b2c", ClusterArn: "arn:aws:ecs:us-east-1:123456789012:cluster/prod",
		Kind: protocol.KindService, Group: "service:web", DesiredStatus: "RUNNING", Version: 1,
		Tags: []shapes.Tag{{Key: "team", Value: "a"}},
		Definition: shapes.TaskDefinition{Family: "web", Revision: aws.Int32(7), NetworkMode: "bridge", ContainerDefinitions: []shapes.ContainerDefinition{{
			Name: "app", Image: "busybox", Memory: aws.Int32(64), Essential: aws.Bool(true),
			PortMappings: []shapes.PortMapping{{ContainerPort: aws.Int32(80), HostPort: aws.Int32(8080), Protocol: "tcp"}},
		}}}}
	eng.SetDesired([]protocol.Task{task})
	deadline := time.Now().Add(10 * time.Second)
	for {
		if tv, ok := src.Task(task.Arn); ok && tv.KnownStatus == "RUNNING" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the task did not run")
		}
		time.Sleep(10 * time.Millisecond)
	}
	tv, _ := src.Task(task.Arn)
	if tv.Revision != "7" || tv.Family != "web" || tv.ServiceName != "web" || tv.Tags["team"] != "a" || tv.Cluster != task.ClusterArn ||
		tv.DesiredStatus != "RUNNING" || tv.MemoryMiB != 64 || tv.NetworkMode != "bridge" {
		t.Errorf("task view %+v", tv)
	}
	if len(tv.Containers) != 1 {
		t.Fatalf("containers %+v", tv.Containers)
	}
	c := tv.Containers[0]
	if c.Name != "app" || c.RuntimeID == "" || c.KnownStatus != "RUNNING" || len(c.Ports) != 1 ||
		c.Ports[0].ContainerPort != 80 || c.Ports[0].HostPort != 8080 || c.Ports[0].Protocol != "tcp" {
		t.Errorf("container view %+v", c)
	}
	if got := src.TaskARNs(); !slices.Equal(got, []string{task.Arn}) {
		t.Errorf("TaskARNs = %v", got)
	}

	reg := prometheus.NewRegistry()
	reg.MustRegister(engineCollector{eng})
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	values := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			key := mf.GetName()
			for _, l := range m.GetLabel() {
				key += "/" + l.GetValue()
			}
			values[key] = m.GetGauge().GetValue() + m.GetCounter().GetValue()
		}
	}
	for k, want := range map[string]float64{"capstan_agent_tasks/RUNNING": 1, "capstan_agent_tasks/PENDING": 0,
		"capstan_agent_reserved/memory_mib": 64, "capstan_agent_engine_events_total/pull": 1} {
		if got, ok := values[k]; !ok || got != want {
			t.Errorf("%s = %v (present %v), want %v", k, got, ok, want)
		}
	}
}
