package engine

import (
	"fmt"
	"path"
	"strconv"
	"strings"
	"time"

	"github.com/capstanhq/capstan/internal/api/shapes"
	"github.com/capstanhq/capstan/internal/protocol"
	"github.com/capstanhq/capstan/internal/runtime"
	"github.com/capstanhq/capstan/internal/taskdef"
)

// Labels on every container the engine creates. The runtime is the truth
// for what exists: after a restart the engine finds its containers by them.
const (
	LabelTaskArn       = "com.capstan.task-arn"
	LabelContainerName = "com.capstan.container-name"
	LabelCluster       = "com.capstan.cluster"
	LabelInstance      = "com.capstan.instance"
	LabelTaskFamily    = "com.capstan.task-family"
	LabelTaskRevision  = "com.capstan.task-revision"
)

// Environment variables injected into every container when the metadata
// endpoint is configured.
const (
	EnvMetadataURIv4 = "ECS_CONTAINER_METADATA_URI_V4"
	EnvMetadataURI   = "ECS_CONTAINER_METADATA_URI"
)

// taskID is the last part of a task ARN.
func taskID(arn string) string {
	if i := strings.LastIndexByte(arn, '/'); i >= 0 {
		return arn[i+1:]
	}
	return arn
}

// shortID keeps the end of the task ID, where Capstan's IDs carry their
// random characters, limited to what a container name may hold.
func shortID(arn string) string {
	id := sanitize(taskID(arn))
	if len(id) > 12 {
		id = id[len(id)-12:]
	}
	return id
}

func sanitize(s string) string {
	return strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-' || r == '.' {
			return r
		}
		return '-'
	}, s)
}

// containerName is capstan-<family>-<revision>-<container>-<short task id>.
// It is unique per task and container, so a second create of the same
// container fails instead of making a duplicate.
func containerName(def *shapes.TaskDefinition, arn, container string) string {
	rev := 0
	if def.Revision != nil {
		rev = int(*def.Revision)
	}
	return fmt.Sprintf("capstan-%s-%d-%s-%s", sanitize(def.Family), rev, sanitize(container), shortID(arn))
}

// dockerNetworkMode resolves the task's network mode, or explains why the
// instance cannot run it.
func dockerNetworkMode(mode, daemonMode string) (string, error) {
	switch mode {
	case "", "bridge":
		return "bridge", nil
	case "host", "none", "awsvpc":
		return mode, nil
	case "daemon":
		if daemonMode == "" {
			return "host", nil
		}
		return daemonMode, nil
	}
	return "", fmt.Errorf("networkMode %q is not supported on this instance; use bridge, host, none or awsvpc", mode)
}

// dockerNetwork is what the runtime is given for a resolved mode: bridge
// mode may run on a network of the instance's own instead of Docker's
// default bridge. Everything else keys on the mode, so bridge tasks keep
// their port mappings, hostnames and links there.
func dockerNetwork(mode, bridgeNetwork string) string {
	if mode == "bridge" && bridgeNetwork != "" {
		return bridgeNetwork
	}
	return mode
}

// checkTask refuses what this instance will not run, before anything is
// pulled or reserved.
func checkTask(t *protocol.Task, def *shapes.TaskDefinition, cfg *Config) (code, reason string) {
	if len(def.ContainerDefinitions) == 0 {
		return StopTaskFailedToStart, "the task definition has no containers"
	}
	if _, err := dockerNetworkMode(def.NetworkMode, cfg.DaemonNetworkMode); err != nil {
		return StopTaskFailedToStart, err.Error()
	}
	if def.NetworkMode == "awsvpc" && cfg.TaskNetwork == nil {
		return StopTaskFailedToStart, "networkMode awsvpc needs the instance's task network, which this instance does not have"
	}
	if cfg.DisablePrivileged && t.Kind != protocol.KindDaemon {
		for _, c := range def.ContainerDefinitions {
			if c.Privileged != nil && *c.Privileged {
				return StopTaskFailedToStart, ReasonPrivileged
			}
		}
	}
	for _, v := range def.Volumes {
		if hostPath(v) == "" && cfg.VolumeDir == "" {
			return StopTaskFailedToStart, fmt.Sprintf("volume %s needs a task-scoped directory, but this instance has no volume directory configured", v.Name)
		}
	}
	return "", ""
}

// hostPath is the host directory a bind volume names, "" for a volume the
// engine provides.
func hostPath(v shapes.Volume) string {
	if v.Host != nil {
		return v.Host.SourcePath
	}
	return ""
}

// volumePaths maps each task volume to its host directory: the host path
// of a bind volume, a per-task directory for scratch and task-scoped Docker
// volumes, a per-instance one for shared Docker volumes.
func volumePaths(def *shapes.TaskDefinition, arn, volumeDir string) map[string]string {
	out := map[string]string{}
	for _, v := range def.Volumes {
		switch {
		case hostPath(v) != "":
			out[v.Name] = hostPath(v)
		case v.DockerVolumeConfiguration != nil && v.DockerVolumeConfiguration.Scope == "shared":
			out[v.Name] = path.Join(volumeDir, "shared", sanitize(v.Name))
		default:
			out[v.Name] = path.Join(volumeDir, "tasks", sanitize(taskID(arn)), sanitize(v.Name))
		}
	}
	return out
}

// specInput is everything buildSpec needs besides the container definition.
type specInput struct {
	cfg         *Config
	task        *protocol.Task
	def         *shapes.TaskDefinition
	index       int
	networkMode string            // resolved Docker network mode
	volumes     map[string]string // task volume -> host path
	cpuShares   int64
	holderID    string // runtime ID of the namespace holder; "" when this is it or none
	linkHosts   []string
}

// buildSpec translates one container definition into what the runtime
// creates. It is pure: volumes and namespaces are resolved by the caller.
func buildSpec(in specInput) runtime.ContainerSpec {
	def, c := in.def, &in.def.ContainerDefinitions[in.index]
	arn := in.task.Arn
	rev := 0
	if def.Revision != nil {
		rev = int(*def.Revision)
	}
	labels := make(map[string]string, len(c.DockerLabels)+6)
	for k, v := range c.DockerLabels {
		labels[k] = v
	}
	// Ours last: a task cannot pose as another task's container.
	labels[LabelTaskArn] = arn
	labels[LabelContainerName] = c.Name
	labels[LabelCluster] = in.cfg.Cluster
	labels[LabelInstance] = in.cfg.ContainerInstanceArn
	labels[LabelTaskFamily] = def.Family
	labels[LabelTaskRevision] = strconv.Itoa(rev)

	s := runtime.ContainerSpec{
		Name:           containerName(def, arn, c.Name),
		Image:          c.Image,
		Labels:         labels,
		Entrypoint:     c.EntryPoint,
		Cmd:            c.Command,
		WorkingDir:     c.WorkingDirectory,
		User:           c.User,
		CPUShares:      in.cpuShares,
		NetworkMode:    dockerNetwork(in.networkMode, in.cfg.BridgeNetwork),
		DNS:            c.DnsServers,
		Privileged:     c.Privileged != nil && *c.Privileged,
		ReadonlyRootfs: c.ReadonlyRootFilesystem != nil && *c.ReadonlyRootFilesystem,
		StopTimeout:    stopTimeout(c, in.cfg.StopTimeout),
	}
	for _, kv := range c.Environment {
		s.Env = append(s.Env, kv.Name+"="+kv.Value)
	}
	if in.cfg.MetadataURI != nil {
		uri := in.cfg.MetadataURI(arn, c.Name)
		s.Env = append(s.Env, EnvMetadataURIv4+"="+uri, EnvMetadataURI+"="+uri)
	}

	// Memory: the container's own hard limit, else the task's, so one
	// container cannot take the host without a task cgroup around it.
	switch {
	case c.Memory != nil:
		s.MemoryLimit = int64(*c.Memory) << 20
	case def.Memory != "":
		if m, err := taskdef.ParseMemory(def.Memory); err == nil {
			s.MemoryLimit = int64(m) << 20
		}
	}
	if c.MemoryReservation != nil {
		s.MemoryReservation = int64(*c.MemoryReservation) << 20
	}

	// Hostnames and extra hosts cannot be set on a network namespace
	// borrowed from another container.
	joined := strings.HasPrefix(in.networkMode, "container:")
	if in.networkMode == "bridge" {
		for _, pm := range c.PortMappings {
			if pm.ContainerPort == nil {
				continue
			}
			b := runtime.PortBinding{ContainerPort: int(*pm.ContainerPort), Protocol: protocolOf(pm.Protocol)}
			if pm.HostPort != nil {
				b.HostPort = int(*pm.HostPort)
			}
			s.Ports = append(s.Ports, b)
		}
		s.Hostname = c.Hostname
	}
	if in.networkMode == "none" {
		s.Hostname = c.Hostname
	}
	if !joined {
		for _, h := range c.ExtraHosts {
			s.ExtraHosts = append(s.ExtraHosts, h.Hostname+":"+h.IpAddress)
		}
		s.ExtraHosts = append(s.ExtraHosts, in.linkHosts...)
		s.ExtraHosts = append(s.ExtraHosts, in.cfg.ExtraHosts...)
	}

	s.Mounts = mounts(def, c, in.volumes, map[string]bool{})

	if lp := c.LinuxParameters; lp != nil {
		if lp.Capabilities != nil {
			s.CapAdd, s.CapDrop = lp.Capabilities.Add, lp.Capabilities.Drop
		}
		for _, d := range lp.Devices {
			s.Devices = append(s.Devices, runtime.Device{HostPath: d.HostPath, ContainerPath: d.ContainerPath, Permissions: devicePermissions(d.Permissions)})
		}
		s.Init = lp.InitProcessEnabled != nil && *lp.InitProcessEnabled
		for _, t := range lp.Tmpfs {
			tm := runtime.Tmpfs{Target: t.ContainerPath, Options: t.MountOptions}
			if t.Size != nil {
				tm.SizeBytes = int64(*t.Size) << 20
			}
			s.Tmpfs = append(s.Tmpfs, tm)
		}
		if lp.SharedMemorySize != nil {
			s.ShmSizeBytes = int64(*lp.SharedMemorySize) << 20
		}
	}
	for _, u := range c.Ulimits {
		ul := runtime.Ulimit{Name: u.Name}
		if u.SoftLimit != nil {
			ul.Soft = int64(*u.SoftLimit)
		}
		if u.HardLimit != nil {
			ul.Hard = int64(*u.HardLimit)
		}
		s.Ulimits = append(s.Ulimits, ul)
	}
	for _, sc := range c.SystemControls {
		if s.Sysctls == nil {
			s.Sysctls = map[string]string{}
		}
		s.Sysctls[sc.Namespace] = sc.Value
	}
	s.LogDriver, s.LogOptions = logConfig(c.LogConfiguration)
	if h := c.HealthCheck; h != nil && len(h.Command) > 0 {
		s.Healthcheck = &runtime.Healthcheck{
			Test:        h.Command,
			Interval:    secondsOf(h.Interval),
			Timeout:     secondsOf(h.Timeout),
			StartPeriod: secondsOf(h.StartPeriod),
		}
		if h.Retries != nil {
			s.Healthcheck.Retries = int(*h.Retries)
		}
	}

	s.PidMode = namespaceMode(def.PidMode, in.holderID, "")
	s.IpcMode = namespaceMode(def.IpcMode, in.holderID, "shareable")
	return s
}

// namespaceMode maps a task pidMode/ipcMode to Docker's: "task" makes the
// holder own the namespace (holderMode) and the others join it.
func namespaceMode(mode, holderID, holderMode string) string {
	switch mode {
	case "host", "none":
		return mode
	case "shared": // daemon task definitions: the host's namespace
		return "host"
	case "task":
		if holderID == "" {
			return holderMode
		}
		return "container:" + holderID
	}
	return ""
}

// mounts resolves mountPoints and, recursively, volumesFrom: the runtime has
// no volumesFrom, but every task volume is a host directory, so a container
// gets the source container's mounts directly.
func mounts(def *shapes.TaskDefinition, c *shapes.ContainerDefinition, volumes map[string]string, seen map[string]bool) []runtime.Mount {
	if seen[c.Name] {
		return nil
	}
	seen[c.Name] = true
	var out []runtime.Mount
	targets := map[string]bool{}
	for _, mp := range c.MountPoints {
		src, ok := volumes[mp.SourceVolume]
		if !ok || targets[mp.ContainerPath] {
			continue
		}
		targets[mp.ContainerPath] = true
		out = append(out, runtime.Mount{Source: src, Target: mp.ContainerPath, ReadOnly: mp.ReadOnly != nil && *mp.ReadOnly})
	}
	for _, vf := range c.VolumesFrom {
		for i := range def.ContainerDefinitions {
			src := &def.ContainerDefinitions[i]
			if src.Name != vf.SourceContainer {
				continue
			}
			for _, m := range mounts(def, src, volumes, seen) {
				if targets[m.Target] {
					continue
				}
				targets[m.Target] = true
				if vf.ReadOnly != nil && *vf.ReadOnly {
					m.ReadOnly = true
				}
				out = append(out, m)
			}
		}
	}
	return out
}

func devicePermissions(ps []string) string {
	var b strings.Builder
	for _, p := range ps {
		switch strings.ToLower(p) {
		case "read":
			b.WriteByte('r')
		case "write":
			b.WriteByte('w')
		case "mknod":
			b.WriteByte('m')
		}
	}
	return b.String() // empty: the runtime's default, rwm
}

func protocolOf(p string) string {
	if p == "" {
		return "tcp"
	}
	return strings.ToLower(p)
}

func secondsOf(v *int32) time.Duration {
	if v == nil {
		return 0
	}
	return time.Duration(*v) * time.Second
}

// stopTimeout is the container's stopTimeout, else the engine default.
func stopTimeout(c *shapes.ContainerDefinition, def time.Duration) time.Duration {
	if c.StopTimeout != nil && *c.StopTimeout > 0 {
		return time.Duration(*c.StopTimeout) * time.Second
	}
	return def
}

// startTimeout is how long dependents wait on c for COMPLETE, SUCCESS or
// HEALTHY.
func startTimeout(c *shapes.ContainerDefinition, def time.Duration) time.Duration {
	if c.StartTimeout != nil && *c.StartTimeout > 0 {
		return time.Duration(*c.StartTimeout) * time.Second
	}
	return def
}
