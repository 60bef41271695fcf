// Package server assembles the control plane: the store, the ECS API, and
// the HTTP endpoints (API, health, metrics).
package server

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/capstanhq/capstan/internal/alarms"
	"github.com/capstanhq/capstan/internal/api"
	"github.com/capstanhq/capstan/internal/audit"
	"github.com/capstanhq/capstan/internal/auth"
	"github.com/capstanhq/capstan/internal/console"
	"github.com/capstanhq/capstan/internal/controller"
	"github.com/capstanhq/capstan/internal/controller/daemons"
	"github.com/capstanhq/capstan/internal/controller/deployments"
	"github.com/capstanhq/capstan/internal/controller/instances"
	"github.com/capstanhq/capstan/internal/controller/services"
	"github.com/capstanhq/capstan/internal/failover"
	"github.com/capstanhq/capstan/internal/fleet"
	"github.com/capstanhq/capstan/internal/gateway"
	"github.com/capstanhq/capstan/internal/iam"
	"github.com/capstanhq/capstan/internal/iamapi"
	"github.com/capstanhq/capstan/internal/ops"
	"github.com/capstanhq/capstan/internal/protocol"
	"github.com/capstanhq/capstan/internal/provision"
	"github.com/capstanhq/capstan/internal/provision/local"
	"github.com/capstanhq/capstan/internal/runtime/docker"
	"github.com/capstanhq/capstan/internal/store"
)

// DefaultAccountID is the account in generated ARNs unless --account-id says otherwise.
const DefaultAccountID = "000000000000"

// Config is everything `capstan server` takes.
type Config struct {
	Listen        string
	DataDir       string
	EtcdEndpoints []string
	// EtcdMaxTxnOps is the external cluster's --max-txn-ops (0: etcd's
	// default, 128).
	EtcdMaxTxnOps int
	EtcdPrefix    string
	// EtcdCACert, EtcdCert and EtcdKey are PEM files for TLS to an
	// external etcd: its CA, and the certificate the server presents.
	EtcdCACert, EtcdCert, EtcdKey string
	// SecretsKeyFile is the key the secrets in etcd are sealed with
	// (default DataDir/secrets.key, created on first start).
	SecretsKeyFile string
	// SecretsPreviousKeyFile is the key SecretsKeyFile replaces: a start
	// with both seals every secret anew under the new key.
	SecretsPreviousKeyFile string
	Region                 string
	AccountID              string
	// AdminKeyID and AdminSecret, when both set, are the administrator
	// credential; otherwise one is generated and kept in DataDir.
	AdminKeyID  string
	AdminSecret string
	// AdvertiseURL is how agents reach this server (default http://<listen>).
	AdvertiseURL string
	// Provisioner provides managed instances: "local" (agent processes on
	// this machine, the default), "sim" (hollow agents in this process on
	// simulated containers, for scale tests) or "none".
	Provisioner string
	// EC2 configures the ec2 provisioner (ec2.go).
	EC2 EC2Config
	// SimProvisionDelay is how long a sim instance takes to boot.
	SimProvisionDelay time.Duration
	// NewSimProvisioner builds the sim provisioner. It is given by the
	// program (cmd/capstan, bench/scale) rather than imported here: the sim
	// provisioner embeds the agent, whose tests start servers.
	NewSimProvisioner func(dir string, delay time.Duration, log *slog.Logger) (provision.Provisioner, error)
	// AgentBinary is the capstan executable local instances run
	// (default: this executable).
	AgentBinary string
	// AgentEnv adds settings to every provisioned agent.
	AgentEnv map[string]string
	// CheckAgentSettings judges capacity providers' agent settings with the
	// agent's parser (agentenv.Check); given by the command, as the server
	// may not import the agent. Nil checks only the names.
	CheckAgentSettings func(map[string]string) error
	// AlarmSource is the Prometheus or Alertmanager URL daemon deployments
	// read their alarms from ("": none; alarms are then refused).
	AlarmSource string
	// ProgressDeadline stops a daemon rollout without progress for this
	// long; 0 means DefaultProgressDeadline, negative never.
	ProgressDeadline time.Duration
	// ClockOffset shifts this server's clock (record timestamps, bake
	// times, expiry, launch timeouts) by a fixed amount; test-only
	// (ClockOffsetEnv). Leadership does not read it: it rests on etcd
	// leases.
	ClockOffset time.Duration
	// EventLimit is the most events a cluster keeps (0: the default);
	// EventRetention how long one is kept (0: fleet.DefaultEventRetention).
	EventLimit     int
	EventRetention time.Duration
	// StoppedRetention is how long a stopped task or an INACTIVE container
	// instance stays describable before the leader deletes it (0:
	// fleet.DefaultStoppedRetention).
	StoppedRetention time.Duration
	Log              *slog.Logger
	// AuditRetention is how long audit records are kept (0:
	// audit.DefaultRetention); AuditLimit the most kept (0:
	// audit.DefaultLimit).
	AuditRetention time.Duration
	AuditLimit     int
	// TLSCert and TLSKey are PEM files of the API's certificate and key;
	// TLSSelfSigned generates a pair into DataDir instead, TLSSANs naming
	// more hosts in it. With either the API serves HTTPS only (tls.go).
	TLSCert, TLSKey string
	TLSSelfSigned   bool
	TLSSANs         []string
	// MaxConnections caps the API listener's open connections and
	// MaxUnauthenticated its requests not yet verified (limits.go); 0
	// takes DefaultMaxConnections and DefaultMaxUnauthenticated.
	MaxConnections, MaxUnauthenticated int
}

// MinSecretLength is the shortest administrator secret taken: the secret is
// all that binds a signature to the root, and generated ones have 40.
const MinSecretLength = 16

// MinStoppedRetention keeps a stopped task readable for longer than a
// client's poll for it takes.
const MinStoppedRetention = time.Minute

// MinAuditRetention keeps a record for longer than a follower's poll.
const MinAuditRetention = time.Minute

// MinEventRetention keeps an event for longer than a follower's poll.
const MinEventRetention = time.Minute

// DefaultProgressDeadline is how long a daemon rollout may make no
// progress before it stops.
const DefaultProgressDeadline = 30 * time.Minute

var accountPattern = regexp.MustCompile(`^[0-9]{12}$`)
var regionPattern = regexp.MustCompile(`^[a-z]{2}(-[a-z]+)+-[0-9]+$`)

// Validate checks the configuration once, naming the flag at fault.
func (c *Config) Validate() error {
	if c.Listen == "" {
		return errors.New("--listen is required")
	}
	if _, _, err := net.SplitHostPort(c.Listen); err != nil {
		return fmt.Errorf("--listen must be HOST:PORT: %w", err)
	}
	if c.DataDir == "" {
		return errors.New("--data-dir is required")
	}
	if c.AccountID == "" {
		c.AccountID = DefaultAccountID
	}
	if !accountPattern.MatchString(c.AccountID) {
		return fmt.Errorf("--account-id must be 12 digits, got %q", c.AccountID)
	}
	if c.Region == "" {
		c.Region = "us-east-1"
	}
	if !regionPattern.MatchString(c.Region) {
		return fmt.Errorf("--region must look like us-east-1, got %q", c.Region)
	}
	if (c.AdminKeyID == "") != (c.AdminSecret == "") {
		return errors.New("CAPSTAN_ACCESS_KEY_ID and CAPSTAN_SECRET_ACCESS_KEY must be set together")
	}
	if c.AdminSecret != "" && len(c.AdminSecret) < MinSecretLength {
		return fmt.Errorf("CAPSTAN_SECRET_ACCESS_KEY must be at least %d characters long, got %d", MinSecretLength, len(c.AdminSecret))
	}
	if c.Log == nil {
		c.Log = slog.New(slog.DiscardHandler)
	}
	if _, err := alarms.New(c.AlarmSource, nil); err != nil {
		return fmt.Errorf("--alarm-source: %w", err)
	}
	if c.ProgressDeadline == 0 {
		c.ProgressDeadline = DefaultProgressDeadline
	}
	for _, r := range []struct {
		flag     string
		v        *time.Duration
		def, min time.Duration
	}{
		{"--stopped-task-retention", &c.StoppedRetention, fleet.DefaultStoppedRetention, MinStoppedRetention},
		{"--event-retention", &c.EventRetention, fleet.DefaultEventRetention, MinEventRetention},
		{"--audit-retention", &c.AuditRetention, audit.DefaultRetention, MinAuditRetention},
	} {
		if *r.v == 0 {
			*r.v = r.def
		}
		if *r.v < r.min {
			return fmt.Errorf("%s must be at least %s, got %s", r.flag, r.min, *r.v)
		}
	}
	if c.EventLimit < 0 {
		return fmt.Errorf("--event-limit must not be negative, got %d", c.EventLimit)
	}
	if c.AuditLimit < 0 {
		return fmt.Errorf("--audit-limit must not be negative, got %d", c.AuditLimit)
	}
	switch c.Provisioner {
	case "":
		c.Provisioner = "local"
	case "local", "sim", "ec2", "none":
	default:
		return fmt.Errorf("--provisioner must be local, sim, ec2 or none, got %q", c.Provisioner)
	}
	if c.Provisioner == "ec2" && c.EC2.ImageID == "" {
		return errors.New("--provisioner ec2 needs --ec2-image-id: the AMI its instances boot")
	}
	if c.SimProvisionDelay < 0 {
		return fmt.Errorf("--sim-provision-delay must not be negative, got %s", c.SimProvisionDelay)
	}
	if c.Provisioner == "sim" && c.tlsEnabled() {
		// Its hollow agents are given no CA bundle and would never connect.
		return errors.New("--provisioner sim cannot be combined with --tls-cert/--tls-key or --tls-self-signed: its in-process agents speak plain HTTP only; leave the TLS flags out for scale tests")
	}
	if c.MaxConnections == 0 {
		c.MaxConnections = DefaultMaxConnections()
	}
	if c.MaxConnections < 1 {
		return fmt.Errorf("--max-connections must be at least 1, got %d", c.MaxConnections)
	}
	if c.MaxUnauthenticated == 0 {
		c.MaxUnauthenticated = DefaultMaxUnauthenticated
	}
	if c.MaxUnauthenticated < 1 {
		return fmt.Errorf("--max-unauthenticated-requests must be at least 1, got %d", c.MaxUnauthenticated)
	}
	if err := c.validateState(); err != nil {
		return err
	}
	return c.validateTLS()
}

// Server is a running control plane.
type Server struct {
	Addr string // where the API listens
	URL  string // http:// or https:// and Addr
	// TLS describes the served certificate; nil for plain HTTP.
	TLS   *TLSInfo
	Admin auth.Credential
	// AdminFile is where the credential is kept ("" when it came from the
	// environment).
	AdminFile string
	// AdminGenerated is true when this start created the credential; its
	// secret is shown then only.
	AdminGenerated bool
	Store          *store.Store
	// Service is the API operations; its embedded State is the fleet
	// state the controllers and the gateway share.
	Service *ops.Service
	// Provisioner is the one Config.Provisioner named; nil for none.
	Provisioner provision.Provisioner
	gateway     *gateway.Gateway
	http        *http.Server
	served      chan error
	log         *slog.Logger

	stopControllers context.CancelFunc
	controllersDone chan struct{}
	reconciles      reconciles

	// Audit is the audit trail every API call is handed to.
	Audit *audit.Trail
}

// Start opens the store, registers the API and starts listening.
func Start(ctx context.Context, cfg Config) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
		return nil, fmt.Errorf("data dir: %w", err)
	}
	admin, adminFile, generated, err := adminCredential(cfg)
	if err != nil {
		return nil, err
	}
	admin.ARN = iam.RootARN(cfg.AccountID)
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return nil, fmt.Errorf("listen %s: %w", cfg.Listen, err)
	}
	addr := ln.Addr().String()
	lim := newLimits(cfg.MaxConnections, cfg.MaxUnauthenticated, cfg.Log)
	ln = lim.listener(ln) // under TLS: a refused connection costs no handshake
	var tlsInfo *TLSInfo
	if cfg.tlsEnabled() {
		tc, info, err := serverTLS(&cfg, addr)
		if err != nil {
			ln.Close()
			return nil, err
		}
		ln, tlsInfo = tls.NewListener(ln, tc), info
	}
	st, err := openStore(ctx, &cfg)
	if err != nil {
		ln.Close()
		return nil, err
	}
	endpoint := advertised(&cfg, addr)
	svc := fleet.New(fleet.Config{Store: st, Region: cfg.Region, AccountID: cfg.AccountID, Log: cfg.Log, Endpoint: endpoint, Now: cfg.now(),
		AlarmSource: cfg.AlarmSource != "", ProgressDeadline: max(cfg.ProgressDeadline, 0), EventLimit: cfg.EventLimit, EventRetention: cfg.EventRetention})
	identities := iam.NewStore(st, cfg.AccountID)
	if err := sealSecrets(ctx, &cfg, svc, identities); err != nil {
		st.Close()
		ln.Close()
		return nil, err
	}
	authorizer := iam.NewAuthorizer(identities)
	lookup := reachLookup{auth.Chain(auth.NewStaticLookup(admin), svc.Credentials(), identities), st}
	verifier := &auth.Verifier{Lookup: lookup, Region: cfg.Region}
	ops := ops.New(svc)
	ops.CheckAgentSettings = cfg.CheckAgentSettings
	h := api.NewHandler(verifier, ops.Authorizer(authorizer), cfg.Log)
	h.Scope = newScopes(st, maxScopes).scope
	ops.Register(h)
	serverID := addr + "/" + auth.NewAccessKeyID("")[:8]
	var prov provision.Provisioner
	if cfg.Provisioner == "local" {
		rt, err := docker.New(docker.Options{})
		if err != nil {
			st.Close()
			ln.Close()
			return nil, err
		}
		lp, err := local.New(cfg.AgentBinary, filepath.Join(cfg.DataDir, "instances"), rt, cfg.Log)
		if err != nil {
			st.Close()
			ln.Close()
			return nil, err
		}
		if tlsInfo != nil {
			lp.CABundle = tlsInfo.localBundle
		}
		prov = lp
	}
	if cfg.Provisioner == "sim" {
		if cfg.NewSimProvisioner == nil {
			st.Close()
			ln.Close()
			return nil, errors.New("--provisioner sim is not available in this program")
		}
		sp, err := cfg.NewSimProvisioner(filepath.Join(cfg.DataDir, "sim-instances"), cfg.SimProvisionDelay, cfg.Log)
		if err != nil {
			st.Close()
			ln.Close()
			return nil, err
		}
		prov = sp
	}
	if cfg.Provisioner == "ec2" {
		ep, err := newEC2Provisioner(ctx, cfg, svc)
		if err != nil {
			st.Close()
			ln.Close()
			return nil, err
		}
		prov = ep
	}
	gw := gateway.New(svc, st, api.Marking(verifier), serverID, cfg.Log)
	ops.RegisterTaskLogs(h, gw)
	trail := audit.New(audit.Config{Store: st, Region: cfg.Region, AccountID: cfg.AccountID, Retention: cfg.AuditRetention,
		Limit: cfg.AuditLimit, Log: cfg.Log})
	h.Audit = trail.Record
	ops.RegisterAudit(h, trail)
	execH := ops.RegisterExec(h, opsExecConfig(gw, trail, localURL(cfg.tlsEnabled(), addr)))

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	reg.MustRegister(h.Collectors()...)
	reg.MustRegister(gw.Collectors()...)
	reg.MustRegister(storeWrites{st}, storeWaits{st}, storeSpace{st})
	reg.MustRegister(trail.Collectors()...)
	counts := newReconciles()
	reg.MustRegister(counts)
	reg.MustRegister(lim)
	lead := &leading{}
	reg.MustRegister(lead)

	mux := http.NewServeMux()
	iamV, stsV := iamapi.NewVerifiers(lookup)
	ih := iamapi.New(iamapi.Config{Store: identities, Authorizer: authorizer, IAM: iamV, STS: stsV, Log: cfg.Log})
	ih.Audit = func(r api.Record) { // the ECS handler's hook, whenever it is set
		if h.Audit != nil {
			h.Audit(r)
		}
	}
	// IAM and STS speak the Query protocol on the same path as ECS's JSON.
	mux.Handle("/", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if ok, why := reachable(r.Context(), st); !ok {
			// Cut off from etcd, this server's reads would be stale and
			// its writes would wait 10 s to fail: refuse, marked untried,
			// so clients with several servers go to another.
			w.Header().Set(failover.StoreUnreachableHeader, "true")
			msg := "this server cannot reach its state store (" + why + "); nothing was read or written: send the request to another server"
			if iamapi.Accepts(r) {
				iamapi.WriteUnavailable(w, msg)
			} else {
				api.WriteUnavailable(w, msg)
			}
			return
		}
		if iamapi.Accepts(r) {
			ih.ServeHTTP(w, r)
			return
		}
		h.ServeHTTP(w, r)
	}))
	mux.Handle("GET "+protocol.Path, gw)
	mux.Handle("GET "+protocol.ExecPath+"{id}", execH)
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		if !st.Ready() {
			http.Error(w, "store not ready", http.StatusServiceUnavailable)
			return
		}
		if ok, why := st.Reachable(); !ok {
			// Load balancers and agents go to a server that reaches etcd.
			http.Error(w, why, http.StatusServiceUnavailable)
			return
		}
		if sp := st.Space(); sp.OutOfSpace {
			// Reads are served; writes are refused until space returns.
			http.Error(w, store.ErrNoSpace.Error()+": "+sp.Reason, http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	// The web console calls h as its signed-in users (internal/console).
	consoleCtx, stopConsole := context.WithCancel(context.Background())
	mux.Handle(console.Prefix, console.New(consoleCtx, console.Config{API: h, Lookup: lookup, Authorize: ops.Authorizer(authorizer),
		Store: st, Fleet: svc, Region: cfg.Region, Secure: cfg.tlsEnabled(), Log: cfg.Log}))

	s := &Server{
		reconciles:     counts,
		Addr:           addr,
		URL:            localURL(cfg.tlsEnabled(), addr),
		TLS:            tlsInfo,
		Service:        ops,
		Provisioner:    prov,
		Audit:          trail,
		gateway:        gw,
		Admin:          admin,
		AdminGenerated: generated,
		AdminFile:      adminFile,
		Store:          st,
		served:         make(chan error, 1),
		log:            cfg.Log,
		http: &http.Server{
			Handler:           lim.handler(mux),
			ConnContext:       lim.connContext,
			ConnState:         lim.connState,
			MaxHeaderBytes:    maxHeaderBytes,
			ReadHeaderTimeout: 10 * time.Second,
			ReadTimeout:       60 * time.Second,
			IdleTimeout:       120 * time.Second,
			// TLS handshake failures (a client without the CA) land here.
			ErrorLog: slog.NewLogLogger(cfg.Log.Handler(), slog.LevelWarn),
		},
	}
	s.http.RegisterOnShutdown(svc.Events().EndWaits) // long polls must not hold up a shutdown
	s.http.RegisterOnShutdown(trail.EndWaits)
	s.http.RegisterOnShutdown(stopConsole)
	go func() { s.served <- s.http.Serve(ln) }()

	// Controllers run on the elected leader only; every server serves the API.
	cctx, cancel := context.WithCancel(context.Background())
	s.stopControllers = cancel
	s.controllersDone = make(chan struct{})
	go func() {
		defer close(s.controllersDone)
		err := st.Lead(cctx, "controllers", serverID, func(ctx context.Context) {
			lead.run(ctx, cfg.Log, func(ctx context.Context) { runControllers(ctx, st, svc, prov, cfg, s.reconciles) })
		})
		if err != nil {
			cfg.Log.Error("leader election", "err", err)
		}
	}()
	return s, nil
}

func runControllers(ctx context.Context, st *store.Store, svc *fleet.State, prov provision.Provisioner, cfg Config, counts reconciles) {
	log := cfg.Log
	now := cfg.now()
	var alarmSource alarms.Source
	if src, err := alarms.New(cfg.AlarmSource, nil); err == nil && src != nil {
		alarmSource = src
	}
	dep := &deployments.Reconciler{Store: st, Fleet: svc.Rollout(), Alarms: alarmSource, ProgressDeadline: max(cfg.ProgressDeadline, 0),
		Now: now, Log: log, DaemonRemoved: svc.FinishDaemonTaskDefinitionDeletes, Emit: svc.Events().Record}
	svcs := &services.Reconciler{Store: st, Tasks: svc, Now: now, Log: log}
	dmn := &daemons.Reconciler{Store: st, Svc: svc, Now: now, Log: log, Impaired: svc.DaemonStartImpaired}
	loops := []*controller.Loop{
		{Name: "deployments", Store: st, Prefix: "daemondeployments/", Reconcile: dep.Reconcile, Workers: 4, Resync: time.Minute, Log: log},
		{Name: "services", Store: st, Prefix: "services/", Reconcile: svcs.Reconcile, Follow: svcs.Follows(), Workers: 4, Resync: time.Minute, Log: log},
		{Name: "daemons", Store: st, Prefix: daemons.Prefix, Reconcile: dmn.Reconcile, Follow: dmn.Follows(), First: daemons.Changing, Workers: 64, Resync: 30 * time.Second, Log: log},
	}
	// Without a provisioner it still places tasks that wait for room on
	// machines that joined.
	inst := &instances.Reconciler{Store: st, Svc: svc, Provisioner: prov, AgentEnv: cfg.AgentEnv, Now: now, Log: log}
	loops = append(loops, &controller.Loop{Name: "instances", Store: st, Prefix: instances.Prefix, Reconcile: inst.Reconcile,
		Follow: inst.Follows(), Workers: 2, Resync: 15 * time.Second, Log: log})
	var wg sync.WaitGroup
	wg.Go(func() { svc.RunExpiry(ctx, cfg.StoppedRetention, now, log) })
	for _, l := range loops {
		l.Counts = counts[l.Name]
		wg.Add(1)
		go func() {
			defer wg.Done()
			l.Run(ctx)
		}()
	}
	wg.Wait()
	inst.Wait() // launches and terminations still in flight
}

// Wait returns when the HTTP server stops on its own.
func (s *Server) Wait() <-chan error { return s.served }

// Close stops accepting requests, lets running ones finish, then closes
// the store.
func (s *Server) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	s.gateway.Close()
	err := s.http.Shutdown(ctx)
	s.stopControllers()
	<-s.controllersDone
	// Events recorded without waiting are written before the store goes.
	s.Service.Events().Settle(ctx)
	// The calls answered before the shutdown are recorded.
	if err := s.Audit.Close(ctx); err != nil {
		s.log.Warn("audit records not all written at shutdown", "err", err)
	}
	if c, ok := s.Provisioner.(io.Closer); ok {
		// In-process instances cannot outlive the server (sim).
		c.Close()
	}
	s.Store.Close()
	return err
}

type credentialFile struct {
	AccessKeyID     string `json:"accessKeyId"`
	SecretAccessKey string `json:"secretAccessKey"`
}

// adminCredential returns the configured administrator credential, or the
// one kept in the data dir (and its file), creating it on first start.
func adminCredential(cfg Config) (cred auth.Credential, file string, created bool, err error) {
	if cfg.AdminKeyID != "" {
		return auth.Credential{AccessKeyID: cfg.AdminKeyID, SecretAccessKey: cfg.AdminSecret, Role: auth.RoleAdmin}, "", false, nil
	}
	path := filepath.Join(cfg.DataDir, "admin-credentials.json")
	if b, err := os.ReadFile(path); err == nil {
		var f credentialFile
		if err := json.Unmarshal(b, &f); err != nil || f.AccessKeyID == "" || len(f.SecretAccessKey) < MinSecretLength {
			return auth.Credential{}, "", false, fmt.Errorf("%s is damaged (or its secret is shorter than %d characters); remove it to generate a new credential",
				path, MinSecretLength)
		}
		return auth.Credential{AccessKeyID: f.AccessKeyID, SecretAccessKey: f.SecretAccessKey, Role: auth.RoleAdmin}, path, false, nil
	} else if !errors.Is(err, os.ErrNotExist) {
		return auth.Credential{}, "", false, fmt.Errorf("read %s: %w", path, err)
	}
	f := credentialFile{AccessKeyID: auth.NewAccessKeyID("CSAK"), SecretAccessKey: auth.NewSecretAccessKey()}
	b, _ := json.MarshalIndent(f, "", "  ")
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return auth.Credential{}, "", false, fmt.Errorf("write %s: %w", tmp, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return auth.Credential{}, "", false, fmt.Errorf("write %s: %w", path, err)
	}
	return auth.Credential{AccessKeyID: f.AccessKeyID, SecretAccessKey: f.SecretAccessKey, Role: auth.RoleAdmin}, path, true, nil
}
