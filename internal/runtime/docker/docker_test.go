package docker_test

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/client"

	"github.com/capstanhq/capstan/internal/runtime"
	"github.com/capstanhq/capstan/internal/runtime/docker"
	"github.com/capstanhq/capstan/internal/testenv"
)

// fixture is one test's runtime, image and labels; its containers go at cleanup.
type fixture struct {
	t      *testing.T
	rt     *docker.Runtime
	image  string
	labels map[string]string
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	rt := testenv.RequireDocker(t)
	return &fixture{t: t, rt: rt, image: testenv.BusyboxImage(t), labels: testenv.UniqueLabels(t, rt)}
}

func (f *fixture) spec(cmd ...string) runtime.ContainerSpec {
	labels := map[string]string{}
	for k, v := range f.labels {
		labels[k] = v
	}
	return runtime.ContainerSpec{Image: f.image, Labels: labels, Cmd: cmd}
}

// run creates and starts a container.
func (f *fixture) run(s runtime.ContainerSpec) string {
	f.t.Helper()
	ctx := f.t.Context()
	id, err := f.rt.Create(ctx, s)
	if err != nil {
		f.t.Fatal(err)
	}
	if err := f.rt.Start(ctx, id); err != nil {
		f.t.Fatal(err)
	}
	return id
}

func (f *fixture) exec(id string, cmd ...string) (int, string) {
	f.t.Helper()
	code, out, err := f.rt.Exec(f.t.Context(), id, cmd)
	if err != nil {
		f.t.Fatalf("exec %q: %v", cmd, err)
	}
	return code, string(out)
}

// waitFor polls cond until it holds or a generous deadline passes.
func waitFor(t *testing.T, what string, cond func() (bool, error)) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		ok, err := cond()
		if err != nil {
			t.Fatalf("waiting for %s: %v", what, err)
		}
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (f *fixture) waitState(id string, cond func(runtime.Container) bool, what string) runtime.Container {
	f.t.Helper()
	var c runtime.Container
	waitFor(f.t, what, func() (bool, error) {
		var err error
		c, err = f.rt.Inspect(f.t.Context(), id)
		return err == nil && cond(c), err
	})
	return c
}

func TestContainerLifecycle(t *testing.T) {
	f := newFixture(t)
	ctx := t.Context()

	roDir, rwDir := t.TempDir(), t.TempDir()
	if err := os.WriteFile(filepath.Join(roDir, "greeting"), []byte("from the host"), 0o644); err != nil {
		t.Fatal(err)
	}
	s := f.spec("sh", "-c", "echo to-stdout; echo to-stderr >&2; exec nc -ll -p 8080 -e echo hi")
	s.Env = []string{"FOO=bar baz"}
	s.Ports = []runtime.PortBinding{{ContainerPort: 8080, HostIP: "127.0.0.1"}}
	s.Mounts = []runtime.Mount{
		{Source: roDir, Target: "/ro", ReadOnly: true},
		{Source: rwDir, Target: "/rw"},
	}
	s.Tmpfs = []runtime.Tmpfs{{Target: "/scratch", SizeBytes: 1 << 20, Options: []string{"noexec"}}}
	id := f.run(s)

	c := f.waitState(id, func(c runtime.Container) bool { return c.State == runtime.StateRunning }, "running")
	if c.ID != id || c.Image != f.image || c.ImageID == "" || c.Pid == 0 || c.IPAddress == "" || c.StartedAt.IsZero() {
		t.Errorf("inspect = %+v", c)
	}
	for k, v := range f.labels {
		if c.Labels[k] != v {
			t.Errorf("label %s = %q, want %q", k, c.Labels[k], v)
		}
	}
	if len(c.Ports) != 1 || c.Ports[0].ContainerPort != 8080 || c.Ports[0].Protocol != "tcp" || c.Ports[0].HostPort == 0 || c.Ports[0].HostIP != "127.0.0.1" {
		t.Fatalf("ports = %+v, want 8080/tcp on a dynamic 127.0.0.1 port", c.Ports)
	}

	t.Run("published port", func(t *testing.T) {
		addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(c.Ports[0].HostPort))
		// The listener may come up a moment after the container starts.
		var got string
		waitFor(t, "server reply on "+addr, func() (bool, error) {
			conn, err := net.DialTimeout("tcp", addr, time.Second)
			if err != nil {
				return false, nil
			}
			defer conn.Close()
			conn.SetDeadline(time.Now().Add(5 * time.Second))
			b, _ := io.ReadAll(conn)
			got = string(b)
			return got != "", nil
		})
		if strings.TrimSpace(got) != "hi" {
			t.Errorf("reply = %q, want hi", got)
		}
	})

	t.Run("exec", func(t *testing.T) {
		// Two pipes: the order between them is not kept.
		code, out := f.exec(id, "sh", "-c", `echo "$FOO"; echo oops >&2; exit 3`)
		if code != 3 || len(out) != len("bar baz\noops\n") || !strings.Contains(out, "bar baz\n") || !strings.Contains(out, "oops\n") {
			t.Errorf("exec = %d %q, want 3 with env and stderr", code, out)
		}
	})

	t.Run("mounts", func(t *testing.T) {
		if code, out := f.exec(id, "cat", "/ro/greeting"); code != 0 || out != "from the host" {
			t.Errorf("read ro mount = %d %q", code, out)
		}
		code, out := f.exec(id, "touch", "/ro/new")
		if code == 0 || !strings.Contains(out, "Read-only file system") {
			t.Errorf("write to ro mount = %d %q, want failure", code, out)
		}
		if _, err := os.Stat(filepath.Join(roDir, "new")); err == nil {
			t.Error("write to ro mount reached the host")
		}
		if code, out := f.exec(id, "sh", "-c", "echo written > /rw/out"); code != 0 {
			t.Errorf("write to rw mount = %d %q", code, out)
		}
		if b, err := os.ReadFile(filepath.Join(rwDir, "out")); err != nil || string(b) != "written\n" {
			t.Errorf("rw mount on host = %q %v", b, err)
		}
		_, out = f.exec(id, "mount")
		var line string
		for l := range strings.Lines(out) {
			if strings.Contains(l, " /scratch ") {
				line = l
			}
		}
		if !strings.Contains(line, "tmpfs") || !strings.Contains(line, "size=1024k") || !strings.Contains(line, "noexec") {
			t.Errorf("tmpfs mount = %q, want tmpfs size=1024k noexec", line)
		}
	})

	t.Run("logs", func(t *testing.T) {
		var got string
		waitFor(t, "logs", func() (bool, error) {
			rc, err := f.rt.Logs(ctx, id, 0)
			if err != nil {
				return false, err
			}
			defer rc.Close()
			b, err := io.ReadAll(rc)
			got = string(b)
			return strings.Contains(got, "to-stderr"), err
		})
		if got != "to-stdout\nto-stderr\n" && got != "to-stderr\nto-stdout\n" {
			t.Errorf("logs = %q, want both streams without framing", got)
		}
		rc, err := f.rt.Logs(ctx, id, 1)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(rc)
		rc.Close()
		if strings.Count(string(b), "\n") != 1 {
			t.Errorf("logs tail 1 = %q", b)
		}
	})

	t.Run("stats", func(t *testing.T) {
		st, err := f.rt.Stats(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if st.MemoryUsageBytes == 0 || st.MemoryLimitBytes == 0 || st.CPUTotalNanos == 0 || st.Pids == 0 || st.Time.IsZero() || len(st.Raw) == 0 {
			t.Errorf("stats = %+v", st)
		}
	})

	t.Run("list", func(t *testing.T) {
		cs, err := f.rt.List(ctx, f.labels)
		if err != nil {
			t.Fatal(err)
		}
		if len(cs) != 1 || cs[0].ID != id || cs[0].State != runtime.StateRunning {
			t.Errorf("list = %+v, want just %s", cs, id)
		}
		other := map[string]string{testenv.TestLabel: f.labels[testenv.TestLabel] + "-other"}
		if cs, err := f.rt.List(ctx, other); err != nil || len(cs) != 0 {
			t.Errorf("list other labels = %v %v, want none", cs, err)
		}
	})

	if err := f.rt.Remove(ctx, id); err != nil {
		t.Fatal(err)
	}
	if _, err := f.rt.Inspect(ctx, id); !errors.Is(err, runtime.ErrNotFound) {
		t.Errorf("inspect after remove: %v, want ErrNotFound", err)
	}
}

// TestCreateMapsSpec checks the engine receives and applies the options a
// task definition can set.
func TestCreateMapsSpec(t *testing.T) {
	f := newFixture(t)
	ctx := t.Context()
	s := f.spec("sleep", "1000")
	s.Name = "capstan-test-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	s.Entrypoint = []string{"/bin/env", "--"}
	s.WorkingDir = "/tmp"
	s.User = "nobody"
	s.Hostname = "task-host"
	s.CPUShares = 256
	s.MemoryLimit = 64 << 20
	s.MemoryReservation = 32 << 20
	s.NetworkMode = "bridge"
	s.ExtraHosts = []string{"daemon:169.254.172.2"}
	s.DNS = []string{"10.0.0.53"}
	s.CapAdd = []string{"NET_ADMIN"}
	s.CapDrop = []string{"MKNOD"}
	s.Devices = []runtime.Device{{HostPath: "/dev/null", ContainerPath: "/dev/nothing", Permissions: "rw"}}
	s.Init = true
	s.ReadonlyRootfs = true
	s.Ulimits = []runtime.Ulimit{{Name: "nofile", Soft: 1000, Hard: 2000}}
	s.Sysctls = map[string]string{"net.core.somaxconn": "511"}
	s.IpcMode = "shareable"
	s.ShmSizeBytes = 8 << 20
	s.LogDriver = "json-file"
	s.LogOptions = map[string]string{"max-size": "1m"}
	s.StopSignal = "SIGUSR1"
	s.StopTimeout = 1500 * time.Millisecond
	id := f.run(s)

	raw, err := f.rt.Client().ContainerInspect(ctx, id, client.ContainerInspectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cfg, hc := raw.Container.Config, raw.Container.HostConfig
	checks := []struct {
		name      string
		got, want any
	}{
		{"name", strings.TrimPrefix(raw.Container.Name, "/"), s.Name},
		{"entrypoint", fmt.Sprint(cfg.Entrypoint), "[/bin/env --]"},
		{"cmd", fmt.Sprint(cfg.Cmd), "[sleep 1000]"},
		{"stop signal", cfg.StopSignal, "SIGUSR1"},
		{"stop timeout", fmt.Sprint(*cfg.StopTimeout), "2"},
		{"cpu shares", hc.CPUShares, int64(256)},
		{"memory", hc.Memory, int64(64 << 20)},
		{"memory reservation", hc.MemoryReservation, int64(32 << 20)},
		{"cap add", fmt.Sprint(hc.CapAdd), "[CAP_NET_ADMIN]"},
		{"cap drop", fmt.Sprint(hc.CapDrop), "[CAP_MKNOD]"},
		{"devices", fmt.Sprint(hc.Devices), "[{/dev/null /dev/nothing rw}]"},
		{"init", hc.Init != nil && *hc.Init, true},
		{"ulimits", fmt.Sprint(*hc.Ulimits[0]), "{nofile 2000 1000}"},
		{"ipc", string(hc.IpcMode), "shareable"},
		{"shm", hc.ShmSize, int64(8 << 20)},
		{"log driver", hc.LogConfig.Type, "json-file"},
		{"log max-size", hc.LogConfig.Config["max-size"], "1m"},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("%s = %v, want %v", c.name, c.got, c.want)
		}
	}

	f.waitState(id, func(c runtime.Container) bool { return c.State == runtime.StateRunning }, "running")
	execs := []struct {
		cmd  string
		want string
	}{
		{"pwd", "/tmp\n"},
		{"id -un", "nobody\n"},
		{"hostname", "task-host\n"},
		{"grep daemon /etc/hosts", "169.254.172.2\tdaemon\n"},
		{"grep nameserver /etc/resolv.conf", "nameserver 10.0.0.53\n"},
		{"grep 'open files' /proc/1/limits | tr -s ' '", "Max open files 1000 2000 files \n"},
		{"cat /proc/sys/net/core/somaxconn", "511\n"},
		{"touch /not-here 2>/dev/null || echo read-only", "read-only\n"},
		{"test -c /dev/nothing && echo device", "device\n"},
	}
	for _, e := range execs {
		if code, out := f.exec(id, "sh", "-c", e.cmd); code != 0 || out != e.want {
			t.Errorf("%s = %d %q, want %q", e.cmd, code, out, e.want)
		}
	}
	// With init, PID 1 is the engine's init, not sleep.
	if _, out := f.exec(id, "cat", "/proc/1/comm"); strings.TrimSpace(out) == "sleep" {
		t.Errorf("pid 1 is %q, want an init process", out)
	}
}

func TestNetworkModes(t *testing.T) {
	f := newFixture(t)
	ctx := t.Context()

	netName := "capstan-test-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	if _, err := f.rt.Client().NetworkCreate(ctx, netName, client.NetworkCreateOptions{Driver: "bridge", Labels: f.labels}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// Containers first: the engine keeps a network that has endpoints.
		testenv.RemoveLabeled(t, f.rt, f.labels)
		f.rt.Client().NetworkRemove(context.Background(), netName, client.NetworkRemoveOptions{})
	})

	server := f.spec("nc", "-ll", "-p", "8080", "-e", "echo", "hi")
	server.NetworkMode = netName
	serverID := f.run(server)
	c := f.waitState(serverID, func(c runtime.Container) bool { return c.State == runtime.StateRunning }, "running")
	if c.IPAddress == "" {
		t.Errorf("user network: no IP address in %+v", c)
	}

	// A container joining another's namespace reaches it on localhost.
	joined := f.spec("sleep", "1000")
	joined.NetworkMode = "container:" + serverID
	joinedID := f.run(joined)
	waitFor(t, "reply over the shared namespace", func() (bool, error) {
		code, out, err := f.rt.Exec(ctx, joinedID, []string{"sh", "-c", "nc 127.0.0.1 8080 </dev/null"})
		return code == 0 && strings.TrimSpace(string(out)) == "hi", err
	})

	none := f.spec("sleep", "1000")
	none.NetworkMode = "none"
	noneID := f.run(none)
	if c := f.waitState(noneID, func(c runtime.Container) bool { return c.State == runtime.StateRunning }, "running"); c.IPAddress != "" {
		t.Errorf("network none: IP %q", c.IPAddress)
	}

	host := f.spec("sleep", "1000")
	host.NetworkMode = "host"
	host.PidMode = "host"
	hostID := f.run(host)
	f.waitState(hostID, func(c runtime.Container) bool { return c.State == runtime.StateRunning }, "running")
	hostname, _ := os.Hostname()
	if _, out := f.exec(hostID, "hostname"); strings.TrimSpace(out) != hostname {
		t.Errorf("host network: hostname %q, want %q", out, hostname)
	}
	// In the host PID namespace this test process is visible.
	if code, out := f.exec(hostID, "test", "-d", "/proc/"+strconv.Itoa(os.Getpid())); code != 0 {
		t.Errorf("host pid: own pid not visible (%d %q)", code, out)
	}

	// Created only: some sandboxes refuse to start privileged containers.
	priv := f.spec("true")
	priv.Privileged = true
	privID, err := f.rt.Create(ctx, priv)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := f.rt.Client().ContainerInspect(ctx, privID, client.ContainerInspectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !raw.Container.HostConfig.Privileged {
		t.Error("privileged not set")
	}
}

func TestEventsStartAndDie(t *testing.T) {
	f := newFixture(t)
	ctx, cancel := context.WithCancel(t.Context())
	evs, errc := f.rt.Events(ctx)
	id := f.run(f.spec("sh", "-c", "exit 7"))

	var seen []string
	deadline := time.After(60 * time.Second)
	for done := false; !done; {
		select {
		case ev, ok := <-evs:
			if !ok {
				t.Fatalf("events ended: %v", <-errc)
			}
			if ev.ContainerID != id {
				continue
			}
			seen = append(seen, ev.Action)
			if ev.Labels[testenv.TestLabel] != f.labels[testenv.TestLabel] || ev.Time.IsZero() {
				t.Errorf("event %+v lacks labels or time", ev)
			}
			if ev.Action == runtime.EventDie {
				if ev.ExitCode != 7 {
					t.Errorf("die exit code = %d, want 7", ev.ExitCode)
				}
				if _, ok := ev.Labels["exitCode"]; ok {
					t.Error("engine attributes leaked into labels")
				}
				done = true
			}
		case <-deadline:
			t.Fatalf("no die event; saw %v", seen)
		}
	}
	if strings.Join(seen, ",") != "create,start,die" {
		t.Errorf("events = %v, want create,start,die", seen)
	}
	cancel()
	for range evs {
	}
	if err := <-errc; err != nil {
		t.Errorf("error after cancel = %v, want nil", err)
	}
}

func TestStopKillsAfterTimeout(t *testing.T) {
	f := newFixture(t)
	ctx := t.Context()
	id := f.run(f.spec("sh", "-c", `trap "" TERM; sleep 1000`))
	f.waitState(id, func(c runtime.Container) bool { return c.State == runtime.StateRunning }, "running")
	if err := f.rt.Stop(ctx, id, time.Second); err != nil {
		t.Fatal(err)
	}
	c, err := f.rt.Inspect(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if c.State != runtime.StateExited || c.ExitCode != 137 || c.FinishedAt.IsZero() {
		t.Errorf("after stop: state %s exit %d finished %v, want exited 137", c.State, c.ExitCode, c.FinishedAt)
	}
	if err := f.rt.Stop(ctx, id, time.Second); err != nil {
		t.Errorf("stop of a stopped container: %v", err)
	}
	created, err := f.rt.Create(ctx, f.spec("true"))
	if err != nil {
		t.Fatal(err)
	}
	if err := f.rt.Stop(ctx, created, time.Second); err != nil {
		t.Errorf("stop of a never started container: %v", err)
	}
}

func TestStopGraceful(t *testing.T) {
	f := newFixture(t)
	ctx := t.Context()
	// PID 1 ignores a TERM it has no handler for, so the stop must wait
	// until the trap is in place, which the marker file says.
	id := f.run(f.spec("sh", "-c", `trap "exit 0" TERM; touch /trapped; sleep 1000 & wait`))
	waitFor(t, "the TERM trap", func() (bool, error) {
		code, _, err := f.rt.Exec(ctx, id, []string{"test", "-e", "/trapped"})
		return err == nil && code == 0, nil
	})
	if err := f.rt.Stop(ctx, id, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	if c, err := f.rt.Inspect(ctx, id); err != nil || c.ExitCode != 0 {
		t.Errorf("after stop: exit %d %v, want 0", c.ExitCode, err)
	}
}

func TestHealthcheck(t *testing.T) {
	f := newFixture(t)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	evs, _ := f.rt.Events(ctx)

	check := func(test ...string) *runtime.Healthcheck {
		return &runtime.Healthcheck{Test: test, Interval: 200 * time.Millisecond, Timeout: 5 * time.Second, Retries: 1}
	}
	good := f.spec("sleep", "1000")
	good.Healthcheck = check("CMD-SHELL", "test -d /tmp")
	bad := f.spec("sleep", "1000")
	bad.Healthcheck = check("CMD", "false")
	none := f.spec("sleep", "1000")
	none.Healthcheck = &runtime.Healthcheck{Test: []string{"NONE"}}
	goodID, badID, noneID := f.run(good), f.run(bad), f.run(none)

	f.waitState(goodID, func(c runtime.Container) bool { return c.Health == runtime.HealthHealthy }, "healthy")
	f.waitState(badID, func(c runtime.Container) bool { return c.Health == runtime.HealthUnhealthy }, "unhealthy")
	if c, err := f.rt.Inspect(ctx, noneID); err != nil || c.Health != runtime.HealthNone {
		t.Errorf("no healthcheck: health %q %v", c.Health, err)
	}

	want := map[string]string{goodID: runtime.HealthHealthy, badID: runtime.HealthUnhealthy}
	deadline := time.After(60 * time.Second)
	for len(want) > 0 {
		select {
		case ev := <-evs:
			if ev.Action == runtime.EventHealth && want[ev.ContainerID] == ev.Health {
				delete(want, ev.ContainerID)
			}
		case <-deadline:
			t.Fatalf("missing health events: %v", want)
		}
	}
}

func TestPullFromLocalRegistry(t *testing.T) {
	f := newFixture(t)
	ctx := t.Context()

	untag := func(ref string) {
		t.Cleanup(func() {
			// Untag only: the pulled image shares its ID with the busybox image.
			f.rt.Client().ImageRemove(context.Background(), ref, client.ImageRemoveOptions{})
		})
	}

	t.Run("anonymous", func(t *testing.T) {
		addr := testenv.StartRegistry(t, "", "")
		ref := addr + "/capstan/busybox:v1"
		testenv.PushImage(t, f.rt, f.image, ref)
		untag(ref)
		if err := f.rt.Pull(ctx, ref, nil); err != nil {
			t.Fatal(err)
		}
		img, err := f.rt.Image(ctx, ref)
		if err != nil {
			t.Fatal(err)
		}
		if len(img.RepoDigests) == 0 || img.Size == 0 || img.Created.IsZero() {
			t.Errorf("pulled image = %+v", img)
		}
		s := f.spec("echo", "pulled")
		s.Image = ref
		id := f.run(s)
		c := f.waitState(id, func(c runtime.Container) bool { return c.State == runtime.StateExited }, "exit")
		if c.ExitCode != 0 {
			t.Errorf("exit code %d", c.ExitCode)
		}
	})

	t.Run("basic auth", func(t *testing.T) {
		addr := testenv.StartRegistry(t, "alice", "s3cret")
		ref := addr + "/capstan/busybox:v2"
		testenv.PushImage(t, f.rt, f.image, ref)
		untag(ref)

		err := f.rt.Pull(ctx, ref, &runtime.RegistryAuth{Username: "alice", Password: "wrong", ServerAddress: addr})
		if err == nil || !strings.Contains(strings.ToLower(err.Error()), "unauthorized") {
			t.Errorf("pull with a wrong password: %v, want unauthorized", err)
		}
		if err := f.rt.Pull(ctx, ref, nil); err == nil {
			t.Error("pull without credentials succeeded")
		}
		if err := f.rt.Pull(ctx, ref, &runtime.RegistryAuth{Username: "alice", Password: "s3cret", ServerAddress: addr}); err != nil {
			t.Fatal(err)
		}
		if _, err := f.rt.Image(ctx, ref); err != nil {
			t.Error(err)
		}
	})

	t.Run("unknown image", func(t *testing.T) {
		addr := testenv.StartRegistry(t, "", "")
		err := f.rt.Pull(ctx, addr+"/capstan/nothing:latest", nil)
		if err == nil || !strings.Contains(err.Error(), "capstan/nothing") || !strings.Contains(err.Error(), "not found") {
			t.Errorf("pull unknown: %v, want a not found error naming the image", err)
		}
		if !errors.Is(err, runtime.ErrNotFound) {
			t.Errorf("pull unknown: %v does not match ErrNotFound", err)
		}
	})

	t.Run("bad reference", func(t *testing.T) {
		if err := f.rt.Pull(ctx, "Not A Reference", nil); err == nil {
			t.Error("pull of an invalid reference succeeded")
		}
	})
}

func TestImagesAndRemoveImage(t *testing.T) {
	f := newFixture(t)
	ctx := t.Context()

	// A throwaway image of its own, so removing it cannot disturb others.
	ref := fmt.Sprintf("capstan-test/throwaway:%d", time.Now().UnixNano())
	importImage(t, f.rt, ref)
	img, err := f.rt.Image(ctx, ref)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		f.rt.Client().ImageRemove(context.Background(), img.ID, client.ImageRemoveOptions{Force: true})
	})
	imgs, err := f.rt.Images(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var listed bool
	for _, i := range imgs {
		listed = listed || (i.ID == img.ID && len(i.RepoTags) == 1 && i.RepoTags[0] == ref)
	}
	if !listed {
		t.Errorf("images %+v lack %s", imgs, ref)
	}
	// A second tag: removal by ID must still take the image.
	if _, err := f.rt.Client().ImageTag(ctx, client.ImageTagOptions{Source: ref, Target: ref + "-again"}); err != nil {
		t.Fatal(err)
	}

	s := f.spec("true")
	s.Image = ref
	id, err := f.rt.Create(ctx, s)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.rt.RemoveImage(ctx, img.ID); err == nil {
		t.Error("removed an image a container uses")
	}
	if _, err := f.rt.Image(ctx, ref); err != nil {
		t.Errorf("image gone after refused removal: %v", err)
	}
	if err := f.rt.Remove(ctx, id); err != nil {
		t.Fatal(err)
	}
	if err := f.rt.RemoveImage(ctx, img.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := f.rt.Image(ctx, img.ID); !errors.Is(err, runtime.ErrNotFound) {
		t.Errorf("image after removal: %v, want ErrNotFound", err)
	}
	if err := f.rt.RemoveImage(ctx, img.ID); !errors.Is(err, runtime.ErrNotFound) {
		t.Errorf("remove again: %v, want ErrNotFound", err)
	}
}

// importImage makes a one-file image under ref.
func importImage(t *testing.T, rt *docker.Runtime, ref string) {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	data := []byte(ref)
	tw.WriteHeader(&tar.Header{Name: "marker", Mode: 0o644, Size: int64(len(data))})
	tw.Write(data)
	tw.Close()
	rc, err := rt.Client().ImageImport(t.Context(), client.ImageImportSource{Source: &buf, SourceName: "-"}, ref, client.ImageImportOptions{})
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, rc)
	rc.Close()
}

func TestNotFound(t *testing.T) {
	rt := testenv.RequireDocker(t)
	ctx := t.Context()
	const id = "capstan-test-no-such-container"
	calls := map[string]error{
		"remove": rt.Remove(ctx, id),
		"stop":   rt.Stop(ctx, id, time.Second),
		"start":  rt.Start(ctx, id),
	}
	_, calls["inspect"] = rt.Inspect(ctx, id)
	_, calls["stats"] = rt.Stats(ctx, id)
	_, calls["logs"] = rt.Logs(ctx, id, 0)
	_, _, calls["exec"] = rt.Exec(ctx, id, []string{"true"})
	_, calls["image"] = rt.Image(ctx, "capstan-test/no-such-image:latest")
	for op, err := range calls {
		if !errors.Is(err, runtime.ErrNotFound) {
			t.Errorf("%s: %v, want ErrNotFound", op, err)
		} else if !strings.Contains(err.Error(), "capstan-test/no-such-") && !strings.Contains(err.Error(), id) {
			t.Errorf("%s: %q does not name what is missing", op, err)
		}
	}
}

func TestInfo(t *testing.T) {
	rt := testenv.RequireDocker(t)
	info, err := rt.Info(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if info.Name != "docker" || info.Version == "" || info.APIVersion == "" || info.CPUs < 1 ||
		info.MemoryBytes <= 0 || info.OS != "linux" || info.Arch == "" || info.KernelVersion == "" {
		t.Errorf("info = %+v", info)
	}
}
