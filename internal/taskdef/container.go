package taskdef

import (
	"slices"
	"strings"

	"github.com/capstanhq/capstan/internal/api/shapes"
	"github.com/capstanhq/capstan/internal/fault"
)

// container is what standard and daemon container definitions have in common.
// Both request types are turned into it so every shared rule exists once.
// Pointer members alias the request, so defaults filled here land in it.
type container struct {
	path      string // e.g. "containerDefinitions[1]"
	name      string
	image     string
	essential bool

	cpu, memory, memoryReservation *int32
	startTimeout, stopTimeout      *int32

	dependsOn      []shapes.ContainerDependency
	healthCheck    *shapes.HealthCheck
	restartPolicy  *shapes.ContainerRestartPolicy
	ulimits        []shapes.Ulimit
	capabilities   *shapes.KernelCapabilities
	devices        []shapes.Device
	tmpfs          []shapes.Tmpfs
	mountPoints    []shapes.MountPoint
	environment    []shapes.KeyValuePair
	systemControls []shapes.SystemControl
	logging        *shapes.LogConfiguration

	// Members that need AWS services to work.
	secrets               []shapes.Secret
	environmentFiles      []shapes.EnvironmentFile
	repositoryCredentials *shapes.RepositoryCredentials
	firelens              *shapes.FirelensConfiguration

	// Start-order edges other than dependsOn (links, volumesFrom).
	implicit []link
}

// link is an ordering edge to the container named to, declared at field.
type link struct{ field, to string }

// scope is the task-level context the container rules need.
type scope struct {
	cpu, memory int // 0 when the task sets no size
	volumes     map[string]bool
	hostNetwork bool // net.* sysctls would change the host
	hostIPC     bool // IPC sysctls would change the host
}

// checkContainers applies the shared rules to the containers of one task
// definition, held in the request member field.
func checkContainers(field string, cs []container, s scope) error {
	if len(cs) == 0 {
		return fault.Invalid(field, "must have at least one container")
	}
	if len(cs) > maxContainers {
		return fault.Invalid(field, "must have at most %d containers (got %d)", maxContainers, len(cs))
	}
	names := make(map[string]int, len(cs))
	essential := false
	for i, c := range cs {
		if c.name == "" {
			return required(c.path + ".name")
		}
		if err := checkName(c.path+".name", c.name); err != nil {
			return err
		}
		if j, dup := names[c.name]; dup {
			return fault.Invalid(c.path+".name", "repeats the name of %s (%q)", cs[j].path, c.name)
		}
		names[c.name] = i
		essential = essential || c.essential
	}
	if !essential {
		return fault.Invalid(field, "at least one container must be essential")
	}
	for i := range cs {
		if err := checkContainer(&cs[i], s); err != nil {
			return err
		}
	}
	if err := checkTotals(cs, s); err != nil {
		return err
	}
	return checkOrder(cs, names)
}

func checkContainer(c *container, s scope) error {
	if c.image == "" {
		return required(c.path + ".image")
	}
	if err := checkAWSOnly(c); err != nil {
		return err
	}
	if err := checkSize(c, s); err != nil {
		return err
	}
	if err := checkEnvironment(c.path+".environment", c.environment); err != nil {
		return err
	}
	if err := checkMounts(c.path+".mountPoints", c.mountPoints, s.volumes); err != nil {
		return err
	}
	if err := checkHealth(c.path+".healthCheck", c.healthCheck); err != nil {
		return err
	}
	if err := checkRestart(c.path+".restartPolicy", c.restartPolicy); err != nil {
		return err
	}
	if err := checkUlimits(c.path+".ulimits", c.ulimits); err != nil {
		return err
	}
	if err := checkLinux(c.path+".linuxParameters", c); err != nil {
		return err
	}
	if err := checkSysctls(c.path+".systemControls", c.systemControls, s); err != nil {
		return err
	}
	if err := between(c.path+".startTimeout", c.startTimeout, 0, maxTimeout); err != nil {
		return err
	}
	if err := between(c.path+".stopTimeout", c.stopTimeout, 0, maxTimeout); err != nil {
		return err
	}
	return checkLogging(c.path+".logConfiguration", c.logging)
}

// checkAWSOnly refuses members whose values live in AWS services.
func checkAWSOnly(c *container) error {
	switch {
	case len(c.secrets) > 0:
		return unsupported(c.path+".secrets", "secrets are read from AWS Secrets Manager or SSM Parameter Store, which Capstan cannot reach; pass values in environment")
	case len(c.environmentFiles) > 0:
		return unsupported(c.path+".environmentFiles", "environment files are read from Amazon S3, which Capstan cannot reach; pass values in environment")
	case c.repositoryCredentials != nil:
		return unsupported(c.path+".repositoryCredentials", "registry credentials are read from AWS Secrets Manager, which Capstan cannot reach; configure registry auth on the agent")
	case c.firelens != nil:
		return unsupported(c.path+".firelensConfiguration", "FireLens is not available; use the fluentd or gelf log driver")
	}
	return nil
}

func checkSize(c *container, s scope) error {
	if c.cpu != nil && (*c.cpu < 0 || *c.cpu > maxCPU) {
		return fault.Invalid(c.path+".cpu", "must be between 0 and %d CPU units (got %d)", maxCPU, *c.cpu)
	}
	if c.memory != nil && *c.memory < minMemory {
		return fault.Invalid(c.path+".memory", "must be at least %d MiB (got %d)", minMemory, *c.memory)
	}
	if c.memoryReservation != nil && *c.memoryReservation < minMemory {
		return fault.Invalid(c.path+".memoryReservation", "must be at least %d MiB (got %d)", minMemory, *c.memoryReservation)
	}
	if c.memory != nil && c.memoryReservation != nil && *c.memoryReservation > *c.memory {
		return fault.Invalid(c.path+".memoryReservation", "must not exceed memory (%d > %d MiB)", *c.memoryReservation, *c.memory)
	}
	// Without any size the scheduler could not account for the container.
	if s.memory == 0 && c.memory == nil && c.memoryReservation == nil {
		// ECS's code and words (scripts match them); the name says which container.
		return fault.ClientError("Invalid setting for container '%s'. At least one of 'memory' or 'memoryReservation' must be specified.", c.name)
	}
	if s.memory > 0 && c.memory != nil && int(*c.memory) > s.memory {
		return fault.Invalid(c.path+".memory", "must not exceed the task memory (%d > %d MiB)", *c.memory, s.memory)
	}
	return nil
}

// checkTotals keeps what the containers reserve within the task size.
func checkTotals(cs []container, s scope) error {
	cpu, mem := 0, 0
	for _, c := range cs {
		if c.cpu != nil {
			cpu += int(*c.cpu)
			if s.cpu > 0 && cpu > s.cpu {
				return fault.Invalid(c.path+".cpu", "containers reserve %d CPU units in total, more than the task cpu %d", cpu, s.cpu)
			}
		}
		field, r := c.path+".memoryReservation", c.memoryReservation
		if r == nil {
			field, r = c.path+".memory", c.memory
		}
		if r != nil {
			mem += int(*r)
			if s.memory > 0 && mem > s.memory {
				return fault.Invalid(field, "containers reserve %d MiB in total, more than the task memory %d MiB", mem, s.memory)
			}
		}
	}
	return nil
}

func checkEnvironment(field string, env []shapes.KeyValuePair) error {
	seen := make(map[string]int, len(env))
	for i, kv := range env {
		p := at(field, i) + ".name"
		if kv.Name == "" {
			return fault.Invalid(p, "must not be empty")
		}
		if j, dup := seen[kv.Name]; dup {
			return fault.Invalid(p, "repeats the name of %s (%q)", at(field, j), clip(kv.Name))
		}
		seen[kv.Name] = i
	}
	return nil
}

func checkMounts(field string, mounts []shapes.MountPoint, volumes map[string]bool) error {
	seen := make(map[string]int, len(mounts))
	for i, m := range mounts {
		p := at(field, i)
		if m.SourceVolume == "" {
			return required(p + ".sourceVolume")
		}
		if !volumes[m.SourceVolume] {
			return fault.Invalid(p+".sourceVolume", "names no volume of this task definition (%q)", clip(m.SourceVolume))
		}
		if err := absolute(p+".containerPath", m.ContainerPath); err != nil {
			return err
		}
		if j, dup := seen[m.ContainerPath]; dup {
			return fault.Invalid(p+".containerPath", "repeats the path of %s (%q)", at(field, j), clip(m.ContainerPath))
		}
		seen[m.ContainerPath] = i
	}
	return nil
}

// Health check defaults, as ECS fills them.
const (
	defaultInterval = 30
	defaultTimeout  = 5
	defaultRetries  = 3
)

func checkHealth(field string, h *shapes.HealthCheck) error {
	if h == nil {
		return nil
	}
	if len(h.Command) == 0 {
		return fault.Invalid(field+".command", "must start with CMD, CMD-SHELL or NONE")
	}
	switch h.Command[0] {
	case "CMD", "CMD-SHELL":
		if len(h.Command) < 2 || h.Command[1] == "" {
			return fault.Invalid(field+".command", "%s must be followed by the command to run", h.Command[0])
		}
	case "NONE":
	default:
		return fault.Invalid(field+".command[0]", "must be CMD, CMD-SHELL or NONE (got %q)", clip(h.Command[0]))
	}
	for _, r := range []struct {
		name   string
		v      *int32
		lo, hi int32
	}{
		{"interval", h.Interval, 5, 300},
		{"timeout", h.Timeout, 2, 60},
		{"retries", h.Retries, 1, 10},
		{"startPeriod", h.StartPeriod, 0, 300},
	} {
		if err := between(field+"."+r.name, r.v, r.lo, r.hi); err != nil {
			return err
		}
	}
	if h.Interval == nil {
		h.Interval = new(int32(defaultInterval))
	}
	if h.Timeout == nil {
		h.Timeout = new(int32(defaultTimeout))
	}
	if h.Retries == nil {
		h.Retries = new(int32(defaultRetries))
	}
	return nil
}

// hasHealthCheck reports whether c can ever report HEALTHY.
func (c *container) hasHealthCheck() bool {
	h := c.healthCheck
	return h != nil && len(h.Command) > 0 && h.Command[0] != "NONE"
}

const defaultRestartPeriod = 300 // seconds, as ECS fills it

func checkRestart(field string, r *shapes.ContainerRestartPolicy) error {
	if r == nil {
		return nil
	}
	if len(r.IgnoredExitCodes) > maxIgnoredExit {
		return fault.Invalid(field+".ignoredExitCodes", "must have at most %d codes (got %d)", maxIgnoredExit, len(r.IgnoredExitCodes))
	}
	if err := between(field+".restartAttemptPeriod", r.RestartAttemptPeriod, 60, 1800); err != nil {
		return err
	}
	if r.Enabled != nil && *r.Enabled && r.RestartAttemptPeriod == nil {
		r.RestartAttemptPeriod = new(int32(defaultRestartPeriod))
	}
	return nil
}

func checkUlimits(field string, us []shapes.Ulimit) error {
	seen := make(map[string]int, len(us))
	for i, u := range us {
		p := at(field, i)
		if j, dup := seen[u.Name]; dup {
			return fault.Invalid(p+".name", "repeats the limit of %s (%q)", at(field, j), u.Name)
		}
		seen[u.Name] = i
		if u.SoftLimit == nil || u.HardLimit == nil {
			continue // the model check reports these
		}
		// -1 means unlimited, as in Docker.
		soft, hard := *u.SoftLimit, *u.HardLimit
		if soft < -1 || hard < -1 {
			return fault.Invalid(p, "limits must be -1 (unlimited) or more")
		}
		if hard != -1 && soft == -1 {
			return fault.Invalid(p+".softLimit", "cannot be unlimited (-1) below a hardLimit of %d", hard)
		}
		if hard != -1 && soft > hard {
			return fault.Invalid(p+".softLimit", "must not exceed hardLimit (%d > %d)", soft, hard)
		}
	}
	return nil
}

// Linux capability names without the CAP_ prefix: the ECS list plus the ones
// newer kernels added, which monitoring and security daemons need.
var capabilities = []string{
	"ALL", "AUDIT_CONTROL", "AUDIT_READ", "AUDIT_WRITE", "BLOCK_SUSPEND", "BPF",
	"CHECKPOINT_RESTORE", "CHOWN", "DAC_OVERRIDE", "DAC_READ_SEARCH", "FOWNER",
	"FSETID", "IPC_LOCK", "IPC_OWNER", "KILL", "LEASE", "LINUX_IMMUTABLE",
	"MAC_ADMIN", "MAC_OVERRIDE", "MKNOD", "NET_ADMIN", "NET_BIND_SERVICE",
	"NET_BROADCAST", "NET_RAW", "PERFMON", "SETFCAP", "SETGID", "SETPCAP",
	"SETUID", "SYSLOG", "SYS_ADMIN", "SYS_BOOT", "SYS_CHROOT", "SYS_MODULE",
	"SYS_NICE", "SYS_PACCT", "SYS_PTRACE", "SYS_RAWIO", "SYS_RESOURCE",
	"SYS_TIME", "SYS_TTY_CONFIG", "WAKE_ALARM",
}

// checkLinux covers the linuxParameters members both definition kinds have.
func checkLinux(field string, c *container) error {
	if k := c.capabilities; k != nil {
		for _, l := range []struct {
			name  string
			names []string
		}{{"add", k.Add}, {"drop", k.Drop}} {
			for i, n := range l.names {
				if !slices.Contains(capabilities, n) {
					return fault.Invalid(at(field+".capabilities."+l.name, i), "%q is not a Linux capability name (use names such as NET_ADMIN, without CAP_)", clip(n))
				}
			}
		}
	}
	for i, d := range c.devices {
		p := at(field+".devices", i)
		if err := absolute(p+".hostPath", d.HostPath); err != nil {
			return err
		}
		if d.ContainerPath != "" {
			if err := absolute(p+".containerPath", d.ContainerPath); err != nil {
				return err
			}
		}
	}
	for i, t := range c.tmpfs {
		p := at(field+".tmpfs", i)
		if err := absolute(p+".containerPath", t.ContainerPath); err != nil {
			return err
		}
		if t.Size != nil && *t.Size <= 0 {
			return fault.Invalid(p+".size", "must be a positive number of MiB (got %d)", *t.Size)
		}
	}
	return nil
}

// Sysctls the kernel namespaces per container; anything else is host-wide.
var ipcSysctls = []string{
	"kernel.msgmax", "kernel.msgmnb", "kernel.msgmni", "kernel.sem",
	"kernel.shmall", "kernel.shmmax", "kernel.shmmni", "kernel.shm_rmid_forced",
}

func checkSysctls(field string, ctls []shapes.SystemControl, s scope) error {
	for i, sc := range ctls {
		p := at(field, i) + ".namespace"
		ipc := slices.Contains(ipcSysctls, sc.Namespace) || strings.HasPrefix(sc.Namespace, "fs.mqueue.")
		net := strings.HasPrefix(sc.Namespace, "net.")
		switch {
		case !ipc && !net:
			return fault.Invalid(p, "%q is not a namespaced sysctl; use net.*, fs.mqueue.* or a kernel IPC setting", clip(sc.Namespace))
		case net && s.hostNetwork:
			return fault.Invalid(p, "%q would change the host network stack; it cannot be set with networkMode host", clip(sc.Namespace))
		case ipc && s.hostIPC:
			return fault.Invalid(p, "%q would change the host IPC namespace; it cannot be set when sharing the host IPC namespace", clip(sc.Namespace))
		}
	}
	return nil
}

// Log drivers Docker runs without any AWS service behind them.
var logDrivers = []string{"json-file", "syslog", "journald", "gelf", "fluentd", "splunk"}

func checkLogging(field string, l *shapes.LogConfiguration) error {
	if l == nil {
		return nil
	}
	switch l.LogDriver {
	case "awslogs":
		return unsupported(field+".logDriver", "awslogs sends logs to Amazon CloudWatch Logs, which Capstan cannot reach; use json-file (or syslog, journald, gelf, fluentd, splunk)")
	case "awsfirelens":
		return unsupported(field+".logDriver", "awsfirelens needs the FireLens log router, which Capstan does not run; use json-file (or syslog, journald, gelf, fluentd, splunk)")
	}
	if !slices.Contains(logDrivers, l.LogDriver) {
		return fault.Invalid(field+".logDriver", "must be one of %s (got %q)", strings.Join(logDrivers, ", "), clip(l.LogDriver))
	}
	if len(l.SecretOptions) > 0 {
		return unsupported(field+".secretOptions", "secret options are read from AWS Secrets Manager or SSM Parameter Store, which Capstan cannot reach; put the value in options")
	}
	for k := range l.Options {
		if k == "" {
			return fault.Invalid(field+".options", "option names must not be empty")
		}
	}
	return nil
}
