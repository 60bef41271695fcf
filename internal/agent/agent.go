// Package agent assembles the instance agent: it registers the instance,
// runs the task engine on the container runtime, keeps the session to the
// control plane, and serves the task metadata endpoint and /metrics.
package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/ecs"
	"github.com/aws/aws-sdk-go-v2/service/ecs/types"
	"github.com/aws/smithy-go"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/capstanhq/capstan/internal/agent/config"
	"github.com/capstanhq/capstan/internal/agent/daemonnet"
	"github.com/capstanhq/capstan/internal/agent/engine"
	"github.com/capstanhq/capstan/internal/agent/images"
	"github.com/capstanhq/capstan/internal/agent/logs"
	"github.com/capstanhq/capstan/internal/agent/metadata"
	"github.com/capstanhq/capstan/internal/agent/resources"
	"github.com/capstanhq/capstan/internal/agent/session"
	"github.com/capstanhq/capstan/internal/agent/state"
	"github.com/capstanhq/capstan/internal/runtime"
	"github.com/capstanhq/capstan/internal/runtime/docker"
	"github.com/capstanhq/capstan/internal/runtime/sim"
)

// Version is the agent version reported at registration.
var Version = "0.1.0"

// Options are the parts a caller may supply instead of the defaults.
type Options struct {
	Runtime runtime.Runtime // nil: what cfg.Runtime names (Docker by default)
	Log     *slog.Logger
	// Ready, when set, receives the metrics and metadata addresses once the
	// agent has registered and is serving.
	Ready func(Endpoints)
	// HTTPClient carries registration and the session; nil: the defaults.
	HTTPClient *http.Client
	// PauseImage is an image the runtime already has for the daemon
	// namespace holder; "" builds one from the pause binary.
	PauseImage string
	// Hollow trims an agent that shares its process with thousands of
	// others (simulated instances): no task metadata endpoint, no /metrics
	// listener, no fsync of its state (which goes with the instance).
	// Registration, session, engine, state and resources are the real ones.
	Hollow bool
	// State, when set, is the agent's database instead of the file in its
	// data directory; the caller keeps and closes it (hollow instances keep
	// theirs in memory across agent restarts).
	State *state.DB
}

// Endpoints are where a running agent serves.
type Endpoints struct {
	InstanceArn string
	Metrics     string
	Metadata    string
}

// Run runs the agent until ctx ends. It never stops containers on its way
// out: the next run adopts them.
func Run(ctx context.Context, cfg config.Config, o Options) error {
	log := o.Log
	if log == nil {
		log = slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: cfg.LogLevel}))
	}
	if len(cfg.Ignored) > 0 {
		log.Warn("ignoring unknown settings in the env file", "keys", cfg.Ignored)
	}
	if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
		return fmt.Errorf("data dir: %w", err)
	}
	db := o.State
	if db == nil {
		stateOpts := []state.Option{state.WithLogger(log)}
		if o.Hollow {
			stateOpts = append(stateOpts, state.WithoutSync())
		}
		var err error
		if db, err = state.Open(filepath.Join(cfg.DataDir, state.FileName), stateOpts...); err != nil {
			return err
		}
		defer db.Close()
	}
	if r := db.Repair(); r != nil {
		log.Warn("agent database was damaged and has been set aside; rebuilding from the runtime", "moved_to", r.MovedTo, "reason", r.Reason)
	}

	rt := o.Runtime
	if rt == nil && cfg.Runtime == "sim" {
		// Simulated containers: every image is there, the holder's too.
		s := sim.New(sim.Config{})
		defer s.Close()
		rt = s
		if o.PauseImage == "" {
			o.PauseImage = sim.PauseImage
		}
		log.Warn("running on the simulated runtime: containers are not real (CAPSTAN_RUNTIME=sim)")
	}
	if rt == nil {
		d, err := docker.New(docker.Options{})
		if err != nil {
			return err
		}
		defer d.Close()
		rt = d
	}
	info, err := waitForRuntime(ctx, rt, log)
	if err != nil {
		return err
	}
	capacity := resources.Capacity{CPU: cfg.InstanceCPU, MemoryMiB: int(cfg.InstanceMemoryMiB),
		ReservedMemoryMiB: int(cfg.ReservedMemoryMiB), ReservedPorts: cfg.ReservedPorts, ReservedPortsUDP: cfg.ReservedPortsUDP}
	if capacity.CPU == 0 {
		capacity.CPU = info.CPUs * 1024
	}
	if capacity.MemoryMiB == 0 {
		capacity.MemoryMiB = int(info.MemoryBytes >> 20)
	}

	if o.HTTPClient == nil && cfg.CABundle != "" {
		// One client, so the API calls and the session trust the same CAs.
		hc, err := session.NewHTTPClient(cfg.CABundle)
		if err != nil {
			return fmt.Errorf("agent CA bundle: %w", err)
		}
		o.HTTPClient = hc
	}
	if cfg.CABundle != "" && strings.HasPrefix(cfg.Endpoint, "http://") {
		log.Warn("a CA bundle is set but the endpoint is plain http://: the server is not verified", "endpoint", cfg.Endpoint)
	}
	eo := ecs.Options{Region: cfg.Region, BaseEndpoint: aws.String(cfg.Endpoint),
		Credentials: credentials.NewStaticCredentialsProvider(cfg.AccessKeyID, cfg.SecretAccessKey.Reveal(), "")}
	if o.HTTPClient != nil {
		eo.HTTPClient = o.HTTPClient
	}
	if fo := session.APIFailover(cfg.Endpoints); fo != nil {
		eo.APIOptions = append(eo.APIOptions, fo)
	}
	client := ecs.New(eo)
	for {
		err := runInstance(ctx, cfg, o, db, rt, client, capacity, info, log)
		if errors.Is(err, session.ErrInstanceRetired) {
			// The provider terminates the machine; nothing is left to serve.
			log.Info("this managed instance was deregistered and is being retired; stopping")
			return nil
		}
		if !errors.Is(err, session.ErrInstanceInactive) {
			return err
		}
		log.Warn("this instance was deregistered; retiring its containers and registering a new instance")
	}
}

// runInstance registers the instance and serves it until ctx ends or the
// instance is deregistered.
func runInstance(ctx context.Context, cfg config.Config, o Options, db *state.DB, rt runtime.Runtime, client *ecs.Client,
	capacity resources.Capacity, info runtime.Info, log *slog.Logger) error {
	previous, err := db.InstanceARN()
	if err != nil {
		return err
	}
	instanceArn, err := register(ctx, client, db, cfg, capacity, info, log)
	if err != nil {
		return err
	}
	if previous != "" && previous != instanceArn {
		if err := retire(ctx, rt, db, previous, log); err != nil {
			return err
		}
	}
	log.Info("registered", "instance", instanceArn, "cpu", capacity.CPU, "memory_mib", capacity.AvailableMemoryMiB())
	dnet, dsetup, err := daemonNetwork(ctx, cfg, o, rt, instanceArn, log)
	if err != nil {
		return err
	}
	// awsvpc tasks get namespaces of their own on the instance network.
	var taskNet engine.TaskNetwork
	if dnet != nil && dsetup.InstanceNetwork != "" {
		taskNet = dnet
	}

	var md *metadata.Server
	var mdListener net.Listener
	var metadataURI func(taskArn, container string) string
	src := &metadataSource{}
	if !o.Hollow {
		key, err := db.MetadataKey()
		if err != nil {
			return err
		}
		// Several agents on one host (local instances) each take a free
		// port, the same one after a restart (metadataport.go).
		var addr string
		if mdListener, addr, err = listenMetadata(db, cfg.MetadataAddr, log); err != nil {
			return fmt.Errorf("task metadata endpoint on %s (CAPSTAN_METADATA_ADDR): %w", cfg.MetadataAddr, err)
		}
		defer mdListener.Close()
		cfg.MetadataAddr = addr
		md = metadata.New(metadata.Config{Source: src, Runtime: rt, Addr: cfg.MetadataURIAddr("bridge"), HostAddr: cfg.MetadataURIAddr("host"),
			Key: key, RPS: cfg.MetadataRPS, Burst: cfg.MetadataBurst, Log: log})
		metadataURI = md.URIFor
	}
	imgs := images.New(rt, db, images.FromConfig(cfg))
	eng, err := engine.New(engine.Config{Runtime: rt, Store: db, Cluster: cfg.Cluster, ContainerInstanceArn: instanceArn,
		Resources: capacity, StopTimeout: cfg.ContainerStopTimeout, StartTimeout: cfg.ContainerStartTimeout,
		CleanupWait: cfg.TaskCleanupWait, DisablePrivileged: cfg.DisablePrivileged, Images: imgs, MetadataURI: metadataURI,
		VolumeDir: filepath.Join(cfg.DataDir, "volumes"), DaemonNetworkMode: dsetup.DaemonNetworkMode,
		BridgeNetwork: dsetup.BridgeNetwork, ExtraHosts: dsetup.ExtraHosts(), TaskNetwork: taskNet, Log: log})
	if err != nil {
		return err
	}
	src.eng = eng
	known := cfg.Endpoints
	if len(known) == 0 {
		known = []string{cfg.Endpoint}
	}
	endpoints := learnEndpoints(ctx, client, cfg.Cluster, instanceArn, known, log) // discover.go
	sess := session.New(session.Config{Endpoint: cfg.Endpoint, Endpoints: endpoints, CABundle: cfg.CABundle, AccessKeyID: cfg.AccessKeyID, SecretKey: cfg.SecretAccessKey.Reveal(),
		Region: cfg.Region, InstanceArn: instanceArn, AgentVersion: Version, Store: db, Engine: eng, Logs: logs.Reader{RT: rt}, Exec: session.ContainerExec{RT: rt}, HTTPClient: o.HTTPClient, Log: log})

	var metricsServer *http.Server
	var metricsListener net.Listener
	if !o.Hollow {
		reg := prometheus.NewRegistry()
		reg.MustRegister(sess.Collectors()...)
		reg.MustRegister(engineCollector{eng}, imagesCollector{imgs})
		if metricsListener, err = net.Listen("tcp", cfg.MetricsAddr); err != nil {
			return fmt.Errorf("metrics on %s (CAPSTAN_METRICS_ADDR): %w", cfg.MetricsAddr, err)
		}
		mux := http.NewServeMux()
		mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
		mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
		metricsServer = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	}

	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, 6)
	run := func(name string, fn func() error) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := fn(); err != nil && rctx.Err() == nil {
				errs <- fmt.Errorf("%s: %w", name, err)
			}
		}()
	}
	run("engine", func() error { return eng.Run(rctx) })
	run("session", func() error { return sess.Run(rctx) })
	run("images", func() error { return imgs.Run(rctx) })
	if dnet != nil {
		run("daemon networking", func() error { return dnet.Run(rctx) })
	}
	ends := Endpoints{InstanceArn: instanceArn}
	if md != nil {
		run("metadata", func() error { return md.Serve(rctx, mdListener) })
		ends.Metadata = mdListener.Addr().String()
	}
	if metricsServer != nil {
		run("metrics", func() error {
			go func() { <-rctx.Done(); metricsServer.Close() }()
			if err := metricsServer.Serve(metricsListener); !errors.Is(err, http.ErrServerClosed) {
				return err
			}
			return nil
		})
		ends.Metrics = metricsListener.Addr().String()
	}
	if o.Ready != nil {
		o.Ready(ends)
	}
	var runErr error
	select {
	case <-ctx.Done():
	case runErr = <-errs:
		if !errors.Is(runErr, session.ErrInstanceInactive) {
			log.Error("agent component failed", "err", runErr)
		}
	}
	cancel()
	wg.Wait()
	return runErr
}

// daemonNetwork sets up the instance network and the daemons' shared
// namespace (package daemonnet). A runtime without networks (a fake) runs
// daemon tasks in the host network and bridge tasks on the default bridge.
func daemonNetwork(ctx context.Context, cfg config.Config, o Options, rt runtime.Runtime, instanceArn string, log *slog.Logger) (*daemonnet.Manager, daemonnet.Setup, error) {
	drt, ok := rt.(daemonnet.Runtime)
	if !ok {
		log.Warn("daemon networking: the runtime has no networks; daemon tasks run in the host network")
		return nil, daemonnet.Setup{}, nil
	}
	host, _ := netip.ParseAddr(cfg.BridgeIP) // zero without docker0
	// Hollow instances share the host by the thousand and never touch its
	// firewall.
	var fw daemonnet.Firewall
	if !o.Hollow && cfg.TaskBridge == "default" {
		if t, err := daemonnet.HostFirewall(); err != nil {
			log.Warn("daemon networking: bridge tasks run on the instance network, since the host's firewall cannot be managed; their starts are slower there (CAPSTAN_TASK_BRIDGE=instance says so on purpose)",
				"err", err)
		} else {
			fw = t
		}
	}
	m, err := daemonnet.New(daemonnet.Config{Runtime: drt, InstanceArn: instanceArn, Cluster: cfg.Cluster,
		Subnet: cfg.DaemonSubnet, Address: cfg.DaemonAddress, PauseBinary: cfg.PauseBinary, PauseImage: o.PauseImage, HostAddress: host,
		Firewall: fw, Log: log})
	if err != nil {
		return nil, daemonnet.Setup{}, err
	}
	s, err := m.Ensure(ctx)
	if err != nil {
		return nil, daemonnet.Setup{}, fmt.Errorf("daemon networking: %w", err)
	}
	return m, s, nil
}

// retire removes what a deregistered instance left: its containers (the
// server has stopped their tasks), its network and its local records.
func retire(ctx context.Context, rt runtime.Runtime, db *state.DB, instanceArn string, log *slog.Logger) error {
	cs, err := rt.List(ctx, map[string]string{"com.capstan.instance": instanceArn})
	if err != nil {
		return fmt.Errorf("list containers of the old instance: %w", err)
	}
	for _, c := range cs {
		if err := rt.Stop(ctx, c.ID, 30*time.Second); err != nil && !errors.Is(err, runtime.ErrNotFound) {
			log.Warn("stop container of the old instance", "container", c.ID, "err", err)
		}
		if err := rt.Remove(ctx, c.ID); err != nil && !errors.Is(err, runtime.ErrNotFound) {
			log.Warn("remove container of the old instance", "container", c.ID, "err", err)
		}
	}
	if drt, ok := rt.(daemonnet.Runtime); ok {
		if err := daemonnet.Remove(ctx, drt, instanceArn); err != nil {
			log.Warn("remove the network of the old instance", "err", err)
		}
	}
	tasks, err := db.Tasks()
	if err != nil {
		return err
	}
	for arn := range tasks {
		if err := db.DeleteTask(arn); err != nil {
			return err
		}
	}
	last, err := db.LastBatchID()
	if err != nil {
		return err
	}
	if err := db.AckThrough(last); err != nil {
		return err
	}
	// The old instance's desired tasks must not be resumed by the new one.
	seq, _, err := db.Manifest()
	if err != nil {
		return err
	}
	if err := db.PutManifest(seq, []byte(fmt.Sprintf(`{"seq":%d,"tasks":[]}`, seq))); err != nil {
		return err
	}
	log.Info("retired the old instance", "instance", instanceArn, "containers", len(cs))
	return nil
}

// waitForRuntime retries until the container runtime answers.
func waitForRuntime(ctx context.Context, rt runtime.Runtime, log *slog.Logger) (runtime.Info, error) {
	backoff := time.Second
	for {
		info, err := rt.Info(ctx)
		if err == nil {
			return info, nil
		}
		log.Warn("container runtime not reachable; retrying", "err", err, "in", backoff)
		select {
		case <-ctx.Done():
			return info, ctx.Err()
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, time.Minute)
	}
}

// register registers the instance, or re-registers the one this data
// directory belongs to. An instance deregistered meanwhile is replaced by
// a new registration instead of leaving the agent stuck.
func register(ctx context.Context, c *ecs.Client, db *state.DB, cfg config.Config, capacity resources.Capacity, info runtime.Info, log *slog.Logger) (string, error) {
	known, err := db.InstanceARN()
	if err != nil {
		return "", err
	}
	ports := func(ps []int) []string {
		out := []string{}
		for _, p := range ps {
			out = append(out, strconv.Itoa(p))
		}
		return out
	}
	reserved := cfg.ReservedPorts
	if reserved == nil {
		reserved = resources.DefaultReservedPorts
	}
	attrs := []types.Attribute{{Name: aws.String("capstan.agent-version"), Value: aws.String(Version)},
		{Name: aws.String("ecs.capability.docker-remote-api." + info.APIVersion)}}
	for k, v := range cfg.InstanceAttributes {
		attrs = append(attrs, types.Attribute{Name: aws.String(k), Value: aws.String(v)})
	}
	in := &ecs.RegisterContainerInstanceInput{
		Cluster: aws.String(cfg.Cluster),
		TotalResources: []types.Resource{
			{Name: aws.String("CPU"), Type: aws.String("INTEGER"), IntegerValue: int32(capacity.CPU)},
			{Name: aws.String("MEMORY"), Type: aws.String("INTEGER"), IntegerValue: int32(capacity.AvailableMemoryMiB())},
			{Name: aws.String("PORTS"), Type: aws.String("STRINGSET"), StringSetValue: ports(reserved)},
			{Name: aws.String("PORTS_UDP"), Type: aws.String("STRINGSET"), StringSetValue: ports(cfg.ReservedPortsUDP)},
		},
		VersionInfo: &types.VersionInfo{AgentVersion: aws.String(Version), DockerVersion: aws.String("DockerVersion: " + info.Version)},
		Attributes:  attrs,
	}
	backoff := time.Second
	for {
		if known != "" {
			in.ContainerInstanceArn = aws.String(known)
		} else {
			in.ContainerInstanceArn = nil
		}
		out, err := c.RegisterContainerInstance(ctx, in)
		if err == nil {
			arn := aws.ToString(out.ContainerInstance.ContainerInstanceArn)
			if arn != known {
				if err := db.SetInstanceARN(arn); err != nil {
					return "", err
				}
			}
			return arn, nil
		}
		var ae smithy.APIError
		if errors.As(err, &ae) {
			switch {
			case known != "" && ae.ErrorCode() == "ClientException" && strings.Contains(ae.ErrorMessage(), "deregistered"):
				log.Warn("this instance was deregistered; registering as a new one", "old", known)
				known = ""
				continue
			case ae.ErrorCode() == "AccessDeniedException" || ae.ErrorCode() == "UnrecognizedClientException" ||
				ae.ErrorCode() == "InvalidSignatureException" || ae.ErrorCode() == "ClusterNotFoundException" ||
				ae.ErrorCode() == "InvalidParameterException":
				return "", fmt.Errorf("register with %s: %w", cfg.Endpoint, err)
			}
		}
		log.Warn("registration failed; retrying", "err", session.ExplainTLS(err, cfg.Endpoint, cfg.CABundle), "in", backoff)
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, time.Minute)
	}
}
