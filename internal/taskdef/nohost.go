package taskdef

import "github.com/capstanhq/capstan/internal/api/shapes"

// WithoutHostAccess returns td with everything that reaches into the host
// taken out, and names what it took: the agent runs an application task
// this way when the server did not grant it host access, so a definition
// that bypassed the API's check still gets no host mount. td is not
// changed.
//
// Host volumes become task-scoped scratch volumes, host network mode
// becomes bridge, host PID and IPC namespaces become the task's own.
func WithoutHostAccess(td shapes.TaskDefinition) (shapes.TaskDefinition, []string) {
	var removed []string
	note := func(kind string) {
		for _, k := range removed {
			if k == kind {
				return
			}
		}
		removed = append(removed, kind)
	}
	if td.NetworkMode == "host" {
		td.NetworkMode = "bridge"
		note("networkMode:host")
	}
	if td.PidMode == "host" {
		td.PidMode = ""
		note("pidMode:host")
	}
	if td.IpcMode == "host" {
		td.IpcMode = ""
		note("ipcMode:host")
	}
	if len(td.Volumes) > 0 {
		vs := make([]shapes.Volume, len(td.Volumes))
		copy(vs, td.Volumes)
		for i := range vs {
			if vs[i].Host != nil && vs[i].Host.SourcePath != "" {
				vs[i].Host = nil
				note("hostVolume")
			}
		}
		td.Volumes = vs
	}
	cs := make([]shapes.ContainerDefinition, len(td.ContainerDefinitions))
	copy(cs, td.ContainerDefinitions)
	for i := range cs {
		c := &cs[i]
		if c.Privileged != nil && *c.Privileged {
			c.Privileged = nil
			note("privileged")
		}
		if len(c.SystemControls) > 0 {
			// Judged against the modes as they now are: a namespaced sysctl
			// of a task that no longer shares the host's network stays.
			var keep []shapes.SystemControl
			for _, sc := range c.SystemControls {
				if sysctlTouchesHost(td, sc.Namespace) {
					note("sysctls")
					continue
				}
				keep = append(keep, sc)
			}
			c.SystemControls = keep
		}
		if lp := c.LinuxParameters; lp != nil && (lp.Capabilities != nil && len(lp.Capabilities.Add) > 0 || len(lp.Devices) > 0) {
			p := *lp
			if p.Capabilities != nil && len(p.Capabilities.Add) > 0 {
				caps := *p.Capabilities
				caps.Add = nil
				p.Capabilities = &caps
				note("capabilities")
			}
			if len(p.Devices) > 0 {
				p.Devices = nil
				note("devices")
			}
			c.LinuxParameters = &p
		}
	}
	td.ContainerDefinitions = cs
	return td, removed
}
