package config

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/capstanhq/capstan/internal/runtime"
)

// DefaultEnvFile is read when it exists and --config does not name another.
const DefaultEnvFile = "/etc/capstan/agent.env"

// MetadataPort is the default port of the task metadata endpoint; it is in
// the default ECS_RESERVED_PORTS so no task can take it.
const MetadataPort = 51679

// PullBehavior is ECS_IMAGE_PULL_BEHAVIOR.
type PullBehavior string

// Pull behaviours, as ECS names them.
const (
	PullDefault      PullBehavior = "default"       // pull; on failure use the cached image if any
	PullAlways       PullBehavior = "always"        // pull; failure fails
	PullOnce         PullBehavior = "once"          // pull only if this agent never pulled it
	PullPreferCached PullBehavior = "prefer-cached" // pull only if missing locally
)

// LevelCritical is ECS_LOGLEVEL=crit; slog has no level above error.
const LevelCritical = slog.LevelError + 4

// Config is the agent's whole configuration. Build it with Load.
type Config struct {
	Endpoint string // control plane URL: the first of Endpoints
	// Endpoints are the servers the agent may talk to, in the order it
	// tries them (CAPSTAN_ENDPOINT may list several, comma-separated).
	Endpoints []string
	// CABundle is a PEM file of the certificates the server's is checked
	// against ("": the system's roots).
	CABundle string
	Cluster  string
	DataDir  string // absolute
	// EnvFile is the env file that was read, "" if none.
	EnvFile string

	AccessKeyID     string
	SecretAccessKey Secret
	Region          string

	LogLevel slog.Level

	// Resources. InstanceCPU (CPU units, 1024 per vCPU) and
	// InstanceMemoryMiB override what the runtime reports when non-zero.
	InstanceCPU       int
	InstanceMemoryMiB int64
	ReservedMemoryMiB int64
	ReservedPorts     []int
	ReservedPortsUDP  []int

	DisablePrivileged     bool
	ContainerStopTimeout  time.Duration
	ContainerStartTimeout time.Duration
	TaskCleanupWait       time.Duration

	ImagePullBehavior       PullBehavior
	ImageCleanupInterval    time.Duration
	ImageMinimumCleanupAge  time.Duration
	NumImagesDeletePerCycle int
	DisableImageCleanup     bool
	// RegistryAuth holds ECS_ENGINE_AUTH_DATA keyed by registry host as
	// RegistryHost normalises it ("docker.io", "127.0.0.1:5000").
	RegistryAuth map[string]RegistryCredential

	InstanceAttributes map[string]string

	MetricsAddr string // host:port of /metrics
	// MetadataAddr is where the task metadata endpoint listens.
	MetadataAddr string
	// BridgeIP is the docker0 gateway as seen from bridge-mode containers;
	// "" when the host has no docker0.
	BridgeIP string
	// MetadataRPS and MetadataBurst throttle each container's requests.
	MetadataRPS   int
	MetadataBurst int

	// DaemonSubnet and DaemonAddress place the instance's shared daemon
	// namespace. Both zero: the first free of 169.254.172.0/24,
	// 169.254.173.0/24, ... at its second address.
	DaemonSubnet  netip.Prefix
	DaemonAddress netip.Addr
	// PauseBinary is the static capstan executable the namespace holder
	// runs; "" means the agent's own.
	PauseBinary string
	// TaskBridge is where bridge-mode tasks run: "default", Docker's
	// default bridge with firewall rules to the daemon address (falling
	// back to the instance network when they cannot be kept), or
	// "instance", the instance's own network.
	TaskBridge string

	// Runtime runs the containers: "docker" (the default), or "sim",
	// simulated containers in memory for scale and fault tests.
	Runtime string

	// Ignored lists env-file keys the agent does not know (ECS_* settings
	// with no Capstan meaning, typos) so the caller can warn about them.
	Ignored []string
}

// RegistryCredential is one private registry login.
type RegistryCredential struct {
	Username string
	Password Secret
	Email    string
}

// Secret is a string that never prints: every fmt verb, slog and JSON show
// it redacted. Use Reveal where the value is really needed.
type Secret string

const redacted = "[redacted]"

// Reveal returns the secret itself.
func (s Secret) Reveal() string { return string(s) }

// String implements fmt.Stringer.
func (s Secret) String() string { return redacted }

// Format keeps the value out of every fmt verb, %#v and %q included.
func (s Secret) Format(f fmt.State, _ rune) { io.WriteString(f, redacted) }

// LogValue implements slog.LogValuer.
func (s Secret) LogValue() slog.Value { return slog.StringValue(redacted) }

// MarshalText keeps the value out of JSON and text encodings.
func (s Secret) MarshalText() ([]byte, error) { return []byte(redacted), nil }

// RegistryAuths converts RegistryAuth to runtime credentials by host.
func (c Config) RegistryAuths() map[string]runtime.RegistryAuth {
	out := make(map[string]runtime.RegistryAuth, len(c.RegistryAuth))
	for host, cred := range c.RegistryAuth {
		out[host] = runtime.RegistryAuth{Username: cred.Username, Password: cred.Password.Reveal(), ServerAddress: host}
	}
	return out
}

// MetadataURIAddr is the host:port a container in networkMode uses to reach
// the metadata endpoint. When the endpoint listens on all addresses, bridge
// containers go through the docker0 gateway and host-network containers
// through loopback; a specific listen address is used as is (the operator
// chose it, and must make it reachable).
func (c Config) MetadataURIAddr(networkMode string) string {
	host, port, err := net.SplitHostPort(c.MetadataAddr)
	if err != nil {
		return c.MetadataAddr
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		host = "127.0.0.1"
		if networkMode != "host" && c.BridgeIP != "" {
			host = c.BridgeIP
		}
	}
	return net.JoinHostPort(host, port)
}

// String lists the configuration with secrets redacted, for start-up logs.
func (c Config) String() string {
	var b strings.Builder
	add := func(k string, v any) { fmt.Fprintf(&b, "%s=%v ", k, v) }
	add("endpoint", strings.Join(c.Endpoints, ","))
	add("caBundle", c.CABundle)
	add("cluster", c.Cluster)
	add("dataDir", c.DataDir)
	add("envFile", c.EnvFile)
	add("accessKeyId", c.AccessKeyID)
	add("secretAccessKey", c.SecretAccessKey)
	add("region", c.Region)
	add("logLevel", c.LogLevel)
	add("instanceCpu", c.InstanceCPU)
	add("instanceMemoryMiB", c.InstanceMemoryMiB)
	add("reservedMemoryMiB", c.ReservedMemoryMiB)
	add("reservedPorts", c.ReservedPorts)
	add("reservedPortsUdp", c.ReservedPortsUDP)
	add("disablePrivileged", c.DisablePrivileged)
	add("containerStopTimeout", c.ContainerStopTimeout)
	add("containerStartTimeout", c.ContainerStartTimeout)
	add("taskCleanupWait", c.TaskCleanupWait)
	add("imagePullBehavior", c.ImagePullBehavior)
	add("imageCleanupInterval", c.ImageCleanupInterval)
	add("imageMinimumCleanupAge", c.ImageMinimumCleanupAge)
	add("numImagesDeletePerCycle", c.NumImagesDeletePerCycle)
	add("disableImageCleanup", c.DisableImageCleanup)
	hosts := make([]string, 0, len(c.RegistryAuth))
	for h, cred := range c.RegistryAuth {
		hosts = append(hosts, h+"("+cred.Username+")")
	}
	slices.Sort(hosts)
	add("registryAuth", hosts)
	add("instanceAttributes", c.InstanceAttributes)
	add("metricsAddr", c.MetricsAddr)
	add("metadataAddr", c.MetadataAddr)
	add("bridgeIp", c.BridgeIP)
	add("metadataRpsLimit", fmt.Sprintf("%d,%d", c.MetadataRPS, c.MetadataBurst))
	if c.DaemonSubnet.IsValid() {
		add("daemonSubnet", c.DaemonSubnet)
		add("daemonAddress", c.DaemonAddress)
	} else {
		add("daemonSubnet", "auto")
	}
	add("pauseBinary", c.PauseBinary)
	add("taskBridge", c.TaskBridge)
	add("runtime", c.Runtime)
	return strings.TrimSuffix(b.String(), " ")
}

// GoString keeps %#v redacted too.
func (c Config) GoString() string { return "config.Config{" + c.String() + "}" }

// bridgeIP finds the docker0 gateway address; a variable so tests can
// pretend the host has or lacks one.
var bridgeIP = func() string {
	ifc, err := net.InterfaceByName("docker0")
	if err != nil {
		return ""
	}
	addrs, err := ifc.Addrs()
	if err != nil {
		return ""
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil {
			return n.IP.String()
		}
	}
	return ""
}

// Load reads flags from args, then the env file (--config, or envFile when
// it exists; "" for none), then env, and validates the result. env returns
// "" for unset variables (os.Getenv fits).
func Load(args []string, env func(string) string, envFile string) (Config, error) {
	fs := flag.NewFlagSet("capstan agent", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	endpoint := fs.String("endpoint", "", "control plane URL (CAPSTAN_ENDPOINT)")
	cluster := fs.String("cluster", "", "cluster name (ECS_CLUSTER)")
	dataDir := fs.String("data-dir", "", "state directory (ECS_DATADIR)")
	file := fs.String("config", "", "env file of KEY=VALUE lines")
	rt := fs.String("runtime", "", "container runtime: docker or sim (CAPSTAN_RUNTIME)")
	if err := fs.Parse(args); err != nil {
		return Config{}, fmt.Errorf("flags: %w", err)
	}
	if fs.NArg() > 0 {
		return Config{}, fmt.Errorf("flags: unexpected argument %q", fs.Arg(0))
	}
	flags := map[string]string{}
	fs.Visit(func(f *flag.Flag) {
		switch f.Name {
		case "endpoint":
			flags[envEndpoint] = *endpoint
		case "cluster":
			flags[envCluster] = *cluster
		case "data-dir":
			flags[envDataDir] = *dataDir
		case "runtime":
			flags[envRuntime] = *rt
		}
	})

	var c Config
	var fileVals map[string]fileValue
	switch {
	case *file != "":
		vals, err := readEnvFile(*file)
		if err != nil {
			return Config{}, err
		}
		c.EnvFile, fileVals = *file, vals
	case envFile != "":
		vals, err := readEnvFile(envFile)
		switch {
		case errors.Is(err, os.ErrNotExist):
		case err != nil:
			return Config{}, err
		default:
			c.EnvFile, fileVals = envFile, vals
		}
	}
	for k := range fileVals {
		if !known[k] {
			c.Ignored = append(c.Ignored, k)
		}
	}
	slices.Sort(c.Ignored)

	p := &parser{lookup: func(name string) (string, string, bool) {
		if v, ok := flags[name]; ok {
			return v, "flag " + flagOf[name], true
		}
		if v := env(name); v != "" {
			return v, "", true
		}
		if v, ok := fileVals[name]; ok {
			return v.value, fmt.Sprintf("%s line %d", c.EnvFile, v.line), true
		}
		return "", "", false
	}}
	p.fill(&c)
	if err := errors.Join(p.errs...); err != nil {
		return Config{}, fmt.Errorf("invalid agent configuration:\n%w", err)
	}
	return c, nil
}

// Variable names read by the agent.
const (
	envEndpoint        = "CAPSTAN_ENDPOINT"
	envCABundle        = "CAPSTAN_CA_BUNDLE"
	envAWSCABundle     = "AWS_CA_BUNDLE"
	envCluster         = "ECS_CLUSTER"
	envDataDir         = "ECS_DATADIR"
	envAccessKey       = "AWS_ACCESS_KEY_ID"
	envSecretKey       = "AWS_SECRET_ACCESS_KEY"
	envRegion          = "AWS_REGION"
	envDefaultRegion   = "AWS_DEFAULT_REGION"
	envLogLevel        = "ECS_LOGLEVEL"
	envReservedMemory  = "ECS_RESERVED_MEMORY"
	envReservedPorts   = "ECS_RESERVED_PORTS"
	envReservedUDP     = "ECS_RESERVED_PORTS_UDP"
	envNoPrivileged    = "ECS_DISABLE_PRIVILEGED"
	envStopTimeout     = "ECS_CONTAINER_STOP_TIMEOUT"
	envStartTimeout    = "ECS_CONTAINER_START_TIMEOUT"
	envPullBehavior    = "ECS_IMAGE_PULL_BEHAVIOR"
	envCleanupInterval = "ECS_IMAGE_CLEANUP_INTERVAL"
	envCleanupAge      = "ECS_IMAGE_MINIMUM_CLEANUP_AGE"
	envDeletePerCycle  = "ECS_NUM_IMAGES_DELETE_PER_CYCLE"
	envNoImageCleanup  = "ECS_DISABLE_IMAGE_CLEANUP"
	envTaskCleanupWait = "ECS_ENGINE_TASK_CLEANUP_WAIT_DURATION"
	envMetadataRPS     = "ECS_TASK_METADATA_RPS_LIMIT"
	envAttributes      = "ECS_INSTANCE_ATTRIBUTES"
	envAuthType        = "ECS_ENGINE_AUTH_TYPE"
	envAuthData        = "ECS_ENGINE_AUTH_DATA"
	envInstanceCPU     = "CAPSTAN_INSTANCE_CPU"
	envInstanceMemory  = "CAPSTAN_INSTANCE_MEMORY"
	envMetricsAddr     = "CAPSTAN_METRICS_ADDR"
	envMetadataAddr    = "CAPSTAN_METADATA_ADDR"
	envDaemonSubnet    = "CAPSTAN_DAEMON_SUBNET"
	envDaemonAddress   = "CAPSTAN_DAEMON_ADDRESS"
	envPauseBinary     = "CAPSTAN_PAUSE_BINARY"
	envTaskBridge      = "CAPSTAN_TASK_BRIDGE"
	envRuntime         = "CAPSTAN_RUNTIME"
)

// known are the variables the agent reads.
var known = map[string]bool{
	envEndpoint: true, envCluster: true, envDataDir: true, envAccessKey: true,
	envSecretKey: true, envRegion: true, envDefaultRegion: true, envLogLevel: true,
	envReservedMemory: true, envReservedPorts: true, envReservedUDP: true, envNoPrivileged: true,
	envStopTimeout: true, envStartTimeout: true, envPullBehavior: true, envCleanupInterval: true,
	envCleanupAge: true, envDeletePerCycle: true, envNoImageCleanup: true, envTaskCleanupWait: true,
	envMetadataRPS: true, envAttributes: true, envAuthType: true, envAuthData: true,
	envInstanceCPU: true, envInstanceMemory: true, envMetricsAddr: true, envMetadataAddr: true,
	envDaemonSubnet: true, envDaemonAddress: true, envPauseBinary: true, envRuntime: true, envTaskBridge: true,
	envCABundle: true, envAWSCABundle: true,
}

var flagOf = map[string]string{envEndpoint: "--endpoint", envCluster: "--cluster", envDataDir: "--data-dir", envRuntime: "--runtime"}

// secretVars never have their values echoed in errors.
var secretVars = map[string]bool{envSecretKey: true, envAuthData: true}

var (
	clusterName = regexp.MustCompile(`^[a-zA-Z0-9_-]{1,255}$`)
	clusterARN  = regexp.MustCompile(`^arn:[a-z-]+:ecs:[a-z0-9-]+:[0-9]{12}:cluster/[a-zA-Z0-9_-]{1,255}$`)
	regionName  = regexp.MustCompile(`^[a-z]{2}(-[a-z]+)+-[0-9]+$`)
	attrName    = regexp.MustCompile(`^[a-zA-Z0-9_./\\-]{1,128}$`)
	attrValue   = regexp.MustCompile(`^[a-zA-Z0-9_.@/\\: -]{1,128}$`)
)

func (p *parser) fill(c *Config) {
	raw := p.str(envEndpoint, "")
	if raw == "" {
		p.fail(envEndpoint, "is required (or --endpoint): the control plane URL, e.g. https://capstan.example:8443")
	} else if eps, err := parseEndpoints(raw); err != nil {
		p.fail(envEndpoint, err.Error())
	} else {
		c.Endpoints, c.Endpoint = eps, eps[0]
	}
	c.CABundle = p.caBundle()
	c.Cluster = p.str(envCluster, "default")
	if !clusterName.MatchString(c.Cluster) && !clusterARN.MatchString(c.Cluster) {
		p.fail(envCluster, "must be a cluster name (1-255 letters, digits, - and _) or a cluster ARN")
	}
	c.DataDir = p.str(envDataDir, "/var/lib/capstan/agent")
	if abs, err := filepath.Abs(c.DataDir); err != nil {
		p.fail(envDataDir, "must be a directory path")
	} else {
		c.DataDir = abs
	}

	c.AccessKeyID = p.str(envAccessKey, "")
	if c.AccessKeyID == "" {
		p.fail(envAccessKey, "is required: the agent signs its requests with it")
	}
	c.SecretAccessKey = Secret(p.str(envSecretKey, ""))
	if c.SecretAccessKey == "" {
		p.fail(envSecretKey, "is required: the agent signs its requests with it")
	}
	regionVar := envRegion
	if _, _, ok := p.lookup(envRegion); !ok {
		regionVar = envDefaultRegion
	}
	c.Region = p.str(regionVar, "us-east-1")
	if !regionName.MatchString(c.Region) {
		p.fail(regionVar, "must be a region name like us-east-1")
	}

	switch lvl := strings.ToLower(p.str(envLogLevel, "info")); lvl {
	case "crit":
		c.LogLevel = LevelCritical
	case "error":
		c.LogLevel = slog.LevelError
	case "warn":
		c.LogLevel = slog.LevelWarn
	case "info":
		c.LogLevel = slog.LevelInfo
	case "debug":
		c.LogLevel = slog.LevelDebug
	default:
		p.fail(envLogLevel, "must be one of crit, error, warn, info, debug")
	}

	c.InstanceCPU = int(p.integer(envInstanceCPU, 0, 0, "CPU units (1024 per vCPU); 0 or unset means what the host has"))
	c.InstanceMemoryMiB = p.integer(envInstanceMemory, 0, 0, "MiB; 0 or unset means what the host has")
	c.ReservedMemoryMiB = p.integer(envReservedMemory, 0, 0, "MiB kept from tasks")
	c.ReservedPorts = p.ports(envReservedPorts, []int{22, 2375, 2376, 51678, MetadataPort})
	c.ReservedPortsUDP = p.ports(envReservedUDP, []int{})
	if c.InstanceMemoryMiB > 0 && c.ReservedMemoryMiB >= c.InstanceMemoryMiB {
		p.fail(envReservedMemory, fmt.Sprintf("must be less than %s (%d MiB)", envInstanceMemory, c.InstanceMemoryMiB))
	}

	c.DisablePrivileged = p.boolean(envNoPrivileged, false)
	c.ContainerStopTimeout = p.duration(envStopTimeout, 30*time.Second, time.Second)
	c.ContainerStartTimeout = p.duration(envStartTimeout, 3*time.Minute, 45*time.Second)
	c.TaskCleanupWait = p.duration(envTaskCleanupWait, 3*time.Hour, time.Minute)

	switch b := PullBehavior(p.str(envPullBehavior, string(PullDefault))); b {
	case PullDefault, PullAlways, PullOnce, PullPreferCached:
		c.ImagePullBehavior = b
	default:
		p.fail(envPullBehavior, "must be one of default, always, once, prefer-cached")
	}
	c.ImageCleanupInterval = p.duration(envCleanupInterval, 30*time.Minute, 10*time.Minute)
	c.ImageMinimumCleanupAge = p.duration(envCleanupAge, time.Hour, 0)
	c.NumImagesDeletePerCycle = int(p.integer(envDeletePerCycle, 5, 1, "images per cleanup cycle"))
	c.DisableImageCleanup = p.boolean(envNoImageCleanup, false)
	c.RegistryAuth = p.registryAuth()

	c.InstanceAttributes = p.attributes(envAttributes)

	c.MetricsAddr = p.addr(envMetricsAddr, "127.0.0.1:0")
	c.BridgeIP = bridgeIP()
	defMetadata := net.JoinHostPort("0.0.0.0", fmt.Sprint(MetadataPort))
	if c.BridgeIP != "" {
		defMetadata = net.JoinHostPort(c.BridgeIP, fmt.Sprint(MetadataPort))
	}
	c.MetadataAddr = p.addr(envMetadataAddr, defMetadata)
	c.MetadataRPS, c.MetadataBurst = p.rpsLimit(envMetadataRPS, 40, 60)

	c.DaemonSubnet, c.DaemonAddress = p.daemonNet(envDaemonSubnet, envDaemonAddress)
	if v := p.str(envPauseBinary, ""); v != "" {
		if abs, err := filepath.Abs(v); err != nil {
			p.fail(envPauseBinary, "must be a file path")
		} else {
			c.PauseBinary = abs
		}
	}
	switch c.TaskBridge = p.str(envTaskBridge, "default"); c.TaskBridge {
	case "default", "instance":
	default:
		p.fail(envTaskBridge, "must be default or instance")
	}
	switch c.Runtime = p.str(envRuntime, "docker"); c.Runtime {
	case "docker", "sim":
	default:
		p.fail(envRuntime, "must be docker or sim")
	}
}

// parseEndpoints splits a comma-separated list of server URLs, each
// http:// or https:// with a host; repeats are dropped.
func parseEndpoints(raw string) ([]string, error) {
	var out []string
	for i, e := range strings.Split(raw, ",") {
		e = strings.TrimSpace(e)
		if e == "" {
			return nil, fmt.Errorf("URL %d of the list is empty: want comma-separated http:// or https:// URLs", i+1)
		}
		if u, err := url.Parse(e); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil {
			return nil, fmt.Errorf("must be an http:// or https:// URL with a host (or several, comma-separated), got %q", e)
		}
		if !slices.Contains(out, e) {
			out = append(out, e)
		}
	}
	return out, nil
}
