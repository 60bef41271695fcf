package daemonnet_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/capstanhq/capstan/internal/agent/daemonnet"
	"github.com/capstanhq/capstan/internal/agent/engine"
	"github.com/capstanhq/capstan/internal/api/shapes"
	"github.com/capstanhq/capstan/internal/protocol"
	"github.com/capstanhq/capstan/internal/runtime"
)

// holder returns the instance's namespace holder once exactly one runs
// that is not one of not.
func (e *env) holder(not ...string) runtime.Container {
	e.t.Helper()
	var h runtime.Container
	eventually(e.t, "one running namespace holder", func() (bool, string) {
		cs, err := e.rt.List(e.t.Context(), map[string]string{engine.LabelInstance: e.instance, daemonnet.LabelRole: daemonnet.RoleNamespace})
		if err != nil {
			return false, err.Error()
		}
		if len(cs) != 1 || cs[0].State != runtime.StateRunning {
			return false, strconv.Itoa(len(cs)) + " holders"
		}
		for _, id := range not {
			if cs[0].ID == id {
				return false, "still the old holder"
			}
		}
		h = cs[0]
		return true, ""
	})
	return h
}

// hostGet fetches http://addr:port/ from the test process, on the host.
func hostGet(addr, port string) (bool, string) {
	c := http.Client{Timeout: 2 * time.Second}
	resp, err := c.Get("http://" + net.JoinHostPort(addr, port) + "/")
	if err != nil {
		return false, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode == http.StatusOK, string(b)
}

func containsBody(ok bool, out, body string) (bool, string) {
	return ok && strings.Contains(out, body), out
}

// TestDaemonsShareOneAddress: daemon tasks share the holder's namespace and
// its static address; each reaches the others on loopback, and application
// tasks (bridge and host mode) and the host reach them as "daemon".
func TestDaemonsShareOneAddress(t *testing.T) {
	e := newEnv(t)
	addr := e.setup.Address.String()
	h := e.holder()
	if h.IPAddress != addr || e.setup.DaemonNetworkMode != "container:"+h.Name || e.setup.BridgeNetwork != "" || e.setup.InstanceNetwork == "" {
		t.Fatalf("setup %+v, holder %+v", e.setup, h)
	}

	statsd := daemonTask(e.ctr("statsd", "nc", "-ll", "-p", "8125", "-e", "cat"))
	web := daemonTask(e.httpd("web", "8080", "hello-from-daemon"))
	e.run(statsd, web)
	cs := e.container(e.waitStatus(statsd.Arn, engine.StatusRunning), "statsd")
	cw := e.container(e.waitStatus(web.Arn, engine.StatusRunning), "web")
	for _, c := range []runtime.Container{cs, cw} {
		if c.NetworkMode != "container:"+h.ID {
			t.Fatalf("%s runs in %q, not the holder's namespace", c.Name, c.NetworkMode)
		}
	}
	eventually(t, "web reaches statsd on 127.0.0.1:8125", func() (bool, string) {
		ok, out := e.exec(cw.ID, "sh", "-c", "echo ping | nc -w 2 127.0.0.1 8125")
		return ok && strings.Contains(out, "ping"), out
	})
	eventually(t, "statsd reaches web on 127.0.0.1:8080", func() (bool, string) {
		ok, out := e.httpGet(cs.ID, "127.0.0.1", "8080")
		return containsBody(ok, out, "hello-from-daemon")
	})
	eventually(t, "statsd reaches web as daemon:8080", func() (bool, string) {
		ok, out := e.httpGet(cs.ID, "daemon", "8080")
		return containsBody(ok, out, "hello-from-daemon")
	})
	eventually(t, "the host reaches the daemon address", func() (bool, string) {
		ok, out := hostGet(addr, "8080")
		return containsBody(ok, out, "hello-from-daemon")
	})

	// Applications: a bridge task on Docker's default bridge, with a
	// published port, and a host-network task.
	site := e.httpd("site", "80", "hello-from-app")
	site.PortMappings = []shapes.PortMapping{{ContainerPort: new(int32(80)), Protocol: "tcp"}}
	app := task(protocol.KindStandalone, "bridge", site)
	hostApp := task(protocol.KindStandalone, "host", e.ctr("tool", "sleep", "3600"))
	hostApp.HostAccess = true // as the server grants it to an authorized RunTask
	e.run(app, hostApp)
	sa := e.waitStatus(app.Arn, engine.StatusRunning)
	ca := e.container(sa, "site")
	ch := e.container(e.waitStatus(hostApp.Arn, engine.StatusRunning), "tool")
	if ca.NetworkMode != "bridge" || ch.NetworkMode != "host" {
		t.Fatalf("app network modes %q and %q", ca.NetworkMode, ch.NetworkMode)
	}
	for _, c := range []runtime.Container{ca, ch} {
		eventually(t, c.Name+" reaches daemon:8080", func() (bool, string) {
			ok, out := e.httpGet(c.ID, "daemon", "8080")
			return containsBody(ok, out, "hello-from-daemon")
		})
	}
	eventually(t, "a bridge app reaches statsd at daemon:8125", func() (bool, string) {
		ok, out := e.exec(ca.ID, "sh", "-c", "echo pong | nc -w 2 daemon 8125")
		return ok && strings.Contains(out, "pong"), out
	})
	var hostPort int32
	for _, c := range sa.Containers {
		for _, b := range c.NetworkBindings {
			if b.HostPort != nil && *b.ContainerPort == 80 {
				hostPort = *b.HostPort
			}
		}
	}
	if hostPort == 0 {
		t.Fatalf("no published port: %+v", sa.Containers)
	}
	eventually(t, "the published port answers", func() (bool, string) {
		ok, out := hostGet("127.0.0.1", strconv.Itoa(int(hostPort)))
		return containsBody(ok, out, "hello-from-app")
	})

	// The rules let the default bridge reach the daemon address and
	// nothing else: a container on another Docker network is still kept
	// out, and a bridge app does not reach another address on the
	// instance network.
	outsider := e.runRaw("outsider", otherNetwork(t, e), "sleep", "3600")
	if ok, out := e.httpGet(outsider, addr, "8080"); ok {
		t.Fatalf("a container on another network reached the daemons: %s", out)
	}
	neighbour := e.runRaw("neighbour", e.setup.InstanceNetwork, "sh", "-c", "mkdir -p /www && echo hi > /www/index.html && exec httpd -f -p 8080 -h /www")
	nc, err := e.rt.Inspect(t.Context(), neighbour)
	if err != nil || nc.IPAddress == "" {
		t.Fatalf("neighbour %+v, %v", nc, err)
	}
	eventually(t, "the neighbour serves on the instance network", func() (bool, string) {
		return e.httpGet(cs.ID, nc.IPAddress, "8080")
	})
	if ok, out := e.httpGet(ca.ID, nc.IPAddress, "8080"); ok {
		t.Fatalf("a bridge app reached %s on the instance network: %s", nc.IPAddress, out)
	}
	if out := chainRules(t); strings.Count(out, "--comment "+e.setup.InstanceNetwork+" ") != 2 {
		t.Fatalf("rules of %s: %s", e.setup.InstanceNetwork, out)
	}
}

// TestBridgeTasksOnTheInstanceNetwork: without a firewall to keep (or with
// CAPSTAN_TASK_BRIDGE=instance), or when its rules cannot be set, bridge
// tasks run on the instance network and reach the daemons there.
func TestBridgeTasksOnTheInstanceNetwork(t *testing.T) {
	for _, c := range []struct {
		name string
		fw   daemonnet.Firewall
	}{{"no firewall", nil}, {"failing firewall", &daemonnet.IPTables{Bin: "/bin/false"}}} {
		t.Run(c.name, func(t *testing.T) {
			e := newEnvFirewall(t, c.fw)
			if e.setup.BridgeNetwork == "" || e.setup.BridgeNetwork != e.setup.InstanceNetwork {
				t.Fatalf("setup %+v", e.setup)
			}
			web := daemonTask(e.httpd("web", "8080", "hello-from-daemon"))
			app := task(protocol.KindStandalone, "bridge", e.ctr("tool", "sleep", "3600"))
			e.run(web, app)
			e.waitStatus(web.Arn, engine.StatusRunning)
			ca := e.container(e.waitStatus(app.Arn, engine.StatusRunning), "tool")
			if ca.NetworkMode != e.setup.InstanceNetwork {
				t.Fatalf("bridge app on %q, want %q", ca.NetworkMode, e.setup.InstanceNetwork)
			}
			eventually(t, "a bridge app reaches daemon:8080", func() (bool, string) {
				ok, out := e.httpGet(ca.ID, "daemon", "8080")
				return containsBody(ok, out, "hello-from-daemon")
			})
		})
	}
}

// TestHolderReplaced: a holder removed behind the agent's back comes back
// on the same address; the daemon left in the old namespace (no network
// any more) is stopped so that its task is replaced, and a new daemon
// joins the new holder.
func TestHolderReplaced(t *testing.T) {
	e := newEnv(t)
	addr := e.setup.Address.String()
	old := e.holder()
	first := daemonTask(e.httpd("web", "8080", "first"))
	e.run(first)
	e.waitStatus(first.Arn, engine.StatusRunning)
	eventually(t, "the first daemon answers", func() (bool, string) {
		ok, out := hostGet(addr, "8080")
		return containsBody(ok, out, "first")
	})

	if err := e.rt.Remove(t.Context(), old.ID); err != nil {
		t.Fatal(err)
	}
	h := e.holder(old.ID)
	if h.IPAddress != addr || h.Name != old.Name {
		t.Fatalf("new holder %+v, want %s at %s", h, old.Name, addr)
	}
	e.waitStatus(first.Arn, engine.StatusStopped)

	second := daemonTask(e.httpd("web", "8080", "second"))
	e.run(second)
	c := e.container(e.waitStatus(second.Arn, engine.StatusRunning), "web")
	if c.NetworkMode != "container:"+h.ID {
		t.Fatalf("the new daemon runs in %q, not the new holder's namespace", c.NetworkMode)
	}
	eventually(t, "the new daemon answers on the same address", func() (bool, string) {
		ok, out := hostGet(addr, "8080")
		return containsBody(ok, out, "second")
	})

	// A holder that only stopped is replaced too.
	if err := e.rt.Stop(t.Context(), h.ID, time.Second); err != nil {
		t.Fatal(err)
	}
	if h2 := e.holder(h.ID); h2.IPAddress != addr {
		t.Fatalf("holder after a stop %+v", h2)
	}
}

// TestSamePortTwice: daemons share one namespace, so a second daemon on a
// port already taken cannot bind it; its task stops, and the container's
// reason says why, while the first goes on.
func TestSamePortTwice(t *testing.T) {
	e := newEnv(t)
	first := daemonTask(e.ctr("statsd", "nc", "-ll", "-p", "8125", "-e", "cat"))
	e.run(first)
	c := e.container(e.waitStatus(first.Arn, engine.StatusRunning), "statsd")
	eventually(t, "the first daemon listens", func() (bool, string) {
		ok, out := e.exec(c.ID, "sh", "-c", "echo x | nc -w 2 127.0.0.1 8125")
		return ok && strings.Contains(out, "x"), out
	})

	second := daemonTask(e.ctr("statsd", "nc", "-ll", "-p", "8125", "-e", "cat"))
	e.run(second)
	st := e.waitStatus(second.Arn, engine.StatusStopped)
	var cs protocol.ContainerState
	for _, x := range st.Containers {
		cs = x
	}
	if st.StopCode != engine.StopEssentialContainerExited || cs.ExitCode == nil || *cs.ExitCode == 0 ||
		!strings.Contains(cs.Reason, "Address already in use") {
		t.Fatalf("second daemon stopped with %q / %q, container %+v", st.StopCode, st.StoppedReason, cs)
	}
	t.Logf("container reason: %s", cs.Reason)
	if rc, err := e.rt.Inspect(context.Background(), c.ID); err != nil || rc.State != runtime.StateRunning {
		t.Fatalf("the first daemon: %+v, %v", rc, err)
	}
}

// TestFallbackWithoutStaticBinary: an executable that cannot be the holder
// (dynamically linked) leaves daemon tasks in the host network, and
// "daemon" is the host's address on the instance network, where a daemon
// listening on all addresses is reached.
func TestFallbackWithoutStaticBinary(t *testing.T) {
	e := newEnvPause(t, "/bin/ls", nil)
	s := e.setup
	if !strings.Contains(s.Degraded, "not statically linked") || s.DaemonNetworkMode != "" || s.BridgeNetwork == "" ||
		s.Address != daemonnet.Gateway(netip.PrefixFrom(s.Address, 24).Masked()) {
		t.Fatalf("setup %+v", s)
	}
	// A port the kernel just handed out is free on the host, unlike a
	// random one that may be some other test's.
	l, err := net.Listen("tcp", ":0")
	if err != nil {
		t.Fatal(err)
	}
	port := strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
	l.Close()
	d := daemonTask(e.httpd("web", port, "hello-from-host-daemon"))
	e.run(d)
	dc := e.container(e.waitStatus(d.Arn, engine.StatusRunning), "web")
	if dc.NetworkMode != "host" {
		t.Fatalf("daemon in %q, want host", dc.NetworkMode)
	}
	app := task(protocol.KindStandalone, "bridge", e.ctr("tool", "sleep", "3600"))
	e.run(app)
	c := e.container(e.waitStatus(app.Arn, engine.StatusRunning), "tool")
	eventually(t, "a bridge app reaches the host daemon as daemon:"+port, func() (bool, string) {
		ok, out := e.httpGet(c.ID, "daemon", port)
		if rc, err := e.rt.Inspect(t.Context(), dc.ID); err != nil || rc.State != runtime.StateRunning {
			out += fmt.Sprintf("; the daemon container: %+v, %v", rc, err)
		}
		return containsBody(ok, out, "hello-from-host-daemon")
	})
}
