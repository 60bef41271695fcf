// Package config is the agent's configuration: flags, environment variables
// and an env file, read once at start into a typed, validated Config.
//
// Variables keep the Amazon ECS agent's names and defaults where the meaning
// is the same, so an ECS operator's agent.env works unchanged. Precedence is
// flag > environment > env file > default. Every bad value is reported at
// start, all at once, naming the variable, where it came from and the rule
// it broke; a value out of bounds is an error, never silently clamped.
//
// The env file (--config FILE, else /etc/capstan/agent.env when present)
// holds KEY=VALUE lines; blank lines and lines starting with # are skipped,
// "export " may prefix a line, and a value may be wrapped in single quotes
// (taken literally) or double quotes (\" and \\ escaped). There are no
// inline comments: JSON values may contain #. Unknown keys are listed in
// Config.Ignored for the agent to warn about.
//
//	flag / variable                        default                     rule
//	--endpoint, CAPSTAN_ENDPOINT           (required)                  http:// or https:// URL, or several comma-separated
//	CAPSTAN_CA_BUNDLE, else AWS_CA_BUNDLE  the system's roots          PEM file the server's certificate must chain to
//	--cluster, ECS_CLUSTER                 default                     cluster name or ARN
//	--data-dir, ECS_DATADIR                /var/lib/capstan/agent      made absolute
//	AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY (required)                the agent's credential
//	AWS_REGION, else AWS_DEFAULT_REGION    us-east-1                   region name
//	ECS_LOGLEVEL                           info                        crit|error|warn|info|debug
//	CAPSTAN_INSTANCE_CPU                   from the runtime            CPU units, 1024 per vCPU
//	CAPSTAN_INSTANCE_MEMORY                from the runtime            MiB
//	ECS_RESERVED_MEMORY                    0                           MiB, below the instance memory
//	ECS_RESERVED_PORTS                     [22,2375,2376,51678,51679]  JSON list of 1-65535
//	ECS_RESERVED_PORTS_UDP                 []                          JSON list of 1-65535
//	ECS_DISABLE_PRIVILEGED                 false                       bool
//	ECS_CONTAINER_STOP_TIMEOUT             30s                         at least 1s
//	ECS_CONTAINER_START_TIMEOUT            3m                          at least 45s
//	ECS_ENGINE_TASK_CLEANUP_WAIT_DURATION  3h                          at least 1m
//	ECS_IMAGE_PULL_BEHAVIOR                default                     default|always|once|prefer-cached
//	ECS_IMAGE_CLEANUP_INTERVAL             30m                         at least 10m
//	ECS_IMAGE_MINIMUM_CLEANUP_AGE          1h                          at least 0s
//	ECS_NUM_IMAGES_DELETE_PER_CYCLE        5                           at least 1
//	ECS_DISABLE_IMAGE_CLEANUP              false                       bool
//	ECS_ENGINE_AUTH_TYPE, _DATA            none                        docker|dockercfg, JSON by registry
//	ECS_INSTANCE_ATTRIBUTES                {}                          JSON object, ECS attribute rules
//	ECS_TASK_METADATA_RPS_LIMIT            40,60                       STEADY,BURST per container
//	CAPSTAN_METRICS_ADDR                   127.0.0.1:0                 IP:PORT of /metrics
//	CAPSTAN_METADATA_ADDR                  docker0 IP:51679, else 0.0.0.0:51679
//	CAPSTAN_DAEMON_SUBNET                  first free 169.254.N.0/24   IPv4 network, /8 to /30
//	CAPSTAN_DAEMON_ADDRESS                 2nd address of the subnet   in the subnet; not its first or last
//	CAPSTAN_PAUSE_BINARY                   this executable             static capstan build, made absolute
//	--runtime, CAPSTAN_RUNTIME             docker                      docker|sim (simulated containers)
//
// Durations use Go syntax ("90s", "1h30m"). Instance attribute names follow
// ECS (1-128 letters, digits, - _ . / \) and may not start with "ecs.",
// which the agent uses for the attributes it sets itself.
//
// The task metadata endpoint must be reachable from bridge-mode containers,
// which see the host through the docker0 gateway; so by default it listens
// on that address (ECS instead listens on loopback and redirects
// 169.254.170.2:80 there with iptables, which Capstan does not touch).
// MetadataURIAddr gives the address a container puts in its URI: the
// listen address when it is a specific IP (host-network containers reach
// the docker0 address too), or, when listening on all addresses, the
// docker0 gateway for bridge containers and 127.0.0.1 for host-network ones.
//
// The daemon subnet holds the instance's network: the host takes its first
// address, the shared daemon namespace the daemon address. Unset, the agent
// takes 169.254.172.0/24 (daemons at 169.254.172.2, as on ECS) or, when
// another instance on the same Docker host has it, the next free /24 up
// to 169.254.254.0/24. Set it to pin one; it must not overlap any Docker
// network. An address alone is taken inside 169.254.172.0/24.
// Secrets (the secret key, registry passwords) print as [redacted] through
// fmt, slog and JSON; Reveal returns them.
package config
