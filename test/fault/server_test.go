package fault

import (
	"context"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ecs"

	"github.com/capstanhq/capstan/internal/testenv"
)

// serverKillDeadline bounds recovery from a server killed with SIGKILL
// and started again on its data dir: etcd recovers, the agents reconnect
// (their back-off is at most a few seconds this early) and the
// controllers pick up what was in flight.
var serverKillDeadline = 90 * time.Second

const (
	processKey    = "AKIDFAULTPROCESS"
	processSecret = "fault-process-secret"
)

// serverProcess is `capstan server` as its own process, to kill -9.
type serverProcess struct {
	cmd  *exec.Cmd
	done chan struct{}
	log  *lockedBuffer
}

type lockedBuffer struct {
	mu sync.Mutex
	b  []byte
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.b = append(l.b, p...)
	return len(p), nil
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return string(l.b)
}

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// startServerProcess runs the server with the local provisioner on addr
// and dir and waits until it is healthy.
func startServerProcess(t *testing.T, bin, addr, dir string) *serverProcess {
	t.Helper()
	cmd := exec.Command(bin, "server", "--listen", addr, "--data-dir", dir, "--account-id", "123456789012", "--provisioner", "local")
	cmd.Env = append(os.Environ(), "CAPSTAN_ACCESS_KEY_ID="+processKey, "CAPSTAN_SECRET_ACCESS_KEY="+processSecret)
	p := &serverProcess{cmd: cmd, done: make(chan struct{}), log: &lockedBuffer{}}
	cmd.Stdout, cmd.Stderr = p.log, p.log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { cmd.Wait(); close(p.done) }()
	t.Cleanup(p.kill9)
	deadline := time.Now().Add(60 * time.Second)
	for {
		if resp, err := http.Get("http://" + addr + "/healthz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return p
			}
		}
		select {
		case <-p.done:
			t.Fatalf("server exited during start:\n%s", p.log)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("server not healthy after 60s:\n%s", p.log)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// sessions is a convergence condition: n agents hold a session with this
// server process (its gauge, not the session leases, which outlive a
// killed server by their TTL).
func (f *fleet) sessions(n int) func(*snapshot) string {
	return func(*snapshot) string {
		resp, err := http.Get(f.url + "/metrics")
		if err != nil {
			return err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "capstan_agent_sessions "); ok {
				if got, _ := strconv.ParseFloat(v, 64); int(got) != n {
					return fmt.Sprintf("%v of %d agents reconnected", got, n)
				}
				return ""
			}
		}
		return "no capstan_agent_sessions metric"
	}
}

// launch is an instance the server was seen launching.
type launch struct {
	what string // its state when seen
	dir  string
	pid  int
}

// launching waits until the server is launching an instance it has not
// put in service yet: an agent process that is not one of known, whose
// instance has not registered or is still REGISTERING (its critical
// daemon starting).
func (f *fleet) launching(known map[string]agent) launch {
	f.t.Helper()
	old := map[string]bool{}
	for _, a := range known {
		old[a.dir] = true
	}
	root := filepath.Join(f.dataDir, "instances")
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		entries, _ := os.ReadDir(root)
		for _, e := range entries {
			dir := filepath.Join(root, e.Name())
			if old[dir] {
				continue
			}
			b, err := os.ReadFile(filepath.Join(dir, "pid"))
			pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
			if err != nil || pid == 0 || syscall.Kill(pid, 0) != nil {
				continue
			}
			arn := registeredAs(filepath.Join(dir, "agent.log"))
			if arn == "" {
				return launch{fmt.Sprintf("agent %d of %s runs, not registered", pid, e.Name()), dir, pid}
			}
			out, err := f.c.DescribeContainerInstances(context.Background(), &ecs.DescribeContainerInstancesInput{
				Cluster: aws.String(f.cluster), ContainerInstances: []string{arn}})
			if err != nil || len(out.ContainerInstances) != 1 {
				continue
			}
			if st := aws.ToString(out.ContainerInstances[0].Status); st != "REGISTERING" {
				f.t.Fatalf("instance %s was %s when its launch was first seen: too late to kill the server into it", arn, st)
			}
			return launch{fmt.Sprintf("instance %s is REGISTERING", arn), dir, pid}
		}
		time.Sleep(10 * time.Millisecond)
	}
	f.t.Fatal("no instance launched within 60s")
	return launch{}
}

func (p *serverProcess) kill9() {
	p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
}

// TestKillServer kills the server with SIGKILL in steady state, and again
// while it launches an instance and places tasks, restarting it on the
// same data dir each time. Local instances survive: the same agents
// reconnect, nothing is replaced, nothing runs twice.
func TestKillServer(t *testing.T) {
	skipHollow(t, "the server's process is killed, and with the sim provisioner the hollow agents live in it")
	rt := testenv.RequireDocker(t)
	bin := testenv.CapstanBinary(t)
	dir := t.TempDir()
	addr := freeAddr(t)
	p := startServerProcess(t, bin, addr, dir)
	f := &fleet{t: t, url: "http://" + addr, rt: rt, bin: bin, dataDir: dir,
		creds: aws.Credentials{AccessKeyID: processKey, SecretAccessKey: processSecret}}
	t.Cleanup(func() {
		p.kill9()
		f.terminateAll()
	})
	f.init()
	n := *instancesFlag
	f.setup(n, false)

	// Steady state.
	before := f.agents()
	p.kill9()
	p = startServerProcess(t, bin, addr, dir)
	f.converge("server kill -9 in steady state", serverKillDeadline, f.sessions(n))
	f.verify("server kill -9 in steady state")
	if after := f.agents(); !maps.EqualFunc(before, after, func(a, b agent) bool { return a.pid == b.pid }) {
		t.Errorf("agents changed across a server restart: before %v, after %v", before, after)
	}
	s := f.mustSnapshot()
	if got, want := slices.Sorted(maps.Keys(s.instances)), slices.Sorted(maps.Keys(before)); !slices.Equal(got, want) {
		t.Errorf("instances after the restart %v, before %v", got, want)
	}

	// While busy: the service grows by one (an instance is launched for
	// it) and jobs are placed; the server dies at once.
	ctx := context.Background()
	if _, err := f.c.UpdateService(ctx, &ecs.UpdateServiceInput{Cluster: aws.String(f.cluster), Service: aws.String(serviceName),
		DesiredCount: aws.Int32(int32(n + 1))}); err != nil {
		t.Fatal(err)
	}
	f.services[serviceName] = int32(n + 1)
	f.runJobs(2)
	launch := f.launching(before)
	t.Logf("killing the server while %s", launch.what)
	p.kill9()
	killed := time.Now()
	p = startServerProcess(t, bin, addr, dir)
	f.converge("server kill -9 while busy", serverKillDeadline, f.sessions(n+1))
	f.verify("server kill -9 while busy")
	agents := f.agents()
	if got := len(agents); got != n+1 {
		t.Errorf("%d agent processes for %d instances", got, n+1)
	}
	// The instance being launched is the one in service, not a
	// replacement; and the kill landed in its launch: it went ACTIVE only
	// after the server was dead (the record's times are the servers').
	for arn, a := range agents {
		if _, ok := before[arn]; ok {
			continue
		}
		if a.dir != launch.dir || a.pid != launch.pid {
			t.Errorf("instance %s runs agent %d in %s; the one being launched at the kill was agent %d in %s", arn, a.pid, a.dir, launch.pid, launch.dir)
		}
		var active *time.Time
		for _, in := range f.h.Instances() {
			if in.Arn != arn {
				continue
			}
			for _, st := range in.States {
				if st.Status == "ACTIVE" {
					active = &st.At
					break
				}
			}
		}
		switch {
		case active == nil:
			t.Errorf("record: the launched instance %s never went ACTIVE", arn)
		case !active.After(killed):
			t.Errorf("record: the launched instance %s went ACTIVE at %s, before the server was killed at %s",
				arn, active.Format(time.RFC3339Nano), killed.Format(time.RFC3339Nano))
		}
	}
	for _, tk := range f.describe(f.jobs) {
		if s := aws.ToString(tk.LastStatus); s != "RUNNING" {
			t.Errorf("job %s is %s (%s) after the restart", aws.ToString(tk.TaskArn), s, aws.ToString(tk.StoppedReason))
		}
	}
}
