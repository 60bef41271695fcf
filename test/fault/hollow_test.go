package fault

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"regexp"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ecs/types"

	"github.com/capstanhq/capstan/internal/provision"
	simprov "github.com/capstanhq/capstan/internal/provision/sim"
	"github.com/capstanhq/capstan/internal/runtime"
	"github.com/capstanhq/capstan/internal/server"
	"github.com/capstanhq/capstan/internal/testenv"
)

// containerLister is what the checks read containers from: the Docker
// Engine, or the hollow instances' simulated hosts.
type containerLister interface {
	List(ctx context.Context, labels map[string]string) ([]runtime.Container, error)
}

// newHollowFleet is newFleet on hollow instances: the server provisions
// them with the sim provisioner, so each is the real agent on a simulated
// container runtime in this process. Hundreds fit on a small machine.
// What Docker shows in the other mode, the simulated hosts show here; a
// killed instance's host runs nothing.
func newHollowFleet(t *testing.T, edit func(*server.Config)) *fleet {
	t.Helper()
	f := &fleet{t: t, image: "example/busybox:hollow"}
	var mu sync.Mutex
	srv := testenv.StartServerWith(t, func(c *server.Config) {
		c.Provisioner, c.AgentEnv = "sim", agentEnv
		c.NewSimProvisioner = func(dir string, _ time.Duration, log *slog.Logger) (provision.Provisioner, error) {
			p, err := simprov.New(simprov.Config{Dir: dir, MemoryState: true, ServerLog: log})
			mu.Lock()
			f.sim = p
			mu.Unlock()
			return p, err
		}
		if edit != nil {
			edit(c)
		}
	})
	mu.Lock()
	sim := f.sim
	mu.Unlock()
	if sim == nil {
		t.Fatal("the server made no sim provisioner")
	}
	f.url, f.dataDir, f.rt = srv.URL, srv.Config.DataDir, hollowHosts{sim}
	f.creds = aws.Credentials{AccessKeyID: srv.Config.AdminKeyID, SecretAccessKey: srv.Config.AdminSecret}
	t.Cleanup(func() {
		srv.Stop()
		sim.Close()
	})
	f.init()
	return f
}

// skipHollow skips a scenario that needs what hollow instances do not
// have (agent processes, Docker).
func skipHollow(t *testing.T, why string) {
	t.Helper()
	if *hollowFlag {
		t.Skip("not with -fault.hollow: " + why)
	}
}

// hollowHosts lists the containers of every live hollow instance.
type hollowHosts struct{ p *simprov.Provisioner }

func (h hollowHosts) List(ctx context.Context, labels map[string]string) ([]runtime.Container, error) {
	var out []runtime.Container
	for _, id := range h.p.Handles() {
		if ok, _ := h.p.Alive(ctx, id); !ok {
			continue
		}
		rt, ok := h.p.Runtime(id)
		if !ok {
			continue
		}
		cs, err := rt.List(ctx, labels)
		if err != nil {
			// Terminated meanwhile: its host is gone.
			continue
		}
		out = append(out, cs...)
	}
	return out, nil
}

// hollowAgents maps the live hollow instances' ARNs to their agents (the
// dir holds the provisioner's handle; there is no process).
func (f *fleet) hollowAgents() map[string]agent {
	out := map[string]agent{}
	for _, id := range f.sim.Handles() {
		if ok, _ := f.sim.Alive(context.Background(), id); !ok {
			continue
		}
		if arn := f.sim.InstanceArn(id); arn != "" {
			out[arn] = agent{instance: arn, dir: id}
		}
	}
	return out
}

// hollowKill stops a hollow instance at once, agent and containers, as a
// host losing power (the kill -9 of the other mode).
func (f *fleet) hollowKill(a agent) {
	f.t.Helper()
	if err := f.sim.Kill(a.dir); err != nil {
		f.t.Fatalf("kill hollow instance %s: %v", a.dir, err)
	}
	f.t.Logf("killed hollow instance %s of %s", a.dir, a.instance)
}

// crash makes a container exit as docker kill does (137), on Docker or on
// its hollow host.
func (f *fleet) crash(id string) bool {
	if f.sim == nil {
		return false
	}
	f.t.Helper()
	for _, h := range f.sim.Handles() {
		if rt, ok := f.sim.Runtime(h); ok {
			if err := rt.Crash(id, 137, false); err == nil {
				return true
			}
		}
	}
	f.t.Fatalf("no hollow host runs container %s", id)
	return true
}

var exitCmd = regexp.MustCompile(`exit (\d+)$`)

// simBehaviour is the environment that makes a simulated container do
// what cmd does in a real one: a command ending in `exit N` exits with N
// at once. Nil on Docker.
func (f *fleet) simBehaviour(cmd string) []types.KeyValuePair {
	if !*hollowFlag {
		return nil
	}
	if m := exitCmd.FindStringSubmatch(strings.TrimSpace(cmd)); m != nil {
		return []types.KeyValuePair{{Name: aws.String("SIM_EXIT_CODE"), Value: aws.String(m[1])}}
	}
	return nil
}

// hollowEnv is name=value on hollow instances only.
func hollowEnv(name, value string) []types.KeyValuePair {
	if !*hollowFlag {
		return nil
	}
	return []types.KeyValuePair{{Name: aws.String(name), Value: aws.String(value)}}
}

// A convergence measured by converge, for the summary.
type convergence struct {
	test, what string
	took, dl   time.Duration
}

var (
	convMu sync.Mutex
	convs  []convergence
)

// record logs a convergence in a fixed format (grep CONVERGED) and keeps
// it for the summary TestMain prints.
func record(test, what string, took, deadline time.Duration) {
	fmt.Fprintf(os.Stdout, "CONVERGED\t%s\t%s\t%.1fs\t(deadline %s, %d instances)\n", test, what, took.Seconds(), deadline, *instancesFlag)
	convMu.Lock()
	convs = append(convs, convergence{test, what, took, deadline})
	convMu.Unlock()
}

// TestMain prints every scenario's convergence times after the run.
func TestMain(m *testing.M) {
	code := m.Run()
	convMu.Lock()
	if len(convs) > 0 {
		mode := "Docker"
		if *hollowFlag {
			mode = "hollow"
		}
		fmt.Printf("\nconvergence summary (%d instances, %s):\n", *instancesFlag, mode)
		sort.SliceStable(convs, func(i, j int) bool { return convs[i].test < convs[j].test })
		for _, c := range convs {
			fmt.Printf("  %-40s %-45s %7.1fs  (deadline %s)\n", c.test, c.what, c.took.Seconds(), c.dl)
		}
	}
	convMu.Unlock()
	os.Exit(code)
}
