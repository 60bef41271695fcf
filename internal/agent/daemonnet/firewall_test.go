package daemonnet_test

import (
	"context"
	"net/netip"
	"os/exec"
	"strings"
	"testing"

	"github.com/capstanhq/capstan/internal/agent/daemonnet"
)

// TestFirewallRules runs the host's iptables: Allow makes the two rules
// once however often it is called, moves them when the interface or the
// address changes, removes rules of other instances whose interface is
// gone, and Revoke removes its tag's alone.
func TestFirewallRules(t *testing.T) {
	fw := requireFirewall(t)
	e := newEnvFirewall(t, nil) // a real bridge interface to name
	inst, err := e.rt.Network(t.Context(), e.setup.InstanceNetwork)
	if err != nil {
		t.Fatal(err)
	}
	def, err := e.rt.Network(t.Context(), "bridge")
	if err != nil {
		t.Fatal(err)
	}
	tag := "capstan-fwtest-" + randomID()
	t.Cleanup(func() { fw.Revoke(context.Background(), tag) })
	list := func() []string {
		t.Helper()
		var ours []string
		for l := range strings.Lines(chainRules(t)) {
			if strings.Contains(l, "--comment "+tag+" ") {
				ours = append(ours, strings.TrimSpace(l))
			}
		}
		return ours
	}
	a := netip.MustParseAddr("169.254.172.2")
	for range 2 {
		if err := fw.Allow(t.Context(), tag, def.Bridge, inst.Bridge, a); err != nil {
			t.Fatal(err)
		}
	}
	rs := list()
	if len(rs) != 2 || !strings.Contains(strings.Join(rs, "\n"), "-d 169.254.172.2/32 -i "+def.Bridge+" -o "+inst.Bridge) ||
		!strings.Contains(strings.Join(rs, "\n"), "-i "+inst.Bridge+" -o "+def.Bridge+" -m conntrack --ctstate RELATED,ESTABLISHED") {
		t.Fatalf("rules after two Allows:\n%s", strings.Join(rs, "\n"))
	}
	// DOCKER-USER ends in Docker's RETURN: ours must come before it.
	out := chainRules(t)
	if lines := strings.Split(strings.TrimSpace(out), "\n"); strings.Contains(lines[len(lines)-1], tag) {
		t.Fatalf("a rule after the chain's end:\n%s", out)
	}

	b := netip.MustParseAddr("169.254.172.9")
	if err := fw.Allow(t.Context(), tag, def.Bridge, inst.Bridge, b); err != nil {
		t.Fatal(err)
	}
	if rs := strings.Join(list(), "\n"); strings.Count(rs, "\n") != 1 || !strings.Contains(rs, "-d 169.254.172.9/32") {
		t.Fatalf("rules after the address moved:\n%s", rs)
	}

	// A leftover of an instance whose network is gone goes; one whose
	// interface exists stays.
	gone, kept := "capstan-fwgone-"+randomID(), "capstan-fwkept-"+randomID()
	t.Cleanup(func() { fw.Revoke(context.Background(), gone); fw.Revoke(context.Background(), kept) })
	for _, r := range [][]string{
		{"-i", def.Bridge, "-o", "br-" + randomID(), "-d", "169.254.180.2/32", "-m", "comment", "--comment", gone, "-j", "ACCEPT"},
		{"-i", def.Bridge, "-o", inst.Bridge, "-d", "169.254.181.2/32", "-m", "comment", "--comment", kept, "-j", "ACCEPT"},
	} {
		if out, err := exec.Command(fw.Bin, append([]string{"-w", "-I", "DOCKER-USER"}, r...)...).CombinedOutput(); err != nil {
			t.Fatalf("%s: %v", out, err)
		}
	}
	if err := fw.Allow(t.Context(), tag, def.Bridge, inst.Bridge, b); err != nil {
		t.Fatal(err)
	}
	out = chainRules(t)
	if strings.Contains(out, gone) || !strings.Contains(out, kept) {
		t.Fatalf("leftovers after Allow:\n%s", out)
	}

	if err := fw.Revoke(t.Context(), tag); err != nil {
		t.Fatal(err)
	}
	if rs := list(); len(rs) != 0 {
		t.Fatalf("rules after Revoke: %q", rs)
	}
	out = chainRules(t)
	if !strings.Contains(out, kept) {
		t.Fatalf("Revoke removed another tag's rule:\n%s", out)
	}

	// Bad arguments are refused before anything runs.
	for _, c := range []struct{ tag, from, to string }{{"fwtest", def.Bridge, inst.Bridge}, {"capstan-a b", def.Bridge, inst.Bridge}, {tag, "", inst.Bridge}} {
		if err := fw.Allow(t.Context(), c.tag, c.from, c.to, a); err == nil {
			t.Errorf("Allow(%q, %q, %q) succeeded", c.tag, c.from, c.to)
		}
	}
}

// TestRemoveRevokesTheRules: retiring an instance (Remove) takes its rules
// with its network.
func TestRemoveRevokesTheRules(t *testing.T) {
	e := newEnv(t)
	rules := func() string { return chainRules(t) }
	if !strings.Contains(rules(), "--comment "+e.setup.InstanceNetwork+" ") {
		t.Fatalf("no rules of %s:\n%s", e.setup.InstanceNetwork, rules())
	}
	e.stopEngine()
	e.stopMgr() // it would make them again
	if err := daemonnet.Remove(t.Context(), e.rt, e.instance); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(rules(), "--comment "+e.setup.InstanceNetwork+" ") {
		t.Fatalf("rules of %s after Remove:\n%s", e.setup.InstanceNetwork, rules())
	}
}
