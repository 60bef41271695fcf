package fault

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ecs"

	capfleet "github.com/capstanhq/capstan/internal/fleet"
	"github.com/capstanhq/capstan/internal/store"
	"github.com/capstanhq/capstan/internal/testenv"
)

// etcdProcess is one `capstan etcd` member, to freeze with SIGSTOP.
type etcdProcess struct {
	cmd   *exec.Cmd
	args  []string // the server flags that reach it
	files store.TLSFiles
	url   string
}

// startEtcdProcess is startEtcdMember keeping the process at hand.
func startEtcdProcess(t *testing.T, bin string) *etcdProcess {
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
	t.Cleanup(func() { cmd.Process.Signal(syscall.SIGCONT); cmd.Process.Kill(); <-done })
	eventually(t, 60*time.Second, "capstan etcd ready", func() bool {
		select {
		case <-done:
			t.Fatalf("capstan etcd exited during start:\n%s", log)
		default:
		}
		return strings.Contains(log.String(), "capstan etcd ready")
	})
	tls := filepath.Join(dir, "tls")
	e := &etcdProcess{cmd: cmd, url: "https://" + listen, files: store.TLSFiles{CACert: filepath.Join(tls, "ca.crt"),
		Cert: filepath.Join(tls, "client.crt"), Key: filepath.Join(tls, "client.key")}}
	e.args = []string{"--etcd-endpoints", e.url, "--etcd-cacert", e.files.CACert, "--etcd-cert", e.files.Cert, "--etcd-key", e.files.Key}
	return e
}

// openStore opens the servers' state as a reader of the records the API
// does not show (managed instances and their handles).
func (e *etcdProcess) openStore(t *testing.T) *store.Store {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := store.Open(ctx, store.Config{Endpoints: []string{e.url}, TLS: e.files})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

func (f *fleet) managedInstance(st *store.Store, id string) (store.Item[capfleet.ManagedInstance], error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return store.Get[capfleet.ManagedInstance](ctx, st, capfleet.ManagedInstanceKey(f.cluster, id))
}

// agentProcesses lists every live `capstan agent` process whose data dir
// is under one of roots, by its environment: an agent whose pid file was
// lost or overwritten is found too.
func agentProcesses(roots ...string) map[int]string {
	out := map[int]string{}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		if i := strings.LastIndexByte(string(b), ')'); i > 0 && i+2 < len(b) && b[i+2] == 'Z' {
			continue
		}
		cmdline, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if !strings.HasSuffix(string(cmdline), "\x00agent\x00") {
			continue
		}
		env, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "environ"))
		for _, kv := range strings.Split(string(env), "\x00") {
			d, ok := strings.CutPrefix(kv, "ECS_DATADIR=")
			if !ok {
				continue
			}
			for _, r := range roots {
				if strings.HasPrefix(d, r+string(filepath.Separator)) {
					out[pid] = d
				}
			}
		}
	}
	return out
}

// checkNoLeak fails the test unless the live agent processes under roots
// are exactly the fleet's agents, one each.
func (f *fleet) checkNoLeak(what string, roots ...string) {
	f.t.Helper()
	agents := f.agents()
	procs := agentProcesses(roots...)
	known := map[int]bool{}
	for arn, a := range agents {
		if _, ok := procs[a.pid]; !ok {
			f.t.Errorf("%s: agent %d of %s is not among the agent processes %v", what, a.pid, arn, procs)
		}
		known[a.pid] = true
	}
	for pid, dir := range procs {
		if !known[pid] {
			f.t.Errorf("%s: leaked agent process %d (data dir %s) serves no instance", what, pid, dir)
		}
	}
}

// twoServers runs two servers on one `capstan etcd` member sharing the
// local provisioner's machines, the first leading; the fleet talks to the
// second.
func twoServers(t *testing.T) (f *fleet, a, b *serverProcess, e *etcdProcess, dirA, dirB string) {
	skipHollow(t, "server processes with the local provisioner are killed; hollow agents would live in them")
	rt := testenv.RequireDocker(t)
	bin := testenv.CapstanBinary(t)
	e = startEtcdProcess(t, bin)
	addrA, addrB := freeAddr(t), freeAddr(t)
	endpoints := "http://" + addrA + ",http://" + addrB
	dirA, dirB = t.TempDir(), t.TempDir()
	if err := os.MkdirAll(filepath.Join(dirA, "instances"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(dirA, "instances"), filepath.Join(dirB, "instances")); err != nil {
		t.Fatal(err)
	}
	args := append(e.args, "--secrets-key-file", filepath.Join(t.TempDir(), "secrets.key"), "--advertise-url", endpoints)
	a = startSharedServer(t, bin, addrA, dirA, args...)
	eventually(t, 30*time.Second, "the first server leading", func() bool { return strings.Contains(a.log.String(), `"leading"`) })
	b = startSharedServer(t, bin, addrB, dirB, args...)
	f = &fleet{t: t, url: "http://" + addrB, rt: rt, bin: bin, dataDir: dirA,
		creds: aws.Credentials{AccessKeyID: processKey, SecretAccessKey: processSecret}}
	t.Cleanup(func() {
		a.kill9()
		b.kill9()
		f.terminateAll()
	})
	f.init()
	return f, a, b, e, dirA, dirB
}

// TestKillLeaderServerDuringScaleOut kills the leading server with
// SIGKILL while the instances a scale-out asked for are launching. The
// other server takes over and completes exactly the launches needed: no
// instance launched twice, no agent process left behind.
func TestKillLeaderServerDuringScaleOut(t *testing.T) {
	f, a, b, _, dirA, dirB := twoServers(t)
	n := *instancesFlag
	const more = 2
	f.setup(n, false)
	before := f.agents()

	ctx := context.Background()
	if _, err := f.c.UpdateService(ctx, &ecs.UpdateServiceInput{Cluster: aws.String(f.cluster), Service: aws.String(serviceName),
		DesiredCount: aws.Int32(int32(n + more))}); err != nil {
		t.Fatal(err)
	}
	f.services[serviceName] = int32(n + more)
	launch := f.launching(before)
	if strings.Contains(b.log.String(), `"leading"`) {
		t.Fatal("the second server leads before the kill")
	}
	t.Logf("killing the leader while %s", launch.what)
	a.kill9()
	killed := time.Now()
	f.converge("leader killed during a scale-out", scaled(rolloutDeadline), f.sessions(n+more))
	f.verify("leader killed during a scale-out")
	if !strings.Contains(b.log.String(), `"leading"`) {
		t.Errorf("the surviving server never led:\n%s", b.log)
	}
	// Exactly the launches needed: n+more instances ever registered, all
	// ACTIVE; the kill landed in a launch (one went ACTIVE after it).
	var all, active, late int
	for _, in := range f.h.Instances() {
		all++
		if len(in.States) > 0 && in.States[len(in.States)-1].Status == "ACTIVE" {
			active++
		}
		if _, old := before[in.Arn]; old {
			continue
		}
		for _, st := range in.States {
			if st.Status == "ACTIVE" && st.At.After(killed) {
				late++
				break
			}
		}
	}
	if all != n+more || active != n+more {
		t.Errorf("%d instances registered, %d ACTIVE; want %d and %d (no launch made twice)", all, active, n+more, n+more)
	}
	if late == 0 {
		t.Errorf("no new instance went ACTIVE after the kill at %s: the kill did not land in the launches", killed.Format(time.RFC3339Nano))
	}
	agents := f.agents()
	if len(agents) != n+more {
		t.Errorf("%d agent processes serve instances, want %d", len(agents), n+more)
	}
	if a, ok := agents[registeredAs(filepath.Join(launch.dir, "agent.log"))]; !ok || a.pid != launch.pid {
		t.Errorf("the agent launching at the kill (%d in %s) is not the one in service: %v", launch.pid, launch.dir, agents)
	}
	f.checkNoLeak("leader killed during a scale-out", filepath.Join(dirA, "instances"), filepath.Join(dirB, "instances"))
	// How the survivor took the launches over, for the verbose log.
	for l := range strings.SplitSeq(b.log.String(), "\n") {
		if strings.Contains(l, "adopted a launched instance") || strings.Contains(l, "found the agent of a local instance") {
			t.Log(l)
		}
	}
}

// inotifyCreated blocks until a name is created in dir, and returns it.
type dirWatch struct {
	fd int
}

func watchDir(t *testing.T, dir string) *dirWatch {
	t.Helper()
	fd, err := syscall.InotifyInit1(syscall.IN_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := syscall.InotifyAddWatch(fd, dir, syscall.IN_CREATE); err != nil {
		syscall.Close(fd)
		t.Fatal(err)
	}
	w := &dirWatch{fd: fd}
	t.Cleanup(w.close)
	return w
}

func (w *dirWatch) close() {
	if w.fd >= 0 {
		syscall.Close(w.fd)
		w.fd = -1
	}
}

// next returns the next name created.
func (w *dirWatch) next() (string, error) {
	var buf [4096]byte
	for {
		n, err := syscall.Read(w.fd, buf[:])
		if err != nil {
			return "", err
		}
		for off := 0; off+syscall.SizeofInotifyEvent <= n; {
			ev := (*syscall.InotifyEvent)(unsafe.Pointer(&buf[off]))
			name := buf[off+syscall.SizeofInotifyEvent : off+syscall.SizeofInotifyEvent+int(ev.Len)]
			off += syscall.SizeofInotifyEvent + int(ev.Len)
			if s := strings.TrimRight(string(name), "\x00"); s != "" {
				return s, nil
			}
		}
	}
}

// TestKillBetweenLaunchAndRecord kills the server after the local
// provisioner started an instance's agent and before the server recorded
// the instance's handle. The window is made certain from outside: when
// the instance's directory appears (the record was written before the
// launch) the etcd member is frozen with SIGSTOP, so the handle cannot be
// written; once the agent runs the server is killed and etcd resumed.
// The restarted server adopts the agent (the record names the instance
// by its ID, which is the local handle): no second agent, no duplicate
// instance, and terminating the adopted instance leaves nothing behind.
func TestKillBetweenLaunchAndRecord(t *testing.T) {
	skipHollow(t, "a server process with the local provisioner is killed; hollow agents would live in it")
	rt := testenv.RequireDocker(t)
	bin := testenv.CapstanBinary(t)
	e := startEtcdProcess(t, bin)
	st := e.openStore(t)
	dir, addr := t.TempDir(), freeAddr(t)
	args := append(e.args, "--secrets-key-file", filepath.Join(t.TempDir(), "secrets.key"))
	p := startSharedServer(t, bin, addr, dir, args...)
	f := &fleet{t: t, url: "http://" + addr, rt: rt, bin: bin, dataDir: dir,
		creds: aws.Credentials{AccessKeyID: processKey, SecretAccessKey: processSecret}}
	t.Cleanup(func() {
		e.cmd.Process.Signal(syscall.SIGCONT)
		p.kill9()
		f.terminateAll()
	})
	f.init()
	n := *instancesFlag
	f.setup(n, false)
	root := filepath.Join(dir, "instances")
	w := watchDir(t, root)

	ctx := context.Background()
	if _, err := f.c.UpdateService(ctx, &ecs.UpdateServiceInput{Cluster: aws.String(f.cluster), Service: aws.String(serviceName),
		DesiredCount: aws.Int32(int32(n + 1))}); err != nil {
		t.Fatal(err)
	}
	f.services[serviceName] = int32(n + 1)
	id, err := w.next()
	if err != nil {
		t.Fatal(err)
	}
	if err := e.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	frozen := time.Now()
	w.close()
	instDir := filepath.Join(root, id)
	var pid int
	eventually(t, 30*time.Second, "the agent of "+id+" started", func() bool {
		b, err := os.ReadFile(filepath.Join(instDir, "pid"))
		pid, _ = strconv.Atoi(strings.TrimSpace(string(b)))
		return err == nil && pid > 0 && syscall.Kill(pid, 0) == nil
	})
	p.kill9()
	t.Logf("etcd frozen %.0f ms after %s appeared; agent %d started; server killed", float64(time.Since(frozen).Milliseconds()), id, pid)
	if err := e.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	m, err := f.managedInstance(st, id)
	if err != nil {
		t.Fatalf("record of the instance launched at the kill: %v", err)
	}
	if m.Value.Handle != "" {
		t.Fatalf("the handle %q was recorded before the kill: the kill did not land between launch and record", m.Value.Handle)
	}

	p = startSharedServer(t, bin, addr, dir, args...)
	f.converge("server killed between launch and record", serverKillDeadline, f.sessions(n+1))
	f.verify("server killed between launch and record")
	m, err = f.managedInstance(st, id)
	if err != nil {
		t.Fatalf("record of the instance launched at the kill, after the restart: %v", err)
	}
	if m.Value.Handle != id {
		t.Errorf("after the restart the record's handle is %q, want %q (adopted)", m.Value.Handle, id)
	}
	agents := f.agents()
	adopted := ""
	for arn, a := range agents {
		if a.dir == instDir {
			adopted = arn
			if a.pid != pid {
				t.Errorf("instance %s runs agent %d; the one started before the kill was %d", arn, a.pid, pid)
			}
		}
	}
	if adopted == "" {
		t.Fatalf("the agent started before the kill serves no instance: %v", agents)
	}
	if len(agents) != n+1 || len(f.h.Instances()) != n+1 {
		t.Errorf("%d agents, %d instances ever registered; want %d each", len(agents), len(f.h.Instances()), n+1)
	}
	f.checkNoLeak("server killed between launch and record", root)
	if !strings.Contains(p.log.String(), "adopted a launched instance") {
		t.Logf("the restarted server's log does not mention the adoption (the record may have been adopted another way)")
	}

	// Retiring the adopted instance terminates its agent: it is tracked.
	if _, err := f.c.DeregisterContainerInstance(ctx, &ecs.DeregisterContainerInstanceInput{Cluster: aws.String(f.cluster),
		ContainerInstance: aws.String(adopted), Force: aws.Bool(true)}); err != nil {
		t.Fatal(err)
	}
	f.converge("adopted instance deregistered", scaled(rolloutDeadline), gone(adopted), f.sessions(n+1))
	eventually(t, 60*time.Second, "the adopted instance terminated", func() bool {
		_, err := os.Stat(instDir)
		return errors.Is(err, os.ErrNotExist) && syscall.Kill(pid, 0) != nil
	})
	f.checkNoLeak("adopted instance deregistered", root)
	f.verify("adopted instance deregistered")
}
