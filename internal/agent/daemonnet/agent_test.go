package daemonnet_test

import (
	"context"
	"net/netip"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ecs"
	"github.com/aws/aws-sdk-go-v2/service/ecs/types"

	"github.com/capstanhq/capstan/internal/agent/daemonnet"
	"github.com/capstanhq/capstan/internal/agent/engine"
	"github.com/capstanhq/capstan/internal/runtime"
	"github.com/capstanhq/capstan/internal/testenv"
	"github.com/capstanhq/capstan/internal/testenv/agents"
)

// TestTwoInstancesOneHost: instances sharing a Docker host get a subnet
// each without configuration; a configured subnet that is taken is an
// error naming the variable; a manager started again adopts what exists.
func TestTwoInstancesOneHost(t *testing.T) {
	a := newEnv(t)
	rt := a.rt
	b := "arn:aws:ecs:us-east-1:123456789012:container-instance/test/" + randomID()
	t.Cleanup(func() { daemonnet.Remove(context.Background(), rt, b) })
	mb, err := daemonnet.New(daemonnet.Config{Runtime: rt, InstanceArn: b, PauseBinary: testenv.CapstanBinary(t), Log: testLog()})
	if err != nil {
		t.Fatal(err)
	}
	sb, err := mb.Ensure(t.Context())
	if err != nil || sb.Degraded != "" {
		t.Fatalf("second instance: %+v, %v", sb, err)
	}
	if sb.Address == a.setup.Address || sb.InstanceNetwork == a.setup.InstanceNetwork {
		t.Fatalf("two instances share %+v", sb)
	}

	taken, err := daemonnet.New(daemonnet.Config{Runtime: rt, InstanceArn: b + "x", Subnet: netipPrefix(t, a), Log: testLog()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { daemonnet.Remove(context.Background(), rt, b+"x") })
	if _, err := taken.Ensure(t.Context()); err == nil || !strings.Contains(err.Error(), "CAPSTAN_DAEMON_SUBNET") {
		t.Fatalf("a taken subnet: %v", err)
	}

	// A configured subnet held only by the network of an instance that has
	// nothing left on the host is taken over.
	gone := "arn:aws:ecs:us-east-1:123456789012:container-instance/test/" + randomID()
	mg, err := daemonnet.New(daemonnet.Config{Runtime: rt, InstanceArn: gone, PauseBinary: testenv.CapstanBinary(t), Log: testLog()})
	if err != nil {
		t.Fatal(err)
	}
	sg, err := mg.Ensure(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { daemonnet.Remove(context.Background(), rt, gone) })
	testenv.RemoveLabeled(t, rt, map[string]string{engine.LabelInstance: gone}) // its holder too
	heir := "arn:aws:ecs:us-east-1:123456789012:container-instance/test/" + randomID()
	t.Cleanup(func() { daemonnet.Remove(context.Background(), rt, heir) })
	mh, err := daemonnet.New(daemonnet.Config{Runtime: rt, InstanceArn: heir, Subnet: netip.PrefixFrom(sg.Address, 24).Masked(),
		PauseBinary: testenv.CapstanBinary(t), Log: testLog()})
	if err != nil {
		t.Fatal(err)
	}
	if sh, err := mh.Ensure(t.Context()); err != nil || sh.Address != sg.Address {
		t.Fatalf("taking over an abandoned subnet: %+v, %v", sh, err)
	}

	// Adopting needs no pause image: even an agent that cannot build one
	// keeps the holder it finds.
	before := a.holder()
	again, err := daemonnet.New(daemonnet.Config{Runtime: rt, InstanceArn: a.instance, PauseBinary: "/bin/ls", Firewall: requireFirewall(t), Log: testLog()})
	if err != nil {
		t.Fatal(err)
	}
	s, err := again.Ensure(t.Context())
	if err != nil || s != a.setup {
		t.Fatalf("again: %+v, %v; first %+v", s, err, a.setup)
	}
	if after := a.holder(); after.ID != before.ID {
		t.Fatalf("holder replaced on adoption: %s, was %s", after.ID, before.ID)
	}
}

// netipPrefix is the subnet of e's instance network.
func netipPrefix(t *testing.T, e *env) netip.Prefix {
	t.Helper()
	nets, err := e.rt.Networks(t.Context(), map[string]string{engine.LabelInstance: e.instance, daemonnet.LabelRole: daemonnet.RoleNetwork})
	if err != nil || len(nets) != 1 {
		t.Fatalf("networks %+v, %v", nets, err)
	}
	return nets[0].Subnet
}

// TestAgentDaemonNetworking runs the real agent against a real server: it
// sets up its network and holder, runs bridge tasks there with "daemon"
// resolving to the holder, adopts both after a restart, and removes them
// when its instance is deregistered and it registers anew.
func TestAgentDaemonNetworking(t *testing.T) {
	ctx := context.Background()
	srv := testenv.StartServer(t, "")
	c := srv.ECS()
	rt := testenv.RequireDocker(t)
	image := testenv.BusyboxImage(t)
	cluster := "dn-" + randomID()
	if _, err := c.CreateCluster(ctx, &ecs.CreateClusterInput{ClusterName: aws.String(cluster)}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { testenv.RemoveLabeled(t, rt, map[string]string{engine.LabelCluster: cluster}) })
	env := agents.Env(t, srv, cluster, t.TempDir())
	env["CAPSTAN_PAUSE_BINARY"] = testenv.CapstanBinary(t)
	a := agents.StartEnv(t, env, nil)

	holders := func(inst string) []runtime.Container {
		cs, err := rt.List(ctx, map[string]string{engine.LabelInstance: inst, daemonnet.LabelRole: daemonnet.RoleNamespace})
		if err != nil {
			t.Fatal(err)
		}
		return cs
	}
	networks := func(inst string) []runtime.Network {
		ns, err := rt.Networks(ctx, map[string]string{engine.LabelInstance: inst, daemonnet.LabelRole: daemonnet.RoleNetwork})
		if err != nil {
			t.Fatal(err)
		}
		return ns
	}
	hs, ns := holders(a.InstanceArn), networks(a.InstanceArn)
	network, _ := daemonnet.Names(a.InstanceArn)
	if len(hs) != 1 || len(ns) != 1 || ns[0].Name != network || hs[0].IPAddress != daemonnet.DefaultAddress(ns[0].Subnet).String() {
		t.Fatalf("holders %+v, networks %+v", hs, ns)
	}
	addr := hs[0].IPAddress

	td, err := c.RegisterTaskDefinition(ctx, &ecs.RegisterTaskDefinitionInput{Family: aws.String("app"),
		ContainerDefinitions: []types.ContainerDefinition{{Name: aws.String("main"), Image: aws.String(image), Memory: aws.Int32(64),
			Command: []string{"sh", "-c", "trap 'exit 0' TERM; while true; do sleep 1; done"}}}})
	if err != nil {
		t.Fatal(err)
	}
	out, err := c.RunTask(ctx, &ecs.RunTaskInput{Cluster: aws.String(cluster), TaskDefinition: td.TaskDefinition.TaskDefinitionArn})
	if err != nil || len(out.Tasks) != 1 {
		t.Fatalf("run task: %+v, %v", out, err)
	}
	arn := aws.ToString(out.Tasks[0].TaskArn)
	var ctr runtime.Container
	eventually(t, "the task's container runs", func() (bool, string) {
		cs, err := rt.List(ctx, map[string]string{engine.LabelTaskArn: arn})
		if err != nil || len(cs) != 1 || cs[0].State != runtime.StateRunning {
			return false, "not yet"
		}
		ctr = cs[0]
		return true, ""
	})
	if ctr.NetworkMode != "bridge" {
		t.Fatalf("bridge task on %q, want Docker's default bridge", ctr.NetworkMode)
	}
	_, hosts, err := rt.Exec(ctx, ctr.ID, []string{"cat", "/etc/hosts"})
	if err != nil || !strings.Contains(string(hosts), addr+"\tdaemon") {
		t.Fatalf("/etc/hosts of a bridge task: %q, %v", hosts, err)
	}

	// The task metadata endpoint is on the docker0 address.
	eventually(t, "the metadata endpoint answers a bridge task", func() (bool, string) {
		_, out, err := rt.Exec(ctx, ctr.ID, []string{"sh", "-c", `u=${ECS_CONTAINER_METADATA_URI_V4#http://}; h=${u%%/*}; ` +
			`printf "GET /${u#*/}/task HTTP/1.0\r\n\r\n" | nc -w 2 ${h%:*} ${h#*:}`})
		return err == nil && strings.Contains(string(out), "200 OK") && strings.Contains(string(out), arn), string(out)
	})

	// Restarting the agent keeps the holder and the network.
	a.Stop()
	a = agents.StartEnv(t, env, nil)
	if hs2, ns2 := holders(a.InstanceArn), networks(a.InstanceArn); len(hs2) != 1 || hs2[0].ID != hs[0].ID || len(ns2) != 1 || ns2[0].ID != ns[0].ID {
		t.Fatalf("after a restart: holders %+v, networks %+v", hs2, ns2)
	}

	// A deregistered instance's holder and network go with it.
	old := a.InstanceArn
	if _, err := c.DeregisterContainerInstance(ctx, &ecs.DeregisterContainerInstanceInput{Cluster: aws.String(cluster),
		ContainerInstance: aws.String(old), Force: aws.Bool(true)}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the old instance's holder, network and firewall rules are removed", func() (bool, string) {
		out := chainRules(t)
		return len(holders(old)) == 0 && len(networks(old)) == 0 && !strings.Contains(out, "--comment "+network+" "), out
	})
	eventually(t, "the new instance has a holder", func() (bool, string) {
		cs, err := rt.List(ctx, map[string]string{engine.LabelCluster: cluster, daemonnet.LabelRole: daemonnet.RoleNamespace})
		return err == nil && len(cs) == 1 && cs[0].Labels[engine.LabelInstance] != old && cs[0].State == runtime.StateRunning, "not yet"
	})
}
