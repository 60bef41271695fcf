package fault

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ecs"
	"github.com/aws/aws-sdk-go-v2/service/ecs/types"

	"github.com/capstanhq/capstan/internal/testenv"
)

// startEtcdMember runs `capstan etcd` (one member) and returns the server
// flags that reach it with the client certificate it generated.
func startEtcdMember(t *testing.T, bin string) []string {
	t.Helper()
	dir, listen, peer := t.TempDir(), freeAddr(t), freeAddr(t)
	cmd := exec.Command(bin, "etcd", "--data-dir", dir, "--listen", listen, "--peer-listen", peer)
	log := &lockedBuffer{}
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	t.Cleanup(func() { cmd.Process.Kill(); <-done })
	deadline := time.Now().Add(60 * time.Second)
	for !strings.Contains(log.String(), "capstan etcd ready") {
		select {
		case <-done:
			t.Fatalf("capstan etcd exited during start:\n%s", log)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("capstan etcd not ready after 60s:\n%s", log)
		}
		time.Sleep(50 * time.Millisecond)
	}
	tls := filepath.Join(dir, "tls")
	return []string{"--etcd-endpoints", "https://" + listen, "--etcd-cacert", filepath.Join(tls, "ca.crt"),
		"--etcd-cert", filepath.Join(tls, "client.crt"), "--etcd-key", filepath.Join(tls, "client.key")}
}

// startSharedServer runs a server process that keeps its state in a
// shared etcd, with the local provisioner.
func startSharedServer(t *testing.T, bin, addr, dir string, args ...string) *serverProcess {
	t.Helper()
	cmd := exec.Command(bin, append([]string{"server", "--listen", addr, "--data-dir", dir, "--account-id", "123456789012",
		"--provisioner", "local"}, args...)...)
	cmd.Env = append(os.Environ(), "CAPSTAN_ACCESS_KEY_ID="+processKey, "CAPSTAN_SECRET_ACCESS_KEY="+processSecret)
	p := &serverProcess{cmd: cmd, done: make(chan struct{}), log: &lockedBuffer{}}
	cmd.Stdout, cmd.Stderr = p.log, p.log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { cmd.Wait(); close(p.done) }()
	t.Cleanup(p.kill9)
	eventually(t, 60*time.Second, "server "+addr+" healthy", func() bool {
		select {
		case <-p.done:
			t.Fatalf("server exited during start:\n%s", p.log)
		default:
		}
		resp, err := http.Get("http://" + addr + "/healthz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	return p
}

// cliPoller runs `capstan daemon list` with every endpoint in a loop and
// counts the runs and the failures, until stopped.
type cliPoller struct {
	runs, fails atomic.Int64
	mu          sync.Mutex
	lastErr     string
	stop        chan struct{}
	done        chan struct{}
}

func pollCLI(bin, endpoints, cluster string) *cliPoller {
	p := &cliPoller{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(p.done)
		for {
			select {
			case <-p.stop:
				return
			case <-time.After(200 * time.Millisecond):
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			cmd := exec.CommandContext(ctx, bin, "daemon", "list", "--cluster", cluster)
			cmd.Env = []string{"HOME=" + os.TempDir(), "CAPSTAN_ENDPOINT=" + endpoints,
				"AWS_ACCESS_KEY_ID=" + processKey, "AWS_SECRET_ACCESS_KEY=" + processSecret}
			out, err := cmd.CombinedOutput()
			cancel()
			p.runs.Add(1)
			if err != nil || !strings.Contains(string(out), "guard") {
				p.fails.Add(1)
				p.mu.Lock()
				p.lastErr = fmt.Sprintf("%v: %s", err, out)
				p.mu.Unlock()
			}
		}
	}()
	return p
}

func (p *cliPoller) finish() (runs, fails int64, last string) {
	close(p.stop)
	<-p.done
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.runs.Load(), p.fails.Load(), p.lastErr
}

// TestKillLeaderServer runs two servers on one `capstan etcd` member and
// kills the leading one with SIGKILL in the middle of a daemon rollout by
// instance replacement. The agents move to the other server, which takes
// over the controllers and finishes the rollout from where it was: every
// instance replaced exactly once (no duplicate launch), exactly one guard
// per ACTIVE instance, no task stopped except by the drains, and the CLI
// given both endpoints answers throughout.
func TestKillLeaderServer(t *testing.T) {
	skipHollow(t, "server processes with the local provisioner are killed; hollow agents would live in them")
	rt := testenv.RequireDocker(t)
	bin := testenv.CapstanBinary(t)
	shared := startEtcdMember(t, bin)
	addrA, addrB := freeAddr(t), freeAddr(t)
	endpoints := "http://" + addrA + ",http://" + addrB
	dirA, dirB := t.TempDir(), t.TempDir()
	// The servers share the local provisioner's machines, as cloud
	// servers share their provider's account: either may terminate what
	// the other launched.
	if err := os.MkdirAll(filepath.Join(dirA, "instances"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(dirA, "instances"), filepath.Join(dirB, "instances")); err != nil {
		t.Fatal(err)
	}
	args := append(shared, "--secrets-key-file", filepath.Join(t.TempDir(), "secrets.key"), "--advertise-url", endpoints)
	a := startSharedServer(t, bin, addrA, dirA, args...)
	eventually(t, 30*time.Second, "the first server leading", func() bool { return strings.Contains(a.log.String(), `"leading"`) })
	b := startSharedServer(t, bin, addrB, dirB, args...)

	// The test talks to the server that survives.
	f := &fleet{t: t, url: "http://" + addrB, rt: rt, bin: bin, dataDir: dirA,
		creds: aws.Credentials{AccessKeyID: processKey, SecretAccessKey: processSecret}}
	t.Cleanup(func() {
		a.kill9()
		b.kill9()
		f.terminateAll()
	})
	f.init()
	n := *instancesFlag
	f.setup(n, false)
	cli := pollCLI(bin, endpoints, f.cluster)

	td := f.daemonTaskDef("guard", "echo v2; "+loopCmd)
	dep := f.updateDaemon(td)
	ctx := context.Background()
	eventually(t, scaled(rolloutDeadline), "the rollout under way (an instance draining)", func() bool {
		out, err := f.c.ListContainerInstances(ctx, &ecs.ListContainerInstancesInput{Cluster: aws.String(f.cluster), Status: types.ContainerInstanceStatusDraining})
		return err == nil && len(out.ContainerInstanceArns) > 0
	})
	if strings.Contains(b.log.String(), `"leading"`) {
		t.Fatal("the second server leads before the kill")
	}
	a.kill9()
	killed := time.Now()
	f.converge("leader server killed mid-rollout", scaled(rolloutDeadline), f.sessions(n), f.ended(dep, types.DaemonDeploymentStatusSuccessful, td))
	f.verify("leader server killed mid-rollout")
	if !strings.Contains(b.log.String(), `"leading"`) {
		t.Errorf("the surviving server never led:\n%s", b.log)
	}

	// Every original instance replaced once: 2n instances ever, n ACTIVE.
	var active, all int
	for _, in := range f.h.Instances() {
		all++
		if len(in.States) > 0 && in.States[len(in.States)-1].Status == "ACTIVE" {
			active++
		}
	}
	if all != 2*n || active != n {
		t.Errorf("%d instances registered, %d ACTIVE at the end; want %d and %d (each of %d replaced once)", all, active, 2*n, n, n)
	}
	// A task stops only on an instance draining by then.
	for _, tk := range f.h.Tasks() {
		var stopped time.Time
		for _, st := range tk.States {
			if st.Status == "STOPPED" || st.Status == "STOPPING" || st.Status == "DEACTIVATING" {
				stopped = st.At
				break
			}
		}
		if stopped.IsZero() {
			continue
		}
		drained := false
		if in := f.h.Instance(tk.Instance); in != nil {
			for _, st := range in.States {
				if st.Status == "DRAINING" && !st.At.After(stopped) {
					drained = true
				}
			}
		}
		if !drained {
			t.Errorf("task %s (%s) stopped at %s (server killed at %s) on %s, which was not draining",
				tk.Arn, tk.Group, stopped.Format(time.RFC3339Nano), killed.Format(time.RFC3339Nano), tk.Instance)
		}
	}
	runs, fails, last := cli.finish()
	t.Logf("CLI with both endpoints: %d runs, %d failures", runs, fails)
	if runs == 0 || fails > 0 {
		t.Errorf("the CLI with both endpoints failed %d of %d runs; last: %s", fails, runs, last)
	}
}
