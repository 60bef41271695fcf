package daemonnet

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/capstanhq/capstan/internal/agent/engine"
	"github.com/capstanhq/capstan/internal/runtime"
)

// Runtime is what the manager needs: containers from the agent's runtime,
// and networks, static addresses and image import, which only the Docker
// implementation has.
type Runtime interface {
	Image(ctx context.Context, ref string) (runtime.Image, error)
	Images(ctx context.Context) ([]runtime.Image, error)
	RemoveImage(ctx context.Context, id string) error
	ImportImage(ctx context.Context, rootfs io.Reader, ref string, changes []string) error
	Create(ctx context.Context, spec runtime.ContainerSpec) (string, error)
	CreateWithAddress(ctx context.Context, spec runtime.ContainerSpec, addr netip.Addr) (string, error)
	Start(ctx context.Context, id string) error
	Stop(ctx context.Context, id string, timeout time.Duration) error
	Remove(ctx context.Context, id string) error
	Inspect(ctx context.Context, id string) (runtime.Container, error)
	List(ctx context.Context, labels map[string]string) ([]runtime.Container, error)
	Events(ctx context.Context) (<-chan runtime.Event, <-chan error)
	Networks(ctx context.Context, labels map[string]string) ([]runtime.Network, error)
	Network(ctx context.Context, id string) (runtime.Network, error)
	CreateNetwork(ctx context.Context, spec runtime.NetworkSpec) (string, error)
	RemoveNetwork(ctx context.Context, id string) error
	DisconnectNetwork(ctx context.Context, networkID, containerID string) error
}

// Labels and roles of what the manager makes. The instance label is the
// engine's, so retiring an instance finds the holder with its containers.
const (
	LabelRole     = "com.capstan.role"
	RoleNamespace = "daemon-namespace" // the holder container
	RoleNetwork   = "daemon-network"   // the instance network
	RolePause     = "pause"            // the holder's image
)

// HostName is the name every task container resolves to the daemon address.
const HostName = "daemon"

// Config wires a Manager.
type Config struct {
	Runtime     Runtime
	InstanceArn string // required
	Cluster     string
	// Subnet and Address place the namespace. A zero Subnet takes the
	// first free of 169.254.172.0/24, 169.254.173.0/24, ...; a zero
	// Address the subnet's second address.
	Subnet  netip.Prefix
	Address netip.Addr
	// PauseBinary is a static capstan executable, run as `pause` in the
	// holder; "" means this process's own executable.
	PauseBinary string
	// PauseImage, when set, is a holder image the runtime already has;
	// nothing is built (simulated instances, by the thousand per process).
	PauseImage string
	// HostAddress is where "daemon" points when the instance gets no
	// network of its own (the docker0 address); may be zero.
	HostAddress netip.Addr
	// Firewall, when set, keeps the rules that let bridge tasks run on
	// Docker's default bridge and still reach the daemon address; nil
	// runs them on the instance network.
	Firewall Firewall
	// CheckInterval is how often the holder is checked besides runtime
	// events; default 30s.
	CheckInterval time.Duration
	// StopTimeout bounds the stop of daemon containers left without a
	// network; default 10s.
	StopTimeout time.Duration
	Log         *slog.Logger
}

// Setup is how the engine runs tasks on this instance.
type Setup struct {
	// BridgeNetwork is the Docker network of bridge-mode tasks; "" means
	// Docker's default bridge.
	BridgeNetwork string
	// InstanceNetwork is the instance's own network, where awsvpc tasks'
	// holders go; "" when there is none.
	InstanceNetwork string
	// DaemonNetworkMode is the Docker network mode of daemon tasks:
	// "container:<holder name>", or "" for host mode.
	DaemonNetworkMode string
	// Address is where "daemon" resolves; zero when there is none.
	Address netip.Addr
	// Degraded says why daemon tasks run in host mode; "" when they share
	// the namespace.
	Degraded string
}

// ExtraHosts are the host entries every task container gets.
func (s Setup) ExtraHosts() []string {
	if !s.Address.IsValid() {
		return nil
	}
	return []string{HostName + ":" + s.Address.String()}
}

// errNoSubnet means every candidate subnet is taken.
var errNoSubnet = errors.New("no free subnet for the instance network")

// Manager keeps the instance network and the namespace holder.
type Manager struct {
	cfg      Config
	rt       Runtime
	log      *slog.Logger
	explicit bool // Subnet was configured: never pick another
	network  string
	holder   string

	mu       sync.Mutex
	setup    Setup
	subnet   netip.Prefix // of the network, once made or adopted
	holderID string
	born     time.Time // when holderID was started
	pauseRef string    // the holder image, once built
	holderOn bool      // Run has a holder to keep
	maintain bool      // Run has a network to keep
}

// New checks cfg and returns a manager; Ensure sets the instance up.
func New(cfg Config) (*Manager, error) {
	switch {
	case cfg.Runtime == nil:
		return nil, errors.New("daemonnet: Runtime is required")
	case cfg.InstanceArn == "":
		return nil, errors.New("daemonnet: InstanceArn is required: it names and labels the network")
	}
	explicit := cfg.Subnet.IsValid()
	if cfg.Address.IsValid() && !explicit {
		cfg.Subnet, explicit = DefaultSubnet, true
	}
	if explicit {
		if err := CheckSubnet(cfg.Subnet); err != nil {
			return nil, fmt.Errorf("daemonnet: subnet %s: %w", cfg.Subnet, err)
		}
	}
	if cfg.Address.IsValid() {
		if err := CheckAddress(cfg.Subnet, cfg.Address); err != nil {
			return nil, fmt.Errorf("daemonnet: address %s: %w", cfg.Address, err)
		}
	}
	if cfg.CheckInterval <= 0 {
		cfg.CheckInterval = 30 * time.Second
	}
	if cfg.StopTimeout <= 0 {
		cfg.StopTimeout = 10 * time.Second
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	network, holder := Names(cfg.InstanceArn)
	return &Manager{cfg: cfg, rt: cfg.Runtime, log: cfg.Log, explicit: explicit, network: network, holder: holder}, nil
}

// Names are the instance network's and the holder's: capstan-<id> and
// capstan-<id>-daemons, <id> the end of the instance ID.
func Names(instanceArn string) (network, holder string) {
	id := instanceArn[strings.LastIndexByte(instanceArn, '/')+1:]
	id = strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' {
			return r
		}
		return '-'
	}, id)
	if len(id) > 12 {
		id = id[len(id)-12:]
	}
	return "capstan-" + id, "capstan-" + id + "-daemons"
}

func (m *Manager) labels(role string) map[string]string {
	l := map[string]string{engine.LabelInstance: m.cfg.InstanceArn, LabelRole: role}
	if m.cfg.Cluster != "" {
		l[engine.LabelCluster] = m.cfg.Cluster
	}
	return l
}

func (m *Manager) selector(role string) map[string]string {
	return map[string]string{engine.LabelInstance: m.cfg.InstanceArn, LabelRole: role}
}

// Ensure makes (or adopts) the instance network and the holder and says
// how tasks run. When the holder cannot be had, it logs why and falls
// back: daemon tasks in host mode, "daemon" the host's address on the
// instance network. It fails only when the network cannot be made on a
// configured subnet, or the runtime fails.
func (m *Manager) Ensure(ctx context.Context) (Setup, error) {
	n, err := m.ensureNetwork(ctx)
	if errors.Is(err, errNoSubnet) {
		s := Setup{Address: m.cfg.HostAddress, Degraded: err.Error()}
		m.log.Error("daemon networking: no network of its own for this instance; bridge tasks use Docker's default bridge and daemon tasks the host network",
			"err", err, "daemon", s.Address)
		m.set(s, false, false)
		return s, nil
	}
	if err != nil {
		return Setup{}, err
	}
	addr := m.address(n)
	if err := m.ensureHolder(ctx, n, addr); err != nil {
		s := Setup{BridgeNetwork: n.Name, InstanceNetwork: n.Name, Address: n.Gateway, Degraded: err.Error()}
		m.log.Error("daemon networking: no shared namespace for daemons; daemon tasks run in the host network and \"daemon\" is the host's address on the instance network",
			"err", err, "network", n.Name, "daemon", s.Address)
		m.set(s, false, true)
		return s, nil
	}
	s := Setup{BridgeNetwork: n.Name, InstanceNetwork: n.Name, DaemonNetworkMode: "container:" + m.holder, Address: addr}
	if m.cfg.Firewall != nil {
		if err := m.openBridge(ctx, n, addr); err != nil {
			m.log.Warn("daemon networking: bridge tasks run on the instance network, since the rules that let Docker's default bridge reach the daemons could not be set; their starts are slower there",
				"err", err)
		} else {
			s.BridgeNetwork = ""
		}
	}
	m.set(s, true, true)
	m.mu.Lock()
	ref := m.pauseRef
	m.mu.Unlock()
	m.prunePauseImages(ctx, ref)
	bridge := s.BridgeNetwork
	if bridge == "" {
		bridge = "default"
	}
	m.log.Info("daemon networking ready", "network", n.Name, "subnet", n.Subnet, "daemon", addr, "holder", m.holder, "bridge_tasks", bridge)
	return s, nil
}

// openBridge lets Docker's default bridge reach addr on n.
func (m *Manager) openBridge(ctx context.Context, n runtime.Network, addr netip.Addr) error {
	def, err := m.rt.Network(ctx, "bridge")
	if err != nil {
		return fmt.Errorf("Docker's default bridge: %w", err)
	}
	if def.Bridge == "" || n.Bridge == "" {
		return fmt.Errorf("the runtime names no bridge interface for %q (%q) or %q (%q)", def.Name, def.Bridge, n.Name, n.Bridge)
	}
	return m.cfg.Firewall.Allow(ctx, m.network, def.Bridge, n.Bridge, addr)
}

func (m *Manager) set(s Setup, holderOn, maintain bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.setup, m.holderOn, m.maintain = s, holderOn, maintain
}

// address is the daemon address on n: the configured one when n's subnet
// holds it, else the subnet's second address.
func (m *Manager) address(n runtime.Network) netip.Addr {
	if a := m.cfg.Address; a.IsValid() && CheckAddress(n.Subnet, a) == nil {
		return a
	}
	return DefaultAddress(n.Subnet)
}

// ensureNetwork adopts the instance's network by its labels or makes it.
// Made anew, it takes the subnet it had before, if that is still free.
func (m *Manager) ensureNetwork(ctx context.Context) (runtime.Network, error) {
	nets, err := m.rt.Networks(ctx, m.selector(RoleNetwork))
	if err != nil {
		return runtime.Network{}, err
	}
	for _, n := range nets {
		if n.Name != m.network && len(nets) > 1 {
			continue
		}
		if m.explicit && n.Subnet != m.cfg.Subnet {
			m.log.Warn("daemon networking: the instance network keeps its subnet; remove the network (and the tasks on it) to move it",
				"network", n.Name, "subnet", n.Subnet, "configured", m.cfg.Subnet)
		}
		m.mu.Lock()
		m.subnet = n.Subnet
		m.mu.Unlock()
		return n, nil
	}

	m.mu.Lock()
	prev := m.subnet
	m.mu.Unlock()
	var tries []netip.Prefix
	switch {
	case m.explicit:
		tries = []netip.Prefix{m.cfg.Subnet}
	case prev.IsValid():
		tries = append([]netip.Prefix{prev}, candidates()...)
	default:
		tries = candidates()
	}
	for _, s := range tries {
		spec := runtime.NetworkSpec{Name: m.network, Subnet: s, Gateway: Gateway(s), Labels: m.labels(RoleNetwork)}
		id, err := m.rt.CreateNetwork(ctx, spec)
		if errors.Is(err, runtime.ErrAddressInUse) && m.explicit && m.reclaim(ctx, s) {
			id, err = m.rt.CreateNetwork(ctx, spec)
		}
		if errors.Is(err, runtime.ErrAddressInUse) && !m.explicit {
			continue // another instance on this host has it
		}
		if errors.Is(err, runtime.ErrAddressInUse) {
			return runtime.Network{}, fmt.Errorf("daemon subnet %s (CAPSTAN_DAEMON_SUBNET) overlaps a network that exists; choose a free one: %w", s, err)
		}
		if err != nil {
			return runtime.Network{}, err
		}
		m.mu.Lock()
		m.subnet = s
		m.mu.Unlock()
		m.log.Info("daemon networking: created the instance network", "network", m.network, "subnet", s)
		if n, err := m.rt.Network(ctx, id); err == nil {
			return n, nil // with its bridge interface
		}
		return runtime.Network{ID: id, Name: m.network, Subnet: s, Gateway: spec.Gateway, Labels: spec.Labels}, nil
	}
	return runtime.Network{}, fmt.Errorf("%w: 169.254.172.0/24 to 169.254.254.0/24 are all in use; set CAPSTAN_DAEMON_SUBNET", errNoSubnet)
}

// pauseImageMinAge spares pause images another agent on the host may have
// imported a moment ago and not yet put a holder on.
const pauseImageMinAge = time.Hour

// prunePauseImages removes pause images of other executables (earlier
// versions of the agent) that no container uses, so upgrades do not pile
// up tens of megabytes each. The engine refuses to remove one in use.
func (m *Manager) prunePauseImages(ctx context.Context, keep string) {
	imgs, err := m.rt.Images(ctx)
	if err != nil {
		return
	}
	for _, img := range imgs {
		if len(img.RepoTags) == 0 || time.Since(img.Created) < pauseImageMinAge {
			continue
		}
		ours := true
		for _, tag := range img.RepoTags {
			ours = ours && strings.HasPrefix(tag, PauseRepo+":") && tag != keep
		}
		if !ours {
			continue
		}
		if err := m.rt.RemoveImage(ctx, img.ID); err == nil {
			m.log.Info("daemon networking: removed an unused pause image", "image", img.RepoTags)
		}
	}
}

// reclaim removes instance networks on subnet that nothing uses any more:
// no container is attached and none of their instance exists (an agent
// killed and its containers removed, a data directory wiped). Only for a
// configured subnet: the operator has said it is this instance's, and
// picking a free one is the gentler answer otherwise.
func (m *Manager) reclaim(ctx context.Context, subnet netip.Prefix) bool {
	nets, err := m.rt.Networks(ctx, map[string]string{LabelRole: RoleNetwork})
	if err != nil {
		return false
	}
	removed := false
	for _, n := range nets {
		inst := n.Labels[engine.LabelInstance]
		if !n.Subnet.Overlaps(subnet) || inst == m.cfg.InstanceArn || len(n.Containers) > 0 {
			continue
		}
		if cs, err := m.rt.List(ctx, map[string]string{engine.LabelInstance: inst}); err != nil || len(cs) > 0 {
			continue
		}
		if err := m.rt.RemoveNetwork(ctx, n.ID); err != nil {
			m.log.Warn("daemon networking: cannot remove an abandoned instance network", "network", n.Name, "err", err)
			continue
		}
		m.log.Warn("daemon networking: removed the network of an instance with nothing left on this host, to take its subnet",
			"network", n.Name, "instance", inst, "subnet", n.Subnet)
		removed = true
	}
	return removed
}

// ensureHolder keeps one running holder at addr on n: it adopts a running
// one, replaces one that stopped or sits elsewhere, and makes one when
// there is none.
func (m *Manager) ensureHolder(ctx context.Context, n runtime.Network, addr netip.Addr) error {
	cs, err := m.rt.List(ctx, m.selector(RoleNamespace))
	if err != nil {
		return err
	}
	var keep *runtime.Container
	var stale []runtime.Container
	for _, c := range cs {
		if keep == nil && c.State == runtime.StateRunning && c.IPAddress == addr.String() {
			keep = &c
			continue
		}
		stale = append(stale, c)
	}
	// The image is built only when a holder must be made: an adopted one
	// needs none, so a restart of an agent that cannot build it (or of a
	// newer version) keeps its daemons as they are.
	ref := ""
	if keep == nil {
		if ref, err = m.pauseImage(ctx); err != nil {
			return err
		}
	}
	// A stopped holder is made anew rather than restarted: a restart gets
	// a fresh namespace all the same, and a new one takes today's settings.
	for _, c := range stale {
		m.log.Warn("daemon networking: replacing the namespace holder", "id", c.ID, "state", c.State, "address", c.IPAddress)
		if err := m.rt.Remove(ctx, c.ID); err != nil && !errors.Is(err, runtime.ErrNotFound) {
			return err
		}
	}
	if keep != nil {
		m.mu.Lock()
		if m.holderID != keep.ID {
			m.holderID, m.born = keep.ID, keep.StartedAt
		}
		m.mu.Unlock()
		return nil
	}

	spec := runtime.ContainerSpec{
		Name:        m.holder,
		Image:       ref,
		Labels:      m.labels(RoleNamespace),
		NetworkMode: n.Name,
		// Daemons share the holder's /etc/hosts, so they resolve it too.
		ExtraHosts: []string{HostName + ":" + addr.String()},
		// The holder only waits for a signal; it needs nothing.
		User:           "65534:65534",
		CapDrop:        []string{"ALL"},
		ReadonlyRootfs: true,
		CPUShares:      2,
		MemoryLimit:    64 << 20,
		StopTimeout:    2 * time.Second,
	}
	id, err := m.rt.CreateWithAddress(ctx, spec, addr)
	if err != nil {
		return fmt.Errorf("create the namespace holder: %w", err)
	}
	if err := m.rt.Start(ctx, id); err != nil {
		_ = m.rt.Remove(ctx, id)
		return fmt.Errorf("start the namespace holder: %w", err)
	}
	// A pause binary that does not know `pause` exits at once.
	if c, err := m.rt.Inspect(ctx, id); err != nil || c.State != runtime.StateRunning {
		_ = m.rt.Remove(ctx, id)
		if err == nil {
			err = fmt.Errorf("it exited at once with code %d %s", c.ExitCode, c.Error)
		}
		return fmt.Errorf("start the namespace holder: %w", err)
	}
	m.mu.Lock()
	m.holderID, m.born = id, time.Now()
	m.mu.Unlock()
	m.log.Info("daemon networking: started the namespace holder", "id", id, "name", m.holder, "address", addr)
	m.stopStranded(ctx, id)
	return nil
}

// pauseImage returns the holder image, building it if it was not built or
// has been removed since.
func (m *Manager) pauseImage(ctx context.Context) (string, error) {
	m.mu.Lock()
	ref := m.pauseRef
	m.mu.Unlock()
	if ref != "" {
		if _, err := m.rt.Image(ctx, ref); err == nil || !errors.Is(err, runtime.ErrNotFound) {
			return ref, err
		}
	}
	if m.cfg.PauseImage != "" {
		if _, err := m.rt.Image(ctx, m.cfg.PauseImage); err != nil {
			return "", fmt.Errorf("pause image %s: %w", m.cfg.PauseImage, err)
		}
		m.mu.Lock()
		m.pauseRef = m.cfg.PauseImage
		m.mu.Unlock()
		return m.cfg.PauseImage, nil
	}
	path := m.cfg.PauseBinary
	if path == "" {
		var err error
		if path, err = os.Executable(); err != nil {
			return "", fmt.Errorf("cannot find this executable for the pause image: %w", err)
		}
	}
	ref, err := ensurePauseImage(ctx, m.rt, path)
	if err != nil {
		return "", err
	}
	m.mu.Lock()
	m.pauseRef = ref
	m.mu.Unlock()
	return ref, nil
}

// stopStranded stops running daemon containers still in an earlier
// holder's namespace: it went with its holder's network, so they can
// neither be reached nor reach anything. Their tasks stop and are replaced
// in the new namespace, as for any daemon that exits.
func (m *Manager) stopStranded(ctx context.Context, holderID string) {
	cs, err := m.rt.List(ctx, map[string]string{engine.LabelInstance: m.cfg.InstanceArn})
	if err != nil {
		m.log.Warn("daemon networking: cannot list daemon containers to check their namespace", "err", err)
		return
	}
	// Containers of awsvpc tasks join their task's holder, not the daemons'.
	taskHolders := map[string]bool{}
	for _, c := range cs {
		if c.Labels[LabelRole] == RoleTaskNamespace {
			taskHolders[c.ID], taskHolders[c.Name] = true, true
		}
	}
	var wg sync.WaitGroup
	for _, c := range cs {
		joined, ok := strings.CutPrefix(c.NetworkMode, "container:")
		if !ok || c.State != runtime.StateRunning || joined == holderID || joined == m.holder || c.Labels[LabelRole] != "" || taskHolders[joined] {
			continue
		}
		m.log.Warn("daemon networking: stopping a daemon container left without a network by the holder's replacement",
			"container", c.Name, "task", c.Labels[engine.LabelTaskArn])
		wg.Go(func() {
			if err := m.rt.Stop(ctx, c.ID, m.cfg.StopTimeout); err != nil && !errors.Is(err, runtime.ErrNotFound) {
				m.log.Warn("daemon networking: cannot stop a stranded daemon container", "container", c.Name, "err", err)
			}
		})
	}
	wg.Wait()
}

// Run keeps the network and the holder until ctx ends: a holder that dies
// or is removed is replaced at once (on runtime events), or after a
// back-off if it lived less than a minute, and everything is checked every
// CheckInterval in case events were lost.
func (m *Manager) Run(ctx context.Context) error {
	m.mu.Lock()
	maintain := m.maintain
	m.mu.Unlock()
	if !maintain {
		return nil
	}
	tick := time.NewTicker(m.cfg.CheckInterval)
	defer tick.Stop()
	evs, errc := m.rt.Events(ctx)
	var reopen, retry <-chan time.Time
	delay, backoff := time.Second, time.Duration(0)
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-evs:
			if !ok {
				err := <-errc
				if ctx.Err() != nil {
					return nil
				}
				m.log.Warn("daemon networking: runtime event stream broke; reopening", "err", err, "in", delay)
				evs, reopen = nil, time.After(delay)
				delay = min(delay*2, 30*time.Second)
				m.reconcile(ctx) // events may have been missed
				continue
			}
			delay = time.Second
			lived, ok := m.concerns(ev)
			switch {
			case !ok || retry != nil:
			case lived >= time.Minute:
				backoff = 0
				m.reconcile(ctx)
			default:
				// Dying young again and again (a pause binary that
				// crashes): back off rather than churn containers.
				backoff = min(max(2*backoff, time.Second), m.cfg.CheckInterval)
				m.log.Warn("daemon networking: the namespace holder went down soon after it started; replacing it after a pause", "in", backoff)
				retry = time.After(backoff)
			}
		case <-retry:
			retry = nil
			m.reconcile(ctx)
		case <-reopen:
			reopen = nil
			evs, errc = m.rt.Events(ctx)
		case <-tick.C:
			m.reconcile(ctx)
		}
	}
}

// concerns reports whether ev may mean the current holder is gone, and how
// long it lived. Events of holders the manager replaced itself are not.
func (m *Manager) concerns(ev runtime.Event) (time.Duration, bool) {
	m.mu.Lock()
	id, born := m.holderID, m.born
	m.mu.Unlock()
	if ev.ContainerID != id {
		return 0, false
	}
	switch ev.Action {
	case runtime.EventDie, runtime.EventDestroy, runtime.EventStop:
		return time.Since(born), true
	}
	return 0, false
}

// reconcile brings back whatever is missing; failures are retried on the
// next check.
func (m *Manager) reconcile(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	n, err := m.ensureNetwork(ctx)
	if err != nil {
		if ctx.Err() == nil {
			m.log.Error("daemon networking: cannot restore the instance network", "err", err)
		}
		return
	}
	m.mu.Lock()
	s, on := m.setup, m.holderOn
	m.mu.Unlock()
	if !on {
		return
	}
	addr := m.address(n)
	if addr != s.Address {
		// Only when the network had to move to another subnet: running
		// containers keep the old address in their hosts file.
		m.log.Error("daemon networking: the instance network was made again on another subnet; tasks started before resolve \"daemon\" to the old address",
			"old", s.Address, "new", addr)
	}
	if err := m.ensureHolder(ctx, n, addr); err != nil && ctx.Err() == nil {
		m.log.Error("daemon networking: cannot restore the namespace holder", "err", err)
	}
	// The network may be new (a new interface), or the rules flushed.
	if s.BridgeNetwork == "" && s.InstanceNetwork != "" {
		if err := m.openBridge(ctx, n, addr); err != nil && ctx.Err() == nil {
			m.log.Error("daemon networking: cannot restore the rules that let bridge tasks reach the daemons", "err", err)
		}
	}
}

// Remove deletes what the manager made for instanceArn: the holder, the
// network (disconnecting anything left on it) and, on a host whose
// networks have bridge interfaces, its firewall rules. For an instance
// that is retired, never for an agent that merely stops.
func Remove(ctx context.Context, rt Runtime, instanceArn string) error {
	var errs []error
	cs, err := rt.List(ctx, map[string]string{engine.LabelInstance: instanceArn})
	if err != nil {
		return err
	}
	for _, c := range cs {
		if r := c.Labels[LabelRole]; r != RoleNamespace && r != RoleTaskNamespace {
			continue
		}
		if err := rt.Remove(ctx, c.ID); err != nil && !errors.Is(err, runtime.ErrNotFound) {
			errs = append(errs, err)
		}
	}
	nets, err := rt.Networks(ctx, map[string]string{engine.LabelInstance: instanceArn, LabelRole: RoleNetwork})
	if err != nil {
		return errors.Join(append(errs, err)...)
	}
	bridged := false
	for _, n := range nets {
		bridged = bridged || n.Bridge != ""
		for id := range n.Containers {
			if err := rt.DisconnectNetwork(ctx, n.ID, id); err != nil && !errors.Is(err, runtime.ErrNotFound) {
				errs = append(errs, err)
			}
		}
		if err := rt.RemoveNetwork(ctx, n.ID); err != nil && !errors.Is(err, runtime.ErrNotFound) {
			errs = append(errs, err)
		}
	}
	// Without iptables (not root, another firewall) no rules were made.
	if fw, err := HostFirewall(); bridged && err == nil {
		tag, _ := Names(instanceArn)
		if err := fw.Revoke(ctx, tag); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
