package taskdef

import (
	"path"
	"strings"

	"github.com/capstanhq/capstan/internal/api/shapes"
)

// The kinds of host access a standard task definition can ask for, as the
// capstan:HostAccessKinds condition key names them (docs/permissions.md).
const (
	HostPrivileged   = "privileged"       // a container runs privileged
	HostNetwork      = "networkMode:host" // the task shares the host's network namespace
	HostPID          = "pidMode:host"     // ... its PID namespace
	HostIPC          = "ipcMode:host"     // ... its IPC namespace
	HostCapabilities = "capabilities"     // linuxParameters.capabilities.add names any capability
	HostDevices      = "devices"          // linuxParameters.devices maps a host device
	HostVolume       = "hostVolume"       // a volume binds a host path
	HostDockerSocket = "dockerSocket"     // a host volume reaches the Docker socket
	HostSysctls      = "sysctls"          // a systemControls entry changes the host's kernel settings
)

// hostKindOrder is the order HostAccessKinds reports in, so that equal
// definitions give equal lists.
var hostKindOrder = []string{HostPrivileged, HostNetwork, HostPID, HostIPC, HostCapabilities,
	HostDevices, HostVolume, HostDockerSocket, HostSysctls}

// HostAccessKinds lists what of the host a standard task definition reaches
// into, in a fixed order; nil when it stays inside its own namespaces. The
// API authorizes these (capstan:HostAccessKinds) and the agent honours only
// what was granted, so both read the definition through this one function.
// Daemon task definitions are not subject to it.
func HostAccessKinds(td shapes.TaskDefinition) []string {
	found := map[string]bool{}
	found[HostNetwork] = td.NetworkMode == "host"
	found[HostPID] = td.PidMode == "host"
	found[HostIPC] = td.IpcMode == "host"
	for _, v := range td.Volumes {
		p := volumeHostPath(v)
		if p == "" {
			continue
		}
		found[HostVolume] = true
		if reachesDockerSocket(p) {
			found[HostDockerSocket] = true
		}
	}
	for i := range td.ContainerDefinitions {
		c := &td.ContainerDefinitions[i]
		if c.Privileged != nil && *c.Privileged {
			found[HostPrivileged] = true
		}
		if lp := c.LinuxParameters; lp != nil {
			if lp.Capabilities != nil && len(lp.Capabilities.Add) > 0 {
				found[HostCapabilities] = true
			}
			if len(lp.Devices) > 0 {
				found[HostDevices] = true
			}
		}
		for _, sc := range c.SystemControls {
			if sysctlTouchesHost(td, sc.Namespace) {
				found[HostSysctls] = true
			}
		}
	}
	var out []string
	for _, k := range hostKindOrder {
		if found[k] {
			out = append(out, k)
		}
	}
	return out
}

// volumeHostPath is the host path a volume binds, "" for one the agent
// provides. A local Docker volume whose options ask for a bind of a device
// path is a host path too: the agent does not pass driver options to Docker
// today, but a definition that asks for one asks for host access.
func volumeHostPath(v shapes.Volume) string {
	if v.Host != nil && v.Host.SourcePath != "" {
		return v.Host.SourcePath
	}
	if d := v.DockerVolumeConfiguration; d != nil {
		if dev := d.DriverOpts["device"]; strings.HasPrefix(dev, "/") && strings.Contains(d.DriverOpts["o"], "bind") {
			return dev
		}
	}
	return ""
}

// dockerSockets are where Docker Engine listens by default (/var/run is
// usually a link to /run).
var dockerSockets = []string{"/var/run/docker.sock", "/run/docker.sock"}

// reachesDockerSocket reports whether a bind of host path p exposes the
// Docker socket: the socket itself, a directory above it, a rootless
// Docker's runtime directory, or /proc (every host process's root is under
// it). Paths are compared as written: a symbolic link on the host is not
// followed, which is why a host volume is host access of its own.
func reachesDockerSocket(p string) bool {
	p = path.Clean(p)
	if path.Base(p) == "docker.sock" || p == "/proc" || strings.HasPrefix(p, "/proc/") {
		return true
	}
	for _, sock := range dockerSockets {
		if p == "/" || strings.HasPrefix(sock, p+"/") {
			return true
		}
	}
	if p == "/run/user" {
		return true
	}
	ok, _ := path.Match("/run/user/*", p)
	return ok
}

// sysctlTouchesHost reports whether setting a sysctl changes the host
// rather than the task's own namespaces: any sysctl when the task shares
// the host's network or IPC namespace, and any outside the per-namespace
// net.* and fs.mqueue.* families (kernel.*, vm.*, fs.*...). The kernel IPC
// settings have a copy per IPC namespace, but they are counted as well:
// the line is drawn by prefix, conservatively.
func sysctlTouchesHost(td shapes.TaskDefinition, name string) bool {
	if td.NetworkMode == "host" || td.IpcMode == "host" {
		return true
	}
	return !strings.HasPrefix(name, "net.") && !strings.HasPrefix(name, "fs.mqueue.")
}
