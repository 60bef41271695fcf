package taskdef

import (
	"github.com/capstanhq/capstan/internal/api/shapes"
	"github.com/capstanhq/capstan/internal/fault"
)

// CheckDaemon validates a RegisterDaemonTaskDefinition request beyond the
// model and normalizes it in place like CheckTask. Daemons have no network
// mode or port mappings (they share one per-instance namespace), may run
// privileged, and mount host paths or the instance's json-file logs.
func CheckDaemon(req *shapes.RegisterDaemonTaskDefinitionRequest) error {
	if err := checkName("family", req.Family); err != nil {
		return err
	}
	cpu, memory, err := taskSize(&req.Cpu, &req.Memory)
	if err != nil {
		return err
	}
	volumes, err := checkDaemonVolumes("volumes", req.Volumes)
	if err != nil {
		return err
	}
	if err := CheckTags("tags", req.Tags); err != nil {
		return err
	}
	cs := make([]container, len(req.ContainerDefinitions))
	for i := range req.ContainerDefinitions {
		c := &req.ContainerDefinitions[i]
		if c.Essential == nil {
			c.Essential = new(true)
		}
		cs[i] = daemonContainer(at("containerDefinitions", i), c)
	}
	return checkContainers("containerDefinitions", cs, scope{
		cpu:     cpu,
		memory:  memory,
		volumes: volumes,
		hostIPC: req.IpcMode == "shared", // shared means the host's namespace
	})
}

func checkDaemonVolumes(field string, vs []shapes.DaemonVolume) (map[string]bool, error) {
	names := make(map[string]bool, len(vs))
	for i, v := range vs {
		p := at(field, i)
		if err := checkName(p+".name", v.Name); err != nil {
			return nil, err
		}
		if names[v.Name] {
			return nil, fault.Invalid(p+".name", "repeats the name of another volume (%q)", v.Name)
		}
		names[v.Name] = true
		switch {
		case v.Host != nil && v.LogDriverVolumeConfiguration != nil:
			return nil, fault.Invalid(p, "set host or logDriverVolumeConfiguration, not both")
		case v.Host != nil:
			// Daemons have no scratch volumes: a host volume is a bind mount.
			if v.Host.SourcePath == "" {
				return nil, required(p + ".host.sourcePath")
			}
			if err := absolute(p+".host.sourcePath", v.Host.SourcePath); err != nil {
				return nil, err
			}
		case v.LogDriverVolumeConfiguration != nil:
			if d := v.LogDriverVolumeConfiguration.Driver; d != "json-file" {
				return nil, fault.Invalid(p+".logDriverVolumeConfiguration.driver", "must be json-file, the only driver whose logs a daemon can read (got %q)", clip(d))
			}
		default:
			return nil, fault.Invalid(p, "set host or logDriverVolumeConfiguration")
		}
	}
	return names, nil
}

// daemonContainer views a daemon container definition for the shared rules.
func daemonContainer(path string, c *shapes.DaemonContainerDefinition) container {
	v := container{
		path:                  path,
		name:                  c.Name,
		image:                 c.Image,
		essential:             c.Essential == nil || *c.Essential,
		cpu:                   c.Cpu,
		memory:                c.Memory,
		memoryReservation:     c.MemoryReservation,
		startTimeout:          c.StartTimeout,
		stopTimeout:           c.StopTimeout,
		dependsOn:             c.DependsOn,
		healthCheck:           c.HealthCheck,
		restartPolicy:         c.RestartPolicy,
		ulimits:               c.Ulimits,
		mountPoints:           c.MountPoints,
		environment:           c.Environment,
		systemControls:        c.SystemControls,
		logging:               c.LogConfiguration,
		secrets:               c.Secrets,
		environmentFiles:      c.EnvironmentFiles,
		repositoryCredentials: c.RepositoryCredentials,
		firelens:              c.FirelensConfiguration,
	}
	if lp := c.LinuxParameters; lp != nil {
		v.capabilities, v.devices, v.tmpfs = lp.Capabilities, lp.Devices, lp.Tmpfs
	}
	return v
}
