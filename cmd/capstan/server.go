package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"github.com/capstanhq/capstan/internal/audit"
	"github.com/capstanhq/capstan/internal/cpus"
	"github.com/capstanhq/capstan/internal/fleet"
	"github.com/capstanhq/capstan/internal/memlimit"
	"github.com/capstanhq/capstan/internal/provision/agentenv"
	simprov "github.com/capstanhq/capstan/internal/provision/sim"
	"github.com/capstanhq/capstan/internal/server"
	"github.com/capstanhq/capstan/internal/store"
)

// defaultDir is ~/.capstan/<name>, or fallback where there is no home.
func defaultDir(name, fallback string) string {
	if home, err := os.UserHomeDir(); err == nil {
		return filepath.Join(home, ".capstan", name)
	}
	return fallback
}

// jsonLogger logs JSON to stderr at level (debug, info, warn or error).
func jsonLogger(level string) (*slog.Logger, slog.Level, error) {
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(level)); err != nil {
		return nil, 0, fmt.Errorf("--log-level: %w", err)
	}
	return slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: lvl})), lvl, nil
}

func runServer(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("capstan server", flag.ContinueOnError)
	cfg := server.Config{NewSimProvisioner: simprov.Factory, CheckAgentSettings: agentenv.Check}
	var endpoints, level string
	var perCore int
	memory := memlimit.Setting{Mode: memlimit.Auto}
	fs.StringVar(&cfg.Listen, "listen", "127.0.0.1:8080", "HOST:PORT of the ECS API")
	fs.StringVar(&cfg.DataDir, "data-dir", defaultDir("server", "capstan-data"), "directory for the embedded etcd and server files")
	fs.StringVar(&endpoints, "etcd-endpoints", "", "comma-separated URLs of an external etcd cluster (default: embedded etcd)")
	fs.IntVar(&cfg.EtcdMaxTxnOps, "etcd-max-txn-ops", store.DefaultMaxTxnOps, "operations the external etcd cluster takes in one transaction (its --max-txn-ops): larger ones place thousands of tasks in fewer commits")
	fs.StringVar(&cfg.EtcdPrefix, "etcd-prefix", "/capstan/", "key prefix in etcd")
	fs.StringVar(&cfg.EtcdCACert, "etcd-cacert", "", "PEM `file` of the CA that signed the external etcd's certificate (https:// endpoints; default: the system's roots)")
	fs.StringVar(&cfg.EtcdCert, "etcd-cert", "", "PEM `file` of the client certificate presented to the external etcd (with --etcd-key)")
	fs.StringVar(&cfg.EtcdKey, "etcd-key", "", "PEM `file` of the client certificate's key")
	fs.StringVar(&cfg.SecretsKeyFile, "secrets-key-file", "", "`file` of the key sealing the secrets kept in etcd, created on first start (default <data-dir>/secrets.key; servers sharing an etcd need the same)")
	fs.StringVar(&cfg.SecretsPreviousKeyFile, "secrets-previous-key-file", "", "`file` of the key the secrets in etcd are sealed with now, when --secrets-key-file names a new one: this start seals them all anew with the new key (docs/security.md)")
	fs.StringVar(&cfg.Region, "region", "us-east-1", "region in ARNs")
	fs.StringVar(&cfg.AccountID, "account-id", server.DefaultAccountID, "12-digit account ID in ARNs")
	fs.StringVar(&level, "log-level", "info", "debug, info, warn or error")
	fs.StringVar(&cfg.Provisioner, "provisioner", "local", "where managed instances come from: local (agent processes on this machine), sim (hollow agents in the server on simulated containers, for scale tests), ec2 (EC2 instances, docs/ec2.md) or none")
	fs.StringVar(&cfg.AlarmSource, "alarm-source", "", "Prometheus or Alertmanager `URL` daemon deployments read their alarms from (prometheus+http:// or alertmanager+http:// to say which)")
	fs.IntVar(&cfg.EventLimit, "event-limit", fleet.DefaultEventLimit, "keep at most this many events per cluster (the oldest go first; they also expire after --event-retention)")
	fs.DurationVar(&cfg.EventRetention, "event-retention", fleet.DefaultEventRetention, "keep events (DescribeServices, DescribeDaemonDeployments, capstan events) this long (at least 1m)")
	fs.DurationVar(&cfg.StoppedRetention, "stopped-task-retention", fleet.DefaultStoppedRetention, "keep stopped tasks and deregistered (INACTIVE) container instances describable for this long, then delete them (at least 1m)")
	fs.DurationVar(&cfg.AuditRetention, "audit-retention", audit.DefaultRetention, "keep audit records of API calls this long (at least 1m)")
	fs.IntVar(&cfg.AuditLimit, "audit-limit", audit.DefaultLimit, "keep at most this many audit records (the oldest go first, counted in capstan_audit_records_trimmed_total)")
	fs.DurationVar(&cfg.ProgressDeadline, "rollout-progress-deadline", server.DefaultProgressDeadline, "stop a daemon rollout that made no progress for this long (negative: never)")
	fs.StringVar(&cfg.EC2.Endpoint, "ec2-endpoint", "", "`URL` of the EC2 API (with --provisioner ec2; default: the region's; credentials and region come from the standard AWS configuration, docs/ec2.md)")
	fs.StringVar(&cfg.EC2.ImageID, "ec2-image-id", "", "AMI managed instances boot (with --provisioner ec2; systemd and Docker, docs/ec2.md)")
	fs.StringVar(&cfg.EC2.AgentURL, "ec2-agent-url", "", "`URL` of the capstan-agent .deb an instance installs at boot when its image lacks the agent (with --provisioner ec2)")
	fs.DurationVar(&cfg.SimProvisionDelay, "sim-provision-delay", 0, "how long a sim instance takes to boot (with --provisioner sim)")
	fs.StringVar(&cfg.AdvertiseURL, "advertise-url", "", "URL agents use to reach this server (default http:// or, with TLS, https:// and the listen address, loopback for 0.0.0.0)")
	fs.StringVar(&cfg.TLSCert, "tls-cert", "", "PEM `file` of the API's certificate and its chain: serve HTTPS only (with --tls-key)")
	fs.StringVar(&cfg.TLSKey, "tls-key", "", "PEM `file` of the certificate's private key")
	fs.BoolVar(&cfg.TLSSelfSigned, "tls-self-signed", false, "serve HTTPS only with a self-signed certificate generated into the data dir on first start and kept")
	fs.Func("tls-san", "more DNS names or IPs for the generated certificate (repeat or separate by commas; with --tls-self-signed)", func(v string) error {
		for _, n := range strings.Split(v, ",") {
			if n = strings.TrimSpace(n); n != "" {
				cfg.TLSSANs = append(cfg.TLSSANs, n)
			}
		}
		return nil
	})
	fs.IntVar(&cfg.MaxConnections, "max-connections", 0, "most connections open at once on the API listener; more are closed as accepted (default: the open-file limit less 1,024, at most 100,000; docs/security.md)")
	fs.IntVar(&cfg.MaxUnauthenticated, "max-unauthenticated-requests", server.DefaultMaxUnauthenticated, "most requests in flight before their signature is verified; more get ThrottlingException (docs/security.md)")
	fs.Func("agent-env", "`KEY=VALUE` ECS_* setting for every agent the server provisions (repeat; checked by the agent's parser; docs/agent.md)", func(v string) error {
		if cfg.AgentEnv == nil {
			cfg.AgentEnv = map[string]string{}
		}
		return addAgentEnv(cfg.AgentEnv, v)
	})
	fs.IntVar(&perCore, "procs-per-core", 0, "Go processors per core (1-8; 0: 2 on up to 4 cores, else 1; GOMAXPROCS in the environment wins): more keep the API's latency low while the cores are saturated, at a cost in throughput (docs/api.md)")
	fs.Func("memory-limit", "the process's soft memory limit: auto (160 MiB + 48 KiB per registered instance, never below the live heap and a quarter more), off (Go's default: the heap grows to twice what is live), or MiB (GOMEMLIMIT in the environment wins; docs/api.md)", func(v string) (err error) {
		memory, err = memlimit.Parse(v)
		return err
	})
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if err := checkAgentEnv(cfg.AgentEnv); err != nil {
		return err
	}
	if perCore < 0 || perCore > 8 {
		return fmt.Errorf("--procs-per-core must be from 1 to 8, or 0 to let the server choose (got %d)", perCore)
	}
	if endpoints != "" {
		cfg.EtcdEndpoints = strings.Split(endpoints, ",")
	}
	if cfg.EtcdMaxTxnOps < 1 {
		return fmt.Errorf("--etcd-max-txn-ops must be at least 1 (got %d)", cfg.EtcdMaxTxnOps)
	}
	// Unset, the server chooses from the open-file limit; a value given
	// must be a real cap.
	capSet := false
	fs.Visit(func(f *flag.Flag) { capSet = capSet || f.Name == "max-connections" })
	if capSet && cfg.MaxConnections < 1 {
		return fmt.Errorf("--max-connections must be at least 1 (got %d)", cfg.MaxConnections)
	}
	if cfg.MaxUnauthenticated < 1 {
		return fmt.Errorf("--max-unauthenticated-requests must be at least 1 (got %d)", cfg.MaxUnauthenticated)
	}
	log, _, err := jsonLogger(level)
	if err != nil {
		return err
	}
	cfg.Log = log
	cfg.AdminKeyID = os.Getenv("CAPSTAN_ACCESS_KEY_ID")
	cfg.AdminSecret = os.Getenv("CAPSTAN_SECRET_ACCESS_KEY")
	if cfg.ClockOffset, err = server.ClockOffsetFromEnv(); err != nil {
		return err
	}
	if cfg.ClockOffset != 0 {
		log.Warn("TEST ONLY: this server's clock is shifted; never run it so in production", "env", server.ClockOffsetEnv, "offset", cfg.ClockOffset.String())
	}

	chosen := perCore == 0
	procs, perCore := cpus.Apply(perCore)
	if chosen {
		log.Info("processors per core chosen", "cores", cpus.Cores(), "per_core", perCore, "gomaxprocs", procs,
			"why", "two per core on up to 4 cores keep the API's latency low when they are all busy (--procs-per-core)")
	}
	// A second server on the data dir would fight the first over its files.
	lock, err := server.LockDataDir(cfg.DataDir, "capstan server")
	if err != nil {
		return err
	}
	defer lock.Release()
	s, err := server.Start(ctx, cfg)
	if err != nil {
		return err
	}
	memlimit.Apply(ctx, memory, log, s.Service.RegisteredInstances)
	caFlag := ""
	if t := s.TLS; t != nil {
		cfg.Log.Info("serving TLS", "cert", t.CertFile, "sha256", t.Fingerprint, "generated", t.Generated, "names", t.Names)
		fmt.Fprintf(os.Stderr, "\nCapstan API on %s: certificate %s\n  SHA-256 fingerprint %s\n", s.URL, t.CertFile, t.Fingerprint)
		if t.CABundle != "" {
			caFlag = " --ca-bundle " + t.CABundle
			fmt.Fprintf(os.Stderr, "  CA bundle for clients and agents: %s\n  (capstan --ca-bundle, AWS_CA_BUNDLE, the agent's CAPSTAN_CA_BUNDLE)\n", t.CABundle)
		}
	}
	cfg.Log.Info("capstan server ready", "addr", s.Addr, "region", cfg.Region, "account", cfg.AccountID, "gomaxprocs", procs)
	// The secret is shown once, when it is made; later starts say where it is.
	switch {
	case s.AdminGenerated:
		fmt.Fprintf(os.Stderr, `
Capstan API on %[1]s (administrator credential created in %[2]s). To use the AWS CLI:

  export AWS_ACCESS_KEY_ID=%[3]s
  export AWS_SECRET_ACCESS_KEY=%[4]s
  export AWS_DEFAULT_REGION=%[5]s
  aws ecs list-clusters --endpoint-url %[1]s%[6]s

This secret is not shown again: it is kept in %[2]s.

`, s.URL, s.AdminFile, s.Admin.AccessKeyID, s.Admin.SecretAccessKey, cfg.Region, caFlag)
	case s.AdminFile != "":
		fmt.Fprintf(os.Stderr, "\nCapstan API on %s: administrator access key %s, its secret kept in %s.\n\n", s.URL, s.Admin.AccessKeyID, s.AdminFile)
	}
	select {
	case <-ctx.Done():
		cfg.Log.Info("shutting down")
		return s.Close()
	case err := <-s.Wait():
		s.Close()
		return err
	}
}
