package metadata

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/capstanhq/capstan/internal/runtime"
)

// fakeSource is a hand-written Source over a map of tasks.
type fakeSource struct {
	mu    sync.Mutex
	tasks map[string]TaskView
}

func (f *fakeSource) Task(arn string) (TaskView, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	t, ok := f.tasks[arn]
	return t, ok
}

func (f *fakeSource) TaskARNs() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for arn := range f.tasks {
		out = append(out, arn)
	}
	return out
}

func (f *fakeSource) remove(arn string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.tasks, arn)
}

// fakeStats returns canned samples by runtime ID.
type fakeStats struct {
	samples map[string]runtime.Stats
	err     error
}

func (f *fakeStats) Stats(_ context.Context, id string) (runtime.Stats, error) {
	if f.err != nil {
		return runtime.Stats{}, f.err
	}
	s, ok := f.samples[id]
	if !ok {
		return runtime.Stats{}, fmt.Errorf("stats %s: %w", id, runtime.ErrNotFound)
	}
	return s, nil
}

const taskARN = "arn:aws:ecs:us-east-1:000000000000:task/prod/0123456789abcdef"

var (
	created = time.Date(2026, 4, 1, 10, 0, 0, 123456789, time.UTC)
	started = created.Add(2 * time.Second)
)

func sampleTask() TaskView {
	exit := 0
	return TaskView{
		Cluster: "prod", ARN: taskARN, Family: "web", Revision: "3",
		DesiredStatus: "RUNNING", KnownStatus: "RUNNING",
		CPUUnits: 512, MemoryMiB: 512, NetworkMode: "bridge",
		PullStartedAt: created.Add(-time.Second), PullStoppedAt: created,
		ServiceName: "web-svc", Tags: map[string]string{"team": "a"},
		Containers: []ContainerView{
			{
				Name: "app", RuntimeID: "c0ffee01", RuntimeName: "ecs-web-3-app-0123", Image: "app:1", ImageID: "sha256:aa",
				Labels:        map[string]string{"com.amazonaws.ecs.task-arn": taskARN},
				DesiredStatus: "RUNNING", KnownStatus: "RUNNING", CPUUnits: 256, MemoryMiB: 256,
				CreatedAt: created, StartedAt: started, Health: "HEALTHY", HealthSince: started.Add(time.Second),
				Ports:        []PortView{{ContainerPort: 80, HostPort: 32768, Protocol: "tcp", HostIP: "0.0.0.0"}},
				IPv4:         []string{"172.17.0.5"},
				ContainerARN: "arn:aws:ecs:us-east-1:000000000000:container/prod/0123456789abcdef/app",
				LogDriver:    "json-file", LogOptions: map[string]string{"max-size": "10m"},
			},
			{
				Name: "init", RuntimeID: "c0ffee02", RuntimeName: "ecs-web-3-init-0123", Image: "busybox:latest",
				DesiredStatus: "STOPPED", KnownStatus: "STOPPED", ExitCode: &exit,
				CreatedAt: created, StartedAt: created, FinishedAt: started,
			},
			{Name: "later", DesiredStatus: "RUNNING", KnownStatus: "PENDING"},
		},
	}
}

var rawStats = `{"read":"2026-04-01T10:00:05Z","cpu_stats":{"cpu_usage":{"total_usage":123}},"memory_stats":{"usage":4096}}`

func newServer(t *testing.T, cfg Config) (*Server, *fakeSource, *httptest.Server) {
	t.Helper()
	src := &fakeSource{tasks: map[string]TaskView{taskARN: sampleTask()}}
	if cfg.Source == nil {
		cfg.Source = src
	}
	if cfg.Runtime == nil {
		cfg.Runtime = &fakeStats{samples: map[string]runtime.Stats{"c0ffee01": {Raw: []byte(rawStats)}}}
	}
	if cfg.Key == nil {
		cfg.Key = []byte("test key")
	}
	s := New(cfg)
	ts := httptest.NewServer(s.Handler())
	t.Cleanup(ts.Close)
	if cfg.Addr == "" {
		s.cfg.Addr = strings.TrimPrefix(ts.URL, "http://")
	}
	return s, src, ts
}

func get(t *testing.T, url string, into any) int {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("%s: Content-Type %q", url, ct)
	}
	if into != nil {
		if err := json.Unmarshal(body, into); err != nil {
			t.Fatalf("%s: %v: %s", url, err, body)
		}
	}
	return resp.StatusCode
}

func TestContainerMetadata(t *testing.T) {
	s, _, _ := newServer(t, Config{})
	uri := s.URIFor(taskARN, "app")
	var got map[string]any
	if code := get(t, uri, &got); code != 200 {
		t.Fatalf("status %d", code)
	}
	want := map[string]any{
		"DockerId": "c0ffee01", "Name": "app", "DockerName": "ecs-web-3-app-0123", "Image": "app:1", "ImageID": "sha256:aa",
		"Labels":        map[string]any{"com.amazonaws.ecs.task-arn": taskARN},
		"DesiredStatus": "RUNNING", "KnownStatus": "RUNNING",
		"Limits":    map[string]any{"CPU": 256.0, "Memory": 256.0},
		"CreatedAt": "2026-04-01T10:00:00.123456789Z", "StartedAt": "2026-04-01T10:00:02.123456789Z",
		"Type":         "NORMAL",
		"Networks":     []any{map[string]any{"NetworkMode": "bridge", "IPv4Addresses": []any{"172.17.0.5"}}},
		"Health":       map[string]any{"status": "HEALTHY", "statusSince": "2026-04-01T10:00:03.123456789Z"},
		"Ports":        []any{map[string]any{"ContainerPort": 80.0, "HostPort": 32768.0, "Protocol": "tcp", "HostIp": "0.0.0.0"}},
		"LogDriver":    "json-file",
		"LogOptions":   map[string]any{"max-size": "10m"},
		"ContainerARN": "arn:aws:ecs:us-east-1:000000000000:container/prod/0123456789abcdef/app",
	}
	assertJSON(t, got, want)

	// A stopped container shows its exit code and finish time.
	var init map[string]any
	get(t, s.URIFor(taskARN, "init"), &init)
	if init["ExitCode"] != 0.0 || init["FinishedAt"] != "2026-04-01T10:00:02.123456789Z" || init["KnownStatus"] != "STOPPED" {
		t.Errorf("stopped container: %v", init)
	}
	if _, ok := init["Health"]; ok {
		t.Error("Health shown for a container without a health check")
	}
}

func assertJSON(t *testing.T, got, want map[string]any) {
	t.Helper()
	for k, w := range want {
		gj, _ := json.Marshal(got[k])
		wj, _ := json.Marshal(w)
		if string(gj) != string(wj) {
			t.Errorf("%s = %s, want %s", k, gj, wj)
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			t.Errorf("unexpected member %s = %v", k, got[k])
		}
	}
}

func TestTaskMetadata(t *testing.T) {
	s, _, _ := newServer(t, Config{})
	uri := s.URIFor(taskARN, "app")
	var got map[string]any
	if code := get(t, uri+"/task", &got); code != 200 {
		t.Fatalf("status %d", code)
	}
	containers, _ := got["Containers"].([]any)
	if len(containers) != 3 {
		t.Fatalf("Containers = %v", got["Containers"])
	}
	delete(got, "Containers")
	assertJSON(t, got, map[string]any{
		"Cluster": "prod", "TaskARN": taskARN, "Family": "web", "Revision": "3",
		"DesiredStatus": "RUNNING", "KnownStatus": "RUNNING",
		"Limits":        map[string]any{"CPU": 0.5, "Memory": 512.0},
		"PullStartedAt": "2026-04-01T09:59:59.123456789Z", "PullStoppedAt": "2026-04-01T10:00:00.123456789Z",
		"AvailabilityZone": "local", "LaunchType": "EC2", "ServiceName": "web-svc",
	})
	if c := containers[2].(map[string]any); c["Name"] != "later" || c["KnownStatus"] != "PENDING" {
		t.Errorf("pending container %v", c)
	}

	var tagged map[string]any
	get(t, uri+"/taskWithTags", &tagged)
	if tags, _ := tagged["TaskTags"].(map[string]any); tags["team"] != "a" {
		t.Errorf("TaskTags = %v", tagged["TaskTags"])
	}
	if _, ok := tagged["ContainerInstanceTags"]; !ok {
		t.Error("ContainerInstanceTags missing")
	}
}

func TestStats(t *testing.T) {
	s, _, _ := newServer(t, Config{})
	var stats json.RawMessage
	if code := get(t, s.URIFor(taskARN, "app")+"/stats", &stats); code != 200 {
		t.Fatalf("status %d", code)
	}
	if string(stats) != rawStats {
		t.Errorf("stats = %s, want Docker's JSON as is", stats)
	}
	// A stopped container has no stats.
	var none map[string]any
	if code := get(t, s.URIFor(taskARN, "init")+"/stats", &none); code != 200 || len(none) != 0 {
		t.Errorf("stopped container stats: %d %v", code, none)
	}

	var task map[string]json.RawMessage
	if code := get(t, s.URIFor(taskARN, "init")+"/task/stats", &task); code != 200 {
		t.Fatalf("status %d", code)
	}
	if len(task) != 2 || string(task["c0ffee01"]) != rawStats || string(task["c0ffee02"]) != "null" {
		t.Errorf("task stats = %s", task)
	}
}

func TestStatsWithoutRawJSON(t *testing.T) {
	rt := &fakeStats{samples: map[string]runtime.Stats{"c0ffee01": {
		CPUTotalNanos: 5, SystemCPUNanos: 50, OnlineCPUs: 2, MemoryUsageBytes: 1 << 20, MemoryLimitBytes: 1 << 30,
		NetworkRxBytes: 7, NetworkTxBytes: 8, Pids: 3,
	}}}
	s, _, _ := newServer(t, Config{Runtime: rt})
	var got struct {
		CPU struct {
			Usage struct {
				Total uint64 `json:"total_usage"`
			} `json:"cpu_usage"`
			Online int `json:"online_cpus"`
		} `json:"cpu_stats"`
		Memory struct {
			Usage uint64 `json:"usage"`
		} `json:"memory_stats"`
		Networks map[string]struct {
			Rx uint64 `json:"rx_bytes"`
		} `json:"networks"`
	}
	get(t, s.URIFor(taskARN, "app")+"/stats", &got)
	if got.CPU.Usage.Total != 5 || got.CPU.Online != 2 || got.Memory.Usage != 1<<20 || got.Networks["eth0"].Rx != 7 {
		t.Errorf("synthesised stats %+v", got)
	}
}

func TestStatsFailure(t *testing.T) {
	s, _, _ := newServer(t, Config{Runtime: &fakeStats{err: errors.New("engine unreachable")}})
	var body map[string]string
	if code := get(t, s.URIFor(taskARN, "app")+"/stats", &body); code != 500 || !strings.Contains(body["message"], "engine unreachable") {
		t.Errorf("status %d body %v", code, body)
	}
	if code := get(t, s.URIFor(taskARN, "app")+"/task/stats", &body); code != 500 {
		t.Errorf("task stats status %d", code)
	}
}

func TestNotFound(t *testing.T) {
	s, src, ts := newServer(t, Config{})
	var body map[string]string
	if code := get(t, ts.URL+"/v4/0123456789abcdef0123456789abcdef", &body); code != 404 || body["code"] != "NotFound" {
		t.Errorf("unknown token: %d %v", code, body)
	}
	if code := get(t, ts.URL+"/v2/metadata", &body); code != 404 {
		t.Errorf("other path: %d", code)
	}
	if code := get(t, s.URIFor(taskARN, "no-such-container"), &body); code != 404 {
		t.Errorf("unknown container: %d", code)
	}
	uri := s.URIFor(taskARN, "app")
	src.remove(taskARN)
	if code := get(t, uri, &body); code != 404 || !strings.Contains(body["message"], "gone") {
		t.Errorf("finished task: %d %v", code, body)
	}
	s.mu.Lock()
	n := len(s.tokens)
	s.mu.Unlock()
	if n != 0 {
		t.Errorf("%d tokens kept for a task that is gone", n)
	}
	if m := s.Metrics(); m.NotFound != 3 || m.Requests != 3 {
		t.Errorf("metrics %+v", m)
	}
}

func TestThrottle(t *testing.T) {
	const burst = 5
	s, _, _ := newServer(t, Config{RPS: 1, Burst: burst})
	uri := s.URIFor(taskARN, "app")
	throttled := 0
	for range burst + 1 {
		resp, err := http.Get(uri + "/task")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode == http.StatusTooManyRequests {
			throttled++
			var e map[string]string
			if err := json.Unmarshal(body, &e); err != nil || e["code"] != "ThrottlingException" || !strings.Contains(e["message"], "1 requests per second") {
				t.Errorf("429 body %s (%v)", body, err)
			}
			if resp.Header.Get("Retry-After") == "" {
				t.Error("429 without Retry-After")
			}
		}
	}
	if throttled == 0 {
		t.Fatalf("%d rapid requests with burst %d: none throttled", burst+1, burst)
	}
	// The bucket is the container's own: its neighbour is not throttled.
	if code := get(t, s.URIFor(taskARN, "init"), nil); code != 200 {
		t.Errorf("other container: status %d", code)
	}
	if m := s.Metrics(); m.Throttled != uint64(throttled) {
		t.Errorf("metrics %+v, throttled %d", m, throttled)
	}
}

func TestTokens(t *testing.T) {
	a := New(Config{Key: []byte("k1"), Addr: "172.17.0.1:51679"})
	b := New(Config{Key: []byte("k1"), Addr: "172.17.0.1:51679"})
	c := New(Config{Key: []byte("k2"), Addr: "172.17.0.1:51679"})
	uri := a.URIFor(taskARN, "app")
	if !strings.HasPrefix(uri, "http://172.17.0.1:51679/v4/") || len(strings.TrimPrefix(uri, "http://172.17.0.1:51679/v4/")) != 32 {
		t.Errorf("URI %q", uri)
	}
	if uri != b.URIFor(taskARN, "app") {
		t.Error("same key, different URI")
	}
	if uri == c.URIFor(taskARN, "app") || uri == a.URIFor(taskARN, "init") || uri == a.URIFor(taskARN+"x", "app") {
		t.Error("tokens must differ by key, container and task")
	}
	if New(Config{}).Token(taskARN, "app") == New(Config{}).Token(taskARN, "app") {
		t.Error("servers without a key must not share tokens")
	}
}

func TestHostNetworkURI(t *testing.T) {
	src := &fakeSource{tasks: map[string]TaskView{"bridge-task": {NetworkMode: "bridge"}, "host-task": {NetworkMode: "host"}}}
	s := New(Config{Source: src, Addr: "172.17.0.1:51679", HostAddr: "127.0.0.1:51679"})
	if u := s.URIFor("bridge-task", "c"); !strings.HasPrefix(u, "http://172.17.0.1:51679/v4/") {
		t.Errorf("bridge: %s", u)
	}
	if u := s.URIFor("host-task", "c"); !strings.HasPrefix(u, "http://127.0.0.1:51679/v4/") {
		t.Errorf("host: %s", u)
	}
}

func TestTokensSurviveRestart(t *testing.T) {
	s1, src, _ := newServer(t, Config{Key: []byte("persisted")})
	uri := s1.URIFor(taskARN, "app")
	token := uri[strings.LastIndex(uri, "/")+1:]

	// A new process with the same key has minted nothing yet.
	s2 := New(Config{Source: src, Runtime: &fakeStats{}, Key: []byte("persisted")})
	ts2 := httptest.NewServer(s2.Handler())
	defer ts2.Close()
	var got map[string]any
	if code := get(t, ts2.URL+"/v4/"+token, &got); code != 200 || got["Name"] != "app" {
		t.Errorf("token from before the restart: %d %v", code, got)
	}
}

func TestServe(t *testing.T) {
	s := New(Config{Source: &fakeSource{tasks: map[string]TaskView{taskARN: sampleTask()}}})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s.cfg.Addr = ln.Addr().String()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, ln) }()
	if code := get(t, s.URIFor(taskARN, "app"), nil); code != 200 {
		t.Errorf("status %d", code)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Serve: %v", err)
	}
}

var _ StatsSource = runtime.Runtime(nil)
