package dev_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"math/big"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/ecs"

	"github.com/capstanhq/capstan/internal/agent/engine"
	"github.com/capstanhq/capstan/internal/dev"
	"github.com/capstanhq/capstan/internal/runtime/docker"
	"github.com/capstanhq/capstan/internal/testenv"
)

// TestDev runs `capstan dev` in-process against the real Docker Engine,
// twice on the same data directory: the sample comes up, the web app
// answers on its host ports and reaches the daemon, cancelling (Ctrl-C)
// leaves no container, network or process behind, and the second run
// reuses what the first created.
func TestDev(t *testing.T) {
	rt := testenv.RequireDocker(t)
	b := make([]byte, 4)
	rand.Read(b)
	cluster := "devtest-" + hex.EncodeToString(b)
	// Parallel tests elsewhere hold the first daemon subnets of the host's
	// engine; a subnet of its own keeps this instance from waiting on them.
	n, _ := rand.Int(rand.Reader, big.NewInt(50))
	subnet := 200 + int(n.Int64())
	cfg := dev.Config{
		DataDir: t.TempDir(),
		Listen:  "127.0.0.1:0",
		Cluster: cluster,
		AgentEnv: map[string]string{
			"CAPSTAN_DAEMON_SUBNET":  fmt.Sprintf("169.254.%d.0/24", subnet),
			"CAPSTAN_DAEMON_ADDRESS": fmt.Sprintf("169.254.%d.2", subnet),
		},
		Timeout: 80 * time.Second,
	}

	st, buf, stop := startDev(t, cfg)
	out := buf.String()
	checkUp(t, st, out, 2)
	if !strings.Contains(out, "service web created") || !strings.Contains(out, "daemon telemetry created") {
		t.Errorf("first run did not create the sample:\n%s", out)
	}
	// What `capstan dev urls` prints: the same tasks and URLs.
	var urls bytes.Buffer
	if err := dev.URLs(context.Background(), cfg.DataDir, &urls); err != nil {
		t.Fatal(err)
	}
	for _, task := range st.Web {
		if !strings.Contains(urls.String(), task.ID) || !strings.Contains(urls.String(), task.URL+"\n") {
			t.Errorf("dev urls lacks task %s at %s:\n%s", task.ID, task.URL, urls.String())
		}
	}

	// The user scales the service down, then has its task replaced: dev
	// prints each new set of URLs.
	ctx := context.Background()
	c := ecs.New(ecs.Options{Region: st.Region, BaseEndpoint: aws.String(st.Endpoint),
		Credentials: credentials.NewStaticCredentialsProvider(st.AccessKeyID, st.SecretAccessKey, "")})
	if _, err := c.UpdateService(ctx, &ecs.UpdateServiceInput{Cluster: aws.String(cluster), Service: aws.String("web"), DesiredCount: aws.Int32(1)}); err != nil {
		t.Fatal(err)
	}
	one := waitURLs(t, buf, 0, 1)
	if one[0] != st.Web[0].URL && one[0] != st.Web[1].URL {
		t.Errorf("after scaling down, URL %s is none of the earlier %s, %s", one[0], st.Web[0].URL, st.Web[1].URL)
	}
	if _, err := c.UpdateService(ctx, &ecs.UpdateServiceInput{Cluster: aws.String(cluster), Service: aws.String("web"), ForceNewDeployment: true}); err != nil {
		t.Fatal(err)
	}
	if moved := waitURLs(t, buf, 1, 1); moved[0] == one[0] {
		t.Errorf("the replaced web task kept its URL %s", one[0])
	}
	stop()
	checkClean(t, rt, cluster)

	// The next run keeps what the user changed and reuses the rest.
	st, buf, stop = startDev(t, cfg)
	out = buf.String()
	checkUp(t, st, out, 1)
	for _, line := range []string{"capacity provider " + cluster + "-local", "daemon task definition telemetry:1", "daemon telemetry", "task definition web:1", "service web (1 tasks)"} {
		if !strings.Contains(out, "] "+line+"\n") {
			t.Errorf("second run did not keep %q:\n%s", line, out)
		}
	}
	stop()
	checkClean(t, rt, cluster)
	// Ending the first run's instance, and the server's own shutdown, are
	// expected: no warnings about them.
	for _, w := range []string{"warning: server: managed instance lost", "warning: server: local instance had exited", "warning: server: etcd"} {
		if strings.Contains(buf.String(), w) {
			t.Errorf("the second run warned %q:\n%s", w, buf.String())
		}
	}
	var none bytes.Buffer
	if err := dev.URLs(ctx, cfg.DataDir, &none); err == nil || !strings.Contains(err.Error(), "capstan dev is not running on") {
		t.Errorf("dev urls with dev stopped: %v\n%s", err, none.String())
	}
}

// waitURLs waits for a line of dev's saying the web URLs are now want
// many, the after+1st such line or a later one, and returns its URLs. A
// replacement starts the new task before it stops the old one, so the
// lines in between may list both.
func waitURLs(t *testing.T, buf *syncBuffer, after, want int) []string {
	t.Helper()
	const marker = "service web URLs are now "
	deadline := time.Now().Add(3 * time.Minute)
	for {
		n := 0
		for _, l := range strings.Split(buf.String(), "\n") {
			_, rest, ok := strings.Cut(l, marker)
			if !ok {
				continue
			}
			urls, _, _ := strings.Cut(rest, " (")
			if got := strings.Fields(urls); n >= after && len(got) == want {
				return got
			}
			n++
		}
		if time.Now().After(deadline) {
			t.Fatalf("no line with %d URLs after %d within 3 minutes:\n%s", want, after, buf.String())
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// startDev runs dev until it is ready; stop cancels it as Ctrl-C does and
// waits for it to end.
func startDev(t *testing.T, cfg dev.Config) (st dev.Status, out *syncBuffer, stop func()) {
	t.Helper()
	buf := &syncBuffer{}
	t.Cleanup(func() {
		if t.Failed() || testing.Verbose() {
			t.Logf("capstan dev output:\n%s", buf.String())
		}
	})
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan dev.Status, 1)
	done := make(chan error, 1)
	cfg.Out = buf
	cfg.Ready = func(s dev.Status) { ready <- s }
	go func() { done <- dev.Run(ctx, cfg) }()
	stop = func() {
		t.Helper()
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("dev: %v", err)
			}
		case <-time.After(90 * time.Second):
			t.Fatal("dev did not stop within 90s of cancellation")
		}
	}
	select {
	case st = <-ready:
	case err := <-done:
		cancel()
		t.Fatalf("dev ended before it was ready: %v", err)
	case <-time.After(100 * time.Second):
		cancel()
		<-done
		t.Fatal("dev not ready after 100s")
	}
	return st, buf, stop
}

func checkUp(t *testing.T, st dev.Status, out string, web int) {
	t.Helper()
	active := 0
	for _, in := range st.Instances {
		if in.Status == "ACTIVE" && in.Connected {
			active++
		}
	}
	if active == 0 {
		t.Errorf("no instance is ACTIVE: %+v", st.Instances)
	}
	if len(st.Daemon) != 1 || st.Daemon[0].Status != "RUNNING" {
		t.Errorf("daemon tasks: %+v", st.Daemon)
	}
	if len(st.Web) != web {
		t.Fatalf("web tasks: %+v", st.Web)
	}
	for _, task := range st.Web {
		if task.Status != "RUNNING" || task.URL == "" {
			t.Fatalf("web task: %+v", task)
		}
		page := get(t, task.URL+"/")
		if !strings.Contains(page, task.Arn) {
			t.Errorf("%s does not show its task ARN %s:\n%s", task.URL, task.Arn, page)
		}
		if !strings.Contains(page, `data-reached="true"`) {
			t.Errorf("%s did not reach the telemetry daemon:\n%s", task.URL, page)
		}
	}
	// Every page load above sent the daemon a counter named after its task.
	metrics := get(t, st.Web[0].URL+"/daemon/metrics")
	for _, task := range st.Web {
		id := task.Arn[strings.LastIndex(task.Arn, "/")+1:]
		if !strings.Contains(metrics, `telemetry_events_total{source="web/`+id+`",name="http_requests"}`) {
			t.Errorf("the daemon has no requests from task %s:\n%s", id, metrics)
		}
	}
	if !st.TelemetryReached {
		t.Errorf("dev reports the web app did not reach the daemon: %s", st.Telemetry)
	}
	if !strings.Contains(out, "export AWS_ACCESS_KEY_ID="+st.AccessKeyID) || !strings.Contains(out, st.Web[0].URL) {
		t.Errorf("the summary lacks the credentials or a web URL:\n%s", out)
	}
}

// checkClean finds nothing of the cluster left: containers, daemon
// networks, agent processes (children of this process, the server's).
func checkClean(t *testing.T, rt *docker.Runtime, cluster string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cs, err := rt.List(ctx, map[string]string{engine.LabelCluster: cluster})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cs {
		t.Errorf("container left behind: %s %s (%s)", c.Name, c.ID, c.State)
		rt.Remove(ctx, c.ID)
	}
	nets, err := rt.Networks(ctx, map[string]string{engine.LabelCluster: cluster})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range nets {
		t.Errorf("network left behind: %s", n.Name)
		rt.RemoveNetwork(ctx, n.ID)
	}
	// A terminated agent may be a zombie a moment longer, until reaped.
	deadline := time.Now().Add(10 * time.Second)
	for kids := children(); len(kids) > 0; kids = children() {
		if time.Now().After(deadline) {
			t.Fatalf("processes left behind: %v", kids)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func get(t *testing.T, url string) string {
	t.Helper()
	c := http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s\n%s", url, resp.Status, b)
	}
	return string(b)
}

// children lists this process's child processes as "pid cmdline".
func children() []string {
	self := strconv.Itoa(os.Getpid())
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	var kids []string
	for _, p := range stats {
		b, err := os.ReadFile(p)
		if err != nil {
			continue // exited meanwhile
		}
		// Fields after the parenthesised name: state, ppid, ...
		i := bytes.LastIndexByte(b, ')')
		if i < 0 {
			continue
		}
		fields := strings.Fields(string(b[i+1:]))
		if len(fields) > 1 && fields[1] == self {
			cmd, _ := os.ReadFile(filepath.Join(filepath.Dir(p), "cmdline"))
			kids = append(kids, filepath.Base(filepath.Dir(p))+" "+strings.ReplaceAll(string(cmd), "\x00", " "))
		}
	}
	return kids
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
