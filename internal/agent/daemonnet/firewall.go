package daemonnet

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"sync"
)

// Firewall keeps the host rules that let containers on Docker's default
// bridge reach an instance's daemon address on the instance network.
// Docker drops traffic between its bridges; its DOCKER-USER chain comes
// before that and is left alone by Docker, so rules there can let exactly
// this through.
type Firewall interface {
	// Allow lets connections from the interface from to addr behind the
	// interface to, and their replies back, in rules marked tag. Other
	// rules of tag go, as do rules of any tag naming an interface the host
	// no longer has. Calling it again changes nothing.
	Allow(ctx context.Context, tag, from, to string, addr netip.Addr) error
	// Revoke removes the rules marked tag.
	Revoke(ctx context.Context, tag string) error
}

// userChain is Docker's chain for rules of the host's own.
const userChain = "DOCKER-USER"

// tagPrefix starts every tag (instance network names), so rules are known
// as Capstan's.
const tagPrefix = "capstan-"

// IPTables is a Firewall through an iptables executable.
type IPTables struct {
	Bin string
	mu  sync.Mutex // one change at a time from this process
}

// FindIPTables returns the iptables of the backend Docker uses: the first
// of iptables, iptables-nft and iptables-legacy whose FORWARD chain jumps
// to DOCKER-USER. The host may hold tables of both backends.
func FindIPTables(ctx context.Context) (*IPTables, error) {
	var why []string
	for _, name := range []string{"iptables", "iptables-nft", "iptables-legacy"} {
		bin, err := exec.LookPath(name)
		if err != nil {
			continue
		}
		t := &IPTables{Bin: bin}
		out, err := t.run(ctx, "-S", "FORWARD")
		switch {
		case err != nil:
			why = append(why, err.Error())
		case !strings.Contains(out, "-j "+userChain):
			why = append(why, name+": FORWARD does not jump to "+userChain)
		default:
			return t, nil
		}
	}
	if len(why) == 0 {
		return nil, errors.New("no iptables executable on the PATH")
	}
	return nil, fmt.Errorf("no iptables backend with Docker's %s chain: %s", userChain, strings.Join(why, "; "))
}

// hostFirewall is the host's iptables, found once, for Remove.
var hostFirewall = sync.OnceValues(func() (*IPTables, error) { return FindIPTables(context.Background()) })

// HostFirewall returns the iptables Docker uses on this host (FindIPTables,
// looked up once per process).
func HostFirewall() (*IPTables, error) { return hostFirewall() }

func (t *IPTables) run(ctx context.Context, args ...string) (string, error) {
	// -w: wait for the lock other writers (Docker) hold rather than fail.
	out, err := exec.CommandContext(ctx, t.Bin, append([]string{"-w"}, args...)...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("%s %s: %w: %s", t.Bin, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return string(out), nil
}

// rule is one of ours as listed: its matches and the line to delete it by.
type rule struct {
	tag, in, out, dst, state string
	spec                     []string // after -A
}

func (r rule) key() string { return r.in + "|" + r.out + "|" + r.dst + "|" + r.state }

// rules lists the chain's rules marked with a Capstan tag.
func (t *IPTables) rules(ctx context.Context) ([]rule, error) {
	out, err := t.run(ctx, "-S", userChain)
	if err != nil {
		return nil, err
	}
	var rs []rule
	for line := range strings.Lines(out) {
		f := strings.Fields(line)
		if len(f) < 2 || f[0] != "-A" || f[1] != userChain {
			continue
		}
		var r rule
		for i := 2; i < len(f); i++ {
			f[i] = strings.Trim(f[i], `"`)
		}
		for i := 2; i+1 < len(f); i++ {
			switch f[i] {
			case "--comment":
				r.tag = f[i+1]
			case "-i":
				r.in = f[i+1]
			case "-o":
				r.out = f[i+1]
			case "-d":
				r.dst = f[i+1]
			case "--ctstate":
				r.state = f[i+1]
			}
		}
		if strings.HasPrefix(r.tag, tagPrefix) {
			r.spec = f[1:]
			rs = append(rs, r)
		}
	}
	return rs, nil
}

// Allow implements Firewall.
func (t *IPTables) Allow(ctx context.Context, tag, from, to string, addr netip.Addr) error {
	if !strings.HasPrefix(tag, tagPrefix) || strings.ContainsAny(tag, " \t\"'") {
		return fmt.Errorf("firewall tag %q: must start with %q and hold no spaces or quotes", tag, tagPrefix)
	}
	if from == "" || to == "" || !addr.Is4() {
		return fmt.Errorf("firewall: from %q, to %q and an IPv4 address %v are required", from, to, addr)
	}
	mark := []string{"-m", "comment", "--comment", tag, "-j", "ACCEPT"}
	want := []struct {
		r    rule
		args []string
	}{
		{rule{in: from, out: to, dst: addr.String() + "/32"},
			append([]string{"-i", from, "-o", to, "-d", addr.String() + "/32"}, mark...)},
		{rule{in: to, out: from, state: "RELATED,ESTABLISHED"},
			append([]string{"-i", to, "-o", from, "-m", "conntrack", "--ctstate", "RELATED,ESTABLISHED"}, mark...)},
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	rs, err := t.rules(ctx)
	if err != nil {
		return err
	}
	have := map[string]bool{}
	var errs []error
	for _, r := range rs {
		ok := false
		if r.tag == tag {
			for _, w := range want {
				ok = ok || (w.r.key() == r.key() && !have[r.key()])
			}
		} else {
			ok = present(r.in) && present(r.out)
		}
		if ok {
			have[r.key()] = true
			continue
		}
		if err := t.delete(ctx, r.spec); err != nil {
			errs = append(errs, err)
		}
	}
	for _, w := range want {
		if have[w.r.key()] {
			continue
		}
		// At the top: Docker's chain ends in a RETURN.
		if _, err := t.run(ctx, append([]string{"-I", userChain}, w.args...)...); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Revoke implements Firewall.
func (t *IPTables) Revoke(ctx context.Context, tag string) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	rs, err := t.rules(ctx)
	if err != nil {
		return err
	}
	var errs []error
	for _, r := range rs {
		if r.tag != tag {
			continue
		}
		if err := t.delete(ctx, r.spec); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// delete removes a listed rule. Another agent on the host may have
// removed it first (as a leftover): only a rule still there is an error.
func (t *IPTables) delete(ctx context.Context, spec []string) error {
	_, err := t.run(ctx, append([]string{"-D"}, spec...)...)
	if err != nil {
		if _, cerr := t.run(ctx, append([]string{"-C"}, spec...)...); cerr != nil {
			return nil // gone
		}
	}
	return err
}

// present reports whether the host has the network interface; a rule
// without one is a leftover.
func present(iface string) bool {
	if iface == "" {
		return true
	}
	_, err := os.Stat("/sys/class/net/" + iface)
	return err == nil
}
