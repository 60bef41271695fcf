package daemonnet_test

import (
	"encoding/json"
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

// awsvpcTask is an application task in awsvpc mode whose web container
// serves body on port 8080 (mapped as ECS maps it, hostPort = containerPort)
// and whose client container only sleeps, to run checks from.
func (e *env) awsvpcTask(body string) protocol.Task {
	web := e.httpd("web", "8080", body)
	web.PortMappings = []shapes.PortMapping{{ContainerPort: new(int32(8080)), HostPort: new(int32(8080)), Protocol: "tcp"}}
	client := e.ctr("client", "sleep", "3600")
	client.Essential = new(false)
	t := task(protocol.KindService, "awsvpc", web, client)
	t.HostAccess = true
	return t
}

// stopTask makes arn desired STOPPED, as the server's manifest would.
func (e *env) stopTask(arn string) {
	e.mu.Lock()
	for i := range e.desired {
		if e.desired[i].Arn == arn {
			e.desired[i].DesiredStatus = engine.StatusStopped
			e.desired[i].Version++
		}
	}
	d := append([]protocol.Task(nil), e.desired...)
	e.mu.Unlock()
	e.eng.SetDesired(d)
}

// attachment checks st's awsvpc attachment and returns its address.
func attachment(t *testing.T, st protocol.TaskState, status string) string {
	t.Helper()
	j, _ := json.Marshal(st)
	if len(st.Attachments) != 1 {
		t.Fatalf("attachments of %s: %s", st.Arn, j)
	}
	a := st.Attachments[0]
	addr := protocol.Detail(a, protocol.DetailAddress)
	if a.Type != "ElasticNetworkInterface" || a.Status != status || a.Id != protocol.AttachmentID(st.Arn) || addr == "" ||
		protocol.Detail(a, protocol.DetailInterfaceID) != protocol.InterfaceID(st.Arn) ||
		protocol.Detail(a, protocol.DetailDNSName) != protocol.DNSName(addr) {
		t.Fatalf("attachment of %s, want %s: %s", st.Arn, status, j)
	}
	for _, c := range st.Containers {
		if len(c.NetworkInterfaces) != 1 || c.NetworkInterfaces[0].PrivateIpv4Address != addr || c.NetworkInterfaces[0].AttachmentId != a.Id {
			t.Fatalf("container %s's networkInterfaces do not show %s: %s", c.Name, addr, j)
		}
	}
	return addr
}

// holders lists the task namespace holders of the instance.
func (e *env) taskHolders() []runtime.Container {
	e.t.Helper()
	cs, err := e.rt.List(e.t.Context(), map[string]string{engine.LabelInstance: e.instance, daemonnet.LabelRole: daemonnet.RoleTaskNamespace})
	if err != nil {
		e.t.Fatal(err)
	}
	return cs
}

// TestAwsvpcTasks: two awsvpc tasks each get a namespace and an address of
// their own on the instance network; both serve the same port, each on its
// address, reachable from the host; their containers share the namespace;
// they reach the daemons as "daemon". The holder goes when its task stops,
// and an agent restart keeps the task running on its address.
func TestAwsvpcTasks(t *testing.T) {
	e := newEnv(t)
	d := daemonTask(e.httpd("web", "80", "hello-from-daemon"))
	a, b := e.awsvpcTask("task-a"), e.awsvpcTask("task-b")
	e.run(d, a, b)
	e.waitStatus(d.Arn, engine.StatusRunning)
	sa, sb := e.waitStatus(a.Arn, engine.StatusRunning), e.waitStatus(b.Arn, engine.StatusRunning)
	addrA, addrB := attachment(t, sa, protocol.AttachmentAttached), attachment(t, sb, protocol.AttachmentAttached)
	if addrA == addrB {
		t.Fatalf("both tasks have address %s", addrA)
	}
	n := e.setup
	for _, s := range []string{addrA, addrB} {
		ip := netip.MustParseAddr(s)
		if ip == n.Address {
			t.Fatalf("a task has the daemon address %s", s)
		}
		if !strings.HasPrefix(s, "169.254.") {
			t.Fatalf("task address %s is not on the instance network", s)
		}
	}

	// Both serve 8080, each on its own address.
	for addr, body := range map[string]string{addrA: "task-a", addrB: "task-b"} {
		eventually(t, "the host reaches "+body+" on "+addr, func() (bool, string) {
			ok, out := hostGet(addr, "8080")
			return containsBody(ok, out, body)
		})
	}
	// The task's containers share its namespace: the client reaches the
	// web container on localhost, and the daemon as "daemon".
	client := e.container(sa, "client")
	web := e.container(sa, "web")
	holders := e.taskHolders()
	if len(holders) != 2 {
		t.Fatalf("%d task holders, want 2", len(holders))
	}
	if !strings.HasPrefix(client.NetworkMode, "container:") || client.NetworkMode != web.NetworkMode {
		t.Fatalf("client in %q, web in %q: not one namespace", client.NetworkMode, web.NetworkMode)
	}
	eventually(t, "the client reaches its task's web on localhost", func() (bool, string) {
		ok, out := e.httpGet(client.ID, "127.0.0.1", "8080")
		return containsBody(ok, out, "task-a")
	})
	eventually(t, "an awsvpc task reaches the daemon as \"daemon\"", func() (bool, string) {
		ok, out := e.httpGet(client.ID, "daemon", "80")
		return containsBody(ok, out, "hello-from-daemon")
	})
	eventually(t, "task a reaches task b on its address", func() (bool, string) {
		ok, out := e.httpGet(client.ID, addrB, "8080")
		return containsBody(ok, out, "task-b")
	})

	// An agent restart adopts the tasks and their namespaces as they are.
	e.stopEngine()
	e.startEngine()
	e.run()
	eventually(t, "after a restart task b still answers on "+addrB, func() (bool, string) {
		ok, out := hostGet(addrB, "8080")
		return containsBody(ok, out, "task-b")
	})
	if got := len(e.taskHolders()); got != 2 {
		t.Fatalf("%d task holders after a restart, want 2", got)
	}

	// Stopping a task removes its holder and says so in its attachment.
	e.stopTask(a.Arn)
	st := e.waitStatus(a.Arn, engine.StatusStopped)
	if got := attachment(t, st, protocol.AttachmentDeleted); got != addrA {
		t.Fatalf("stopped task shows address %s, had %s", got, addrA)
	}
	hs := e.taskHolders()
	if len(hs) != 1 || hs[0].Labels[engine.LabelNetworkOf] != b.Arn {
		t.Fatalf("holders after task a stopped: %+v", hs)
	}
	if ok, out := hostGet(addrB, "8080"); !ok || !strings.Contains(out, "task-b") {
		t.Fatalf("task b after task a stopped: %s", out)
	}

	// A holder of a task the agent does not know (left by a crash between
	// a stop and the removal) is removed.
	ghost := "arn:aws:ecs:us-east-1:123456789012:task/test/" + randomID()
	if _, err := e.mgr.Attach(t.Context(), ghost, nil); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the unknown task's holder removed", func() (bool, string) {
		hs := e.taskHolders()
		return len(hs) == 1 && hs[0].Labels[engine.LabelNetworkOf] == b.Arn, strconv.Itoa(len(hs)) + " holders"
	})

	// A task whose holder dies has lost its network: it stops, saying so.
	if err := e.rt.Stop(t.Context(), e.taskHolders()[0].ID, time.Second); err != nil {
		t.Fatal(err)
	}
	if st := e.waitStatus(b.Arn, engine.StatusStopped); st.StoppedReason != engine.ReasonNetworkLost {
		t.Fatalf("task b after its holder died: %q", st.StoppedReason)
	}
	eventually(t, "the dead holder removed", func() (bool, string) {
		n := len(e.taskHolders())
		return n == 0, strconv.Itoa(n) + " holders"
	})
}
