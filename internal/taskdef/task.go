package taskdef

import (
	"strings"

	"github.com/capstanhq/capstan/internal/api/shapes"
	"github.com/capstanhq/capstan/internal/fault"
)

// CheckTask validates a RegisterTaskDefinition request beyond the model and
// normalizes it in place: cpu and memory become integer strings, networkMode,
// essential, port protocols, host-mode host ports, Docker volume scope and
// driver, health check and restart defaults are filled in. A request that
// fails may be left partly normalized; callers discard it.
func CheckTask(req *shapes.RegisterTaskDefinitionRequest) error {
	if err := checkName("family", req.Family); err != nil {
		return err
	}
	if err := checkPlatform(req); err != nil {
		return err
	}
	cpu, memory, err := taskSize(&req.Cpu, &req.Memory)
	if err != nil {
		return err
	}
	if RequiresFargate(req.RequiresCompatibilities) {
		if err := checkFargate(req, cpu, memory); err != nil {
			return err
		}
	}
	volumes, err := checkTaskVolumes("volumes", req.Volumes)
	if err != nil {
		return err
	}
	if err := checkPlacement("placementConstraints", req.PlacementConstraints); err != nil {
		return err
	}
	if err := CheckTags("tags", req.Tags); err != nil {
		return err
	}
	cs := make([]container, len(req.ContainerDefinitions))
	for i := range req.ContainerDefinitions {
		path := at("containerDefinitions", i)
		c := &req.ContainerDefinitions[i]
		if err := checkTaskContainer(path, c, req.NetworkMode); err != nil {
			return err
		}
		if c.Essential == nil {
			c.Essential = new(true)
		}
		cs[i] = taskContainer(path, c)
	}
	if err := checkHostPorts(req.ContainerDefinitions); err != nil {
		return err
	}
	return checkContainers("containerDefinitions", cs, scope{
		cpu:         cpu,
		memory:      memory,
		volumes:     volumes,
		hostNetwork: req.NetworkMode == "host",
		hostIPC:     req.IpcMode == "host",
	})
}

// checkPlatform refuses task-level settings that need Fargate, VPC
// networking, Windows or other AWS services, and defaults networkMode.
func checkPlatform(req *shapes.RegisterTaskDefinitionRequest) error {
	switch req.NetworkMode {
	case "":
		req.NetworkMode = "bridge"
	}
	// awsvpc: each task gets a namespace and an address of its own on the
	// instance's task network (no ENI); FARGATE definitions run that way
	// on managed instances.
	if p := req.RuntimePlatform; p != nil && p.OperatingSystemFamily != "" && p.OperatingSystemFamily != "LINUX" {
		return unsupported("runtimePlatform.operatingSystemFamily", "Capstan runs Linux containers only (got %s)", p.OperatingSystemFamily)
	}
	switch {
	case len(req.InferenceAccelerators) > 0:
		return unsupported("inferenceAccelerators", "Amazon Elastic Inference accelerators are not available")
	case req.ProxyConfiguration != nil:
		return unsupported("proxyConfiguration", "App Mesh proxy configuration is not available")
	case req.EphemeralStorage != nil && !RequiresFargate(req.RequiresCompatibilities):
		return unsupported("ephemeralStorage", "ephemeral storage sizing applies to AWS Fargate only")
	case req.EnableFaultInjection != nil && *req.EnableFaultInjection:
		return unsupported("enableFaultInjection", "the fault injection endpoints are not available")
	case req.TrustedExecutionConfiguration != nil:
		return unsupported("trustedExecutionConfiguration", "trusted execution environments are not available")
	}
	return nil
}

func checkTaskVolumes(field string, vs []shapes.Volume) (map[string]bool, error) {
	names := make(map[string]bool, len(vs))
	for i := range vs {
		v, p := &vs[i], at(field, i)
		if err := checkName(p+".name", v.Name); err != nil {
			return nil, err
		}
		if names[v.Name] {
			return nil, fault.Invalid(p+".name", "repeats the name of another volume (%q)", v.Name)
		}
		names[v.Name] = true
		switch {
		case v.EfsVolumeConfiguration != nil:
			return nil, unsupported(p+".efsVolumeConfiguration", "Amazon EFS volumes are not available; use a host or Docker volume")
		case v.FsxWindowsFileServerVolumeConfiguration != nil:
			return nil, unsupported(p+".fsxWindowsFileServerVolumeConfiguration", "Amazon FSx volumes are not available; use a host or Docker volume")
		case v.S3filesVolumeConfiguration != nil:
			return nil, unsupported(p+".s3filesVolumeConfiguration", "Amazon S3 volumes are not available; use a host or Docker volume")
		case v.ConfiguredAtLaunch != nil && *v.ConfiguredAtLaunch:
			return nil, unsupported(p+".configuredAtLaunch", "volumes configured at launch are Amazon EBS volumes, which are not available")
		case v.Host != nil && v.DockerVolumeConfiguration != nil:
			return nil, fault.Invalid(p, "set host or dockerVolumeConfiguration, not both")
		}
		// A volume with neither is a scratch volume Docker creates for the task.
		if v.Host != nil && v.Host.SourcePath != "" {
			if err := absolute(p+".host.sourcePath", v.Host.SourcePath); err != nil {
				return nil, err
			}
		}
		if d := v.DockerVolumeConfiguration; d != nil {
			dp := p + ".dockerVolumeConfiguration"
			if d.Driver == "" {
				d.Driver = "local"
			}
			if d.Driver != "local" {
				return nil, unsupported(dp+".driver", "only the local driver is available (got %q); Capstan installs no volume plugins", clip(d.Driver))
			}
			if d.Scope == "" {
				d.Scope = "task"
			}
			if d.Scope == "task" && d.Autoprovision != nil && *d.Autoprovision {
				return nil, fault.Invalid(dp+".autoprovision", "applies to shared volumes only; task volumes are always created")
			}
		}
	}
	return names, nil
}

func checkPlacement(field string, pcs []shapes.TaskDefinitionPlacementConstraint) error {
	if len(pcs) > maxPlacements {
		return fault.Invalid(field, "must have at most %d constraints (got %d)", maxPlacements, len(pcs))
	}
	for i, pc := range pcs {
		p := at(field, i)
		if pc.Type == "" {
			return required(p + ".type")
		}
		if strings.TrimSpace(pc.Expression) == "" {
			return fault.Invalid(p+".expression", "memberOf needs a cluster query expression")
		}
	}
	return nil
}

// checkTaskContainer applies the rules for members only standard container
// definitions have.
func checkTaskContainer(path string, c *shapes.ContainerDefinition, mode string) error {
	switch {
	case len(c.ResourceRequirements) > 0:
		return unsupported(path+".resourceRequirements", "GPU and inference accelerator reservations are not available")
	case len(c.CredentialSpecs) > 0:
		return unsupported(path+".credentialSpecs", "credential specs serve Windows Active Directory, and Capstan runs Linux containers only")
	}
	if err := checkPorts(path+".portMappings", c.PortMappings, mode); err != nil {
		return err
	}
	for i, l := range c.Links {
		p := at(path+".links", i)
		if mode != "bridge" {
			return fault.Invalid(p, "links need networkMode bridge (got %s)", mode)
		}
		name, alias, _ := strings.Cut(l, ":")
		if !namePattern.MatchString(name) || (alias != "" && !namePattern.MatchString(alias)) {
			return fault.Invalid(p, "must be name or name:alias, each 1-255 letters, digits, hyphens or underscores (got %q)", clip(l))
		}
	}
	for i, v := range c.VolumesFrom {
		if v.SourceContainer == "" {
			return required(at(path+".volumesFrom", i) + ".sourceContainer")
		}
	}
	for k := range c.DockerLabels {
		if k == "" {
			return fault.Invalid(path+".dockerLabels", "label keys must not be empty")
		}
	}
	if lp := c.LinuxParameters; lp != nil {
		p := path + ".linuxParameters"
		if lp.SharedMemorySize != nil && *lp.SharedMemorySize < 0 {
			return fault.Invalid(p+".sharedMemorySize", "must not be negative (got %d)", *lp.SharedMemorySize)
		}
		if lp.MaxSwap != nil && *lp.MaxSwap < 0 {
			return fault.Invalid(p+".maxSwap", "must not be negative (got %d)", *lp.MaxSwap)
		}
		if err := between(p+".swappiness", lp.Swappiness, 0, 100); err != nil {
			return err
		}
	}
	return nil
}

func checkPorts(field string, pms []shapes.PortMapping, mode string) error {
	if len(pms) > 0 && mode == "none" {
		return fault.Invalid(field, "networkMode none has no network to publish ports on")
	}
	for i := range pms {
		pm, p := &pms[i], at(field, i)
		if pm.ContainerPortRange != "" {
			return unsupported(p+".containerPortRange", "port ranges are not available; list each containerPort")
		}
		if pm.ContainerPort == nil {
			return required(p + ".containerPort")
		}
		if err := between(p+".containerPort", pm.ContainerPort, 1, 65535); err != nil {
			return err
		}
		if err := between(p+".hostPort", pm.HostPort, 0, 65535); err != nil {
			return err
		}
		if pm.Protocol == "" {
			pm.Protocol = "tcp"
		}
		if mode == "host" || mode == "awsvpc" {
			// The container binds the ports of the host's (or its task's)
			// address directly.
			if pm.HostPort != nil && *pm.HostPort != 0 && *pm.HostPort != *pm.ContainerPort {
				return fault.Invalid(p+".hostPort", "must equal containerPort with networkMode %s (%d != %d)", mode, *pm.HostPort, *pm.ContainerPort)
			}
			pm.HostPort = new(*pm.ContainerPort)
		}
	}
	return nil
}

// checkHostPorts refuses two mappings of one host port: the second container
// would never start. Runs after checkPorts has normalized host mode.
func checkHostPorts(cds []shapes.ContainerDefinition) error {
	type key struct {
		protocol string
		port     int32
	}
	seen := map[key]string{}
	for i, c := range cds {
		for k, pm := range c.PortMappings {
			if pm.HostPort == nil || *pm.HostPort == 0 {
				continue
			}
			p := at(at("containerDefinitions", i)+".portMappings", k) + ".hostPort"
			kk := key{pm.Protocol, *pm.HostPort}
			if prev, dup := seen[kk]; dup {
				return fault.Invalid(p, "%s port %d is already mapped by %s", pm.Protocol, *pm.HostPort, prev)
			}
			seen[kk] = p
		}
	}
	return nil
}

// taskContainer views a standard container definition for the shared rules.
func taskContainer(path string, c *shapes.ContainerDefinition) container {
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
	// Links and volumesFrom make Docker start the other container first.
	for i, l := range c.Links {
		name, _, _ := strings.Cut(l, ":")
		v.implicit = append(v.implicit, link{at(path+".links", i), name})
	}
	for i, vf := range c.VolumesFrom {
		v.implicit = append(v.implicit, link{at(path+".volumesFrom", i) + ".sourceContainer", vf.SourceContainer})
	}
	return v
}
