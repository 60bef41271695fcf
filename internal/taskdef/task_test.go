package taskdef

import (
	"strings"
	"testing"

	"github.com/capstanhq/capstan/internal/api/shapes"
	"github.com/capstanhq/capstan/internal/fault"
)

func n(v int32) *int32 { return &v }

// validTask is a two-container web task that passes every rule; each test row
// breaks one rule of a fresh copy.
func validTask() *shapes.RegisterTaskDefinitionRequest {
	return &shapes.RegisterTaskDefinitionRequest{
		Family: "web",
		Volumes: []shapes.Volume{
			{Name: "data", Host: &shapes.HostVolumeProperties{SourcePath: "/srv/data"}},
		},
		ContainerDefinitions: []shapes.ContainerDefinition{
			{
				Name:         "app",
				Image:        "nginx:1.27",
				Cpu:          n(256),
				Memory:       n(256),
				PortMappings: []shapes.PortMapping{{ContainerPort: n(80), HostPort: n(8080)}},
				MountPoints:  []shapes.MountPoint{{SourceVolume: "data", ContainerPath: "/data"}},
				HealthCheck:  &shapes.HealthCheck{Command: []string{"CMD-SHELL", "wget -q -O- localhost || exit 1"}},
			},
			{
				Name:              "sidecar",
				Image:             "busybox",
				MemoryReservation: n(32),
				Essential:         new(false),
				DependsOn:         []shapes.ContainerDependency{{ContainerName: "app", Condition: "HEALTHY"}},
			},
		},
	}
}

type taskRow struct {
	name   string
	mutate func(r *shapes.RegisterTaskDefinitionRequest)
	kind   fault.Kind
	field  string // the message must start with it
}

func app(r *shapes.RegisterTaskDefinitionRequest) *shapes.ContainerDefinition {
	return &r.ContainerDefinitions[0]
}

func sidecar(r *shapes.RegisterTaskDefinitionRequest) *shapes.ContainerDefinition {
	return &r.ContainerDefinitions[1]
}

const (
	invalid     = fault.InvalidParameter
	notSupport  = fault.Unsupported
	clientError = fault.Client
)

var taskRows = []taskRow{
	// names and counts
	{"family charset", func(r *Req) { r.Family = "web app" }, invalid, "family"},
	{"family length", func(r *Req) { r.Family = strings.Repeat("f", 256) }, invalid, "family"},
	{"no containers", func(r *Req) { r.ContainerDefinitions = []shapes.ContainerDefinition{} }, invalid, "containerDefinitions"},
	{"eleven containers", func(r *Req) {
		for i := range 9 {
			r.ContainerDefinitions = append(r.ContainerDefinitions, shapes.ContainerDefinition{
				Name: "extra" + string(rune('a'+i)), Image: "busybox", Memory: n(8), Essential: new(false)})
		}
	}, invalid, "containerDefinitions"},
	{"container name missing", func(r *Req) { sidecar(r).Name = "" }, clientError, "containerDefinitions[1].name"},
	{"container name charset", func(r *Req) { sidecar(r).Name = "side car" }, invalid, "containerDefinitions[1].name"},
	{"container name repeated", func(r *Req) { sidecar(r).Name = "app" }, invalid, "containerDefinitions[1].name"},
	{"no essential container", func(r *Req) { app(r).Essential = new(false) }, invalid, "containerDefinitions"},
	{"image missing", func(r *Req) { app(r).Image = "" }, clientError, "containerDefinitions[0].image"},

	// task size
	{"cpu syntax", func(r *Req) { r.Cpu = "fast" }, invalid, "cpu"},
	{"cpu unit", func(r *Req) { r.Cpu = "1 core" }, invalid, "cpu"},
	{"cpu below floor", func(r *Req) { r.Cpu = "64" }, invalid, "cpu"},
	{"cpu above ceiling", func(r *Req) { r.Cpu = "200 vCPU" }, invalid, "cpu"},
	{"cpu fraction of a unit", func(r *Req) { r.Cpu = "0.1 vcpu" }, invalid, "cpu"},
	{"cpu bare fraction", func(r *Req) { r.Cpu = "1.5" }, invalid, "cpu"},
	{"memory unit", func(r *Req) { r.Memory = "1 TB" }, invalid, "memory"},
	{"memory below floor", func(r *Req) { r.Memory = "4" }, invalid, "memory"},
	{"memory overflow", func(r *Req) { r.Memory = "999999999999 GB" }, invalid, "memory"},

	// container size
	{"container cpu negative", func(r *Req) { app(r).Cpu = n(-1) }, invalid, "containerDefinitions[0].cpu"},
	{"container memory below floor", func(r *Req) { app(r).Memory = n(4) }, invalid, "containerDefinitions[0].memory"},
	{"reservation below floor", func(r *Req) { sidecar(r).MemoryReservation = n(5) }, invalid, "containerDefinitions[1].memoryReservation"},
	{"reservation above memory", func(r *Req) { app(r).MemoryReservation = n(512) }, invalid, "containerDefinitions[0].memoryReservation"},
	{"container memory above task", func(r *Req) { r.Memory = "128" }, invalid, "containerDefinitions[0].memory"},
	{"containers reserve more than task", func(r *Req) { r.Memory = "280" }, invalid, "containerDefinitions[1].memoryReservation"},
	{"container cpu above task", func(r *Req) { r.Cpu = "128" }, invalid, "containerDefinitions[0].cpu"},
	{"container cpu sum above task", func(r *Req) { r.Cpu = "384"; sidecar(r).Cpu = n(256) }, invalid, "containerDefinitions[1].cpu"},

	// platform
	{"awsvpc port differs", func(r *Req) { r.NetworkMode = "awsvpc" }, invalid, "containerDefinitions[0].portMappings[0].hostPort"},
	{"fargate without awsvpc", func(r *Req) { r.RequiresCompatibilities = []string{"EC2", "FARGATE"} }, clientError, "networkMode"},
	{"windows", func(r *Req) {
		r.RuntimePlatform = &shapes.RuntimePlatform{OperatingSystemFamily: "WINDOWS_SERVER_2022_CORE"}
	}, notSupport, "runtimePlatform.operatingSystemFamily"},
	{"inference accelerators", func(r *Req) {
		r.InferenceAccelerators = []shapes.InferenceAccelerator{{DeviceName: "d", DeviceType: "eia2.medium"}}
	}, notSupport, "inferenceAccelerators"},
	{"proxy configuration", func(r *Req) { r.ProxyConfiguration = &shapes.ProxyConfiguration{ContainerName: "app"} }, notSupport, "proxyConfiguration"},
	{"ephemeral storage", func(r *Req) { r.EphemeralStorage = &shapes.EphemeralStorage{SizeInGiB: n(30)} }, notSupport, "ephemeralStorage"},
	{"fault injection", func(r *Req) { r.EnableFaultInjection = new(true) }, notSupport, "enableFaultInjection"},

	// ports
	{"container port missing", func(r *Req) { app(r).PortMappings[0].ContainerPort = nil }, clientError, "containerDefinitions[0].portMappings[0].containerPort"},
	{"container port zero", func(r *Req) { app(r).PortMappings[0].ContainerPort = n(0) }, invalid, "containerDefinitions[0].portMappings[0].containerPort"},
	{"container port too high", func(r *Req) { app(r).PortMappings[0].ContainerPort = n(65536) }, invalid, "containerDefinitions[0].portMappings[0].containerPort"},
	{"host port too high", func(r *Req) { app(r).PortMappings[0].HostPort = n(70000) }, invalid, "containerDefinitions[0].portMappings[0].hostPort"},
	{"host mode port differs", func(r *Req) { r.NetworkMode = "host" }, invalid, "containerDefinitions[0].portMappings[0].hostPort"},
	{"none mode with ports", func(r *Req) { r.NetworkMode = "none" }, invalid, "containerDefinitions[0].portMappings"},
	{"port range", func(r *Req) {
		app(r).PortMappings = []shapes.PortMapping{{ContainerPortRange: "8000-8010"}}
	}, notSupport, "containerDefinitions[0].portMappings[0].containerPortRange"},
	{"host port taken twice", func(r *Req) {
		sidecar(r).PortMappings = []shapes.PortMapping{{ContainerPort: n(9000), HostPort: n(8080), Protocol: "tcp"}}
	}, invalid, "containerDefinitions[1].portMappings[0].hostPort"},
	{"host mode port taken twice", func(r *Req) {
		r.NetworkMode = "host"
		app(r).PortMappings[0].HostPort = nil
		sidecar(r).PortMappings = []shapes.PortMapping{{ContainerPort: n(80)}}
	}, invalid, "containerDefinitions[1].portMappings[0].hostPort"},

	// volumes
	{"volume name charset", func(r *Req) { r.Volumes[0].Name = "my data" }, invalid, "volumes[0].name"},
	{"volume name repeated", func(r *Req) { r.Volumes = append(r.Volumes, shapes.Volume{Name: "data"}) }, invalid, "volumes[1].name"},
	{"host path relative", func(r *Req) { r.Volumes[0].Host.SourcePath = "srv/data" }, invalid, "volumes[0].host.sourcePath"},
	{"efs", func(r *Req) {
		r.Volumes[0] = shapes.Volume{Name: "data", EfsVolumeConfiguration: &shapes.EFSVolumeConfiguration{FileSystemId: "fs-1"}}
	}, notSupport, "volumes[0].efsVolumeConfiguration"},
	{"fsx", func(r *Req) {
		r.Volumes[0] = shapes.Volume{Name: "data", FsxWindowsFileServerVolumeConfiguration: &shapes.FSxWindowsFileServerVolumeConfiguration{
			FileSystemId: "fs-1", RootDirectory: `\share`,
			AuthorizationConfig: &shapes.FSxWindowsFileServerAuthorizationConfig{CredentialsParameter: "arn:x", Domain: "corp"}}}
	}, notSupport, "volumes[0].fsxWindowsFileServerVolumeConfiguration"},
	{"configured at launch", func(r *Req) { r.Volumes[0] = shapes.Volume{Name: "data", ConfiguredAtLaunch: new(true)} }, notSupport, "volumes[0].configuredAtLaunch"},
	{"host and docker volume", func(r *Req) {
		r.Volumes[0].DockerVolumeConfiguration = &shapes.DockerVolumeConfiguration{}
	}, invalid, "volumes[0]"},
	{"docker volume plugin", func(r *Req) {
		r.Volumes[0] = shapes.Volume{Name: "data", DockerVolumeConfiguration: &shapes.DockerVolumeConfiguration{Driver: "rexray/ebs"}}
	}, notSupport, "volumes[0].dockerVolumeConfiguration.driver"},
	{"autoprovision task volume", func(r *Req) {
		r.Volumes[0] = shapes.Volume{Name: "data", DockerVolumeConfiguration: &shapes.DockerVolumeConfiguration{Autoprovision: new(true)}}
	}, invalid, "volumes[0].dockerVolumeConfiguration.autoprovision"},
	{"mount of unknown volume", func(r *Req) { app(r).MountPoints[0].SourceVolume = "logs" }, invalid, "containerDefinitions[0].mountPoints[0].sourceVolume"},
	{"mount without volume", func(r *Req) { app(r).MountPoints[0].SourceVolume = "" }, clientError, "containerDefinitions[0].mountPoints[0].sourceVolume"},
	{"mount path relative", func(r *Req) { app(r).MountPoints[0].ContainerPath = "data" }, invalid, "containerDefinitions[0].mountPoints[0].containerPath"},
	{"mount path repeated", func(r *Req) {
		app(r).MountPoints = append(app(r).MountPoints, shapes.MountPoint{SourceVolume: "data", ContainerPath: "/data"})
	}, invalid, "containerDefinitions[0].mountPoints[1].containerPath"},
	{"volumesFrom unknown", func(r *Req) {
		sidecar(r).VolumesFrom = []shapes.VolumeFrom{{SourceContainer: "db"}}
	}, invalid, "containerDefinitions[1].volumesFrom[0].sourceContainer"},
	{"volumesFrom self", func(r *Req) {
		sidecar(r).VolumesFrom = []shapes.VolumeFrom{{SourceContainer: "sidecar"}}
	}, invalid, "containerDefinitions[1].volumesFrom[0].sourceContainer"},
	{"volumesFrom empty", func(r *Req) { sidecar(r).VolumesFrom = []shapes.VolumeFrom{{}} }, clientError, "containerDefinitions[1].volumesFrom[0].sourceContainer"},

	// links
	{"link unknown", func(r *Req) { sidecar(r).Links = []string{"db:database"} }, invalid, "containerDefinitions[1].links[0]"},
	{"link format", func(r *Req) { sidecar(r).Links = []string{"app:my alias"} }, invalid, "containerDefinitions[1].links[0]"},
	{"link in host mode", func(r *Req) {
		r.NetworkMode = "host"
		app(r).PortMappings = nil
		sidecar(r).Links = []string{"app"}
	}, invalid, "containerDefinitions[1].links[0]"},

	// dependsOn
	{"depends on unknown", func(r *Req) { sidecar(r).DependsOn[0].ContainerName = "db" }, invalid, "containerDefinitions[1].dependsOn[0].containerName"},
	{"depends on itself", func(r *Req) { sidecar(r).DependsOn[0].ContainerName = "sidecar" }, invalid, "containerDefinitions[1].dependsOn[0].containerName"},
	{"depends twice", func(r *Req) {
		sidecar(r).DependsOn = append(sidecar(r).DependsOn, shapes.ContainerDependency{ContainerName: "app", Condition: "START"})
	}, invalid, "containerDefinitions[1].dependsOn[1].containerName"},
	{"dependency cycle", func(r *Req) {
		app(r).DependsOn = []shapes.ContainerDependency{{ContainerName: "sidecar", Condition: "START"}}
	}, invalid, "containerDefinitions[1].dependsOn[0].containerName"},
	{"cycle through volumesFrom", func(r *Req) {
		app(r).VolumesFrom = []shapes.VolumeFrom{{SourceContainer: "sidecar"}}
	}, invalid, "containerDefinitions[1].dependsOn[0].containerName"},
	{"complete on essential", func(r *Req) { sidecar(r).DependsOn[0].Condition = "COMPLETE" }, invalid, "containerDefinitions[1].dependsOn[0].condition"},
	{"success on essential", func(r *Req) { sidecar(r).DependsOn[0].Condition = "SUCCESS" }, invalid, "containerDefinitions[1].dependsOn[0].condition"},
	{"healthy without health check", func(r *Req) { app(r).HealthCheck = nil }, invalid, "containerDefinitions[1].dependsOn[0].condition"},
	{"healthy on NONE health check", func(r *Req) { app(r).HealthCheck.Command = []string{"NONE"} }, invalid, "containerDefinitions[1].dependsOn[0].condition"},

	// healthCheck
	{"health command kind", func(r *Req) { app(r).HealthCheck.Command = []string{"curl", "localhost"} }, invalid, "containerDefinitions[0].healthCheck.command[0]"},
	{"health command empty", func(r *Req) { app(r).HealthCheck.Command = []string{} }, invalid, "containerDefinitions[0].healthCheck.command"},
	{"health command bare CMD", func(r *Req) { app(r).HealthCheck.Command = []string{"CMD"} }, invalid, "containerDefinitions[0].healthCheck.command"},
	{"health interval", func(r *Req) { app(r).HealthCheck.Interval = n(4) }, invalid, "containerDefinitions[0].healthCheck.interval"},
	{"health timeout", func(r *Req) { app(r).HealthCheck.Timeout = n(61) }, invalid, "containerDefinitions[0].healthCheck.timeout"},
	{"health retries", func(r *Req) { app(r).HealthCheck.Retries = n(0) }, invalid, "containerDefinitions[0].healthCheck.retries"},
	{"health start period", func(r *Req) { app(r).HealthCheck.StartPeriod = n(301) }, invalid, "containerDefinitions[0].healthCheck.startPeriod"},

	// ulimits
	{"ulimit soft above hard", func(r *Req) {
		app(r).Ulimits = []shapes.Ulimit{{Name: "nofile", SoftLimit: n(4096), HardLimit: n(1024)}}
	}, invalid, "containerDefinitions[0].ulimits[0].softLimit"},
	{"ulimit unlimited soft under hard", func(r *Req) {
		app(r).Ulimits = []shapes.Ulimit{{Name: "core", SoftLimit: n(-1), HardLimit: n(0)}}
	}, invalid, "containerDefinitions[0].ulimits[0].softLimit"},
	{"ulimit repeated", func(r *Req) {
		app(r).Ulimits = []shapes.Ulimit{{Name: "nofile", SoftLimit: n(1), HardLimit: n(1)}, {Name: "nofile", SoftLimit: n(2), HardLimit: n(2)}}
	}, invalid, "containerDefinitions[0].ulimits[1].name"},

	// linuxParameters
	{"capability with prefix", func(r *Req) {
		app(r).LinuxParameters = &shapes.LinuxParameters{Capabilities: &shapes.KernelCapabilities{Add: []string{"CAP_NET_ADMIN"}}}
	}, invalid, "containerDefinitions[0].linuxParameters.capabilities.add[0]"},
	{"capability unknown drop", func(r *Req) {
		app(r).LinuxParameters = &shapes.LinuxParameters{Capabilities: &shapes.KernelCapabilities{Drop: []string{"CHOWN", "FLY"}}}
	}, invalid, "containerDefinitions[0].linuxParameters.capabilities.drop[1]"},
	{"device host path relative", func(r *Req) {
		app(r).LinuxParameters = &shapes.LinuxParameters{Devices: []shapes.Device{{HostPath: "dev/fuse"}}}
	}, invalid, "containerDefinitions[0].linuxParameters.devices[0].hostPath"},
	{"device container path relative", func(r *Req) {
		app(r).LinuxParameters = &shapes.LinuxParameters{Devices: []shapes.Device{{HostPath: "/dev/fuse", ContainerPath: "fuse"}}}
	}, invalid, "containerDefinitions[0].linuxParameters.devices[0].containerPath"},
	{"tmpfs path relative", func(r *Req) {
		app(r).LinuxParameters = &shapes.LinuxParameters{Tmpfs: []shapes.Tmpfs{{ContainerPath: "tmp", Size: n(64)}}}
	}, invalid, "containerDefinitions[0].linuxParameters.tmpfs[0].containerPath"},
	{"tmpfs size zero", func(r *Req) {
		app(r).LinuxParameters = &shapes.LinuxParameters{Tmpfs: []shapes.Tmpfs{{ContainerPath: "/tmp", Size: n(0)}}}
	}, invalid, "containerDefinitions[0].linuxParameters.tmpfs[0].size"},
	{"shared memory negative", func(r *Req) {
		app(r).LinuxParameters = &shapes.LinuxParameters{SharedMemorySize: n(-1)}
	}, invalid, "containerDefinitions[0].linuxParameters.sharedMemorySize"},
	{"swappiness above 100", func(r *Req) {
		app(r).LinuxParameters = &shapes.LinuxParameters{Swappiness: n(101)}
	}, invalid, "containerDefinitions[0].linuxParameters.swappiness"},
	{"max swap negative", func(r *Req) {
		app(r).LinuxParameters = &shapes.LinuxParameters{MaxSwap: n(-1)}
	}, invalid, "containerDefinitions[0].linuxParameters.maxSwap"},

	// restart policy and timeouts
	{"too many ignored exit codes", func(r *Req) {
		app(r).RestartPolicy = &shapes.ContainerRestartPolicy{Enabled: new(true), IgnoredExitCodes: make([]int32, 51)}
	}, invalid, "containerDefinitions[0].restartPolicy.ignoredExitCodes"},
	{"restart period short", func(r *Req) {
		app(r).RestartPolicy = &shapes.ContainerRestartPolicy{Enabled: new(true), RestartAttemptPeriod: n(59)}
	}, invalid, "containerDefinitions[0].restartPolicy.restartAttemptPeriod"},
	{"restart period long", func(r *Req) {
		app(r).RestartPolicy = &shapes.ContainerRestartPolicy{Enabled: new(true), RestartAttemptPeriod: n(1801)}
	}, invalid, "containerDefinitions[0].restartPolicy.restartAttemptPeriod"},
	{"start timeout negative", func(r *Req) { app(r).StartTimeout = n(-1) }, invalid, "containerDefinitions[0].startTimeout"},
	{"stop timeout too long", func(r *Req) { app(r).StopTimeout = n(3601) }, invalid, "containerDefinitions[0].stopTimeout"},

	// environment and labels
	{"env name empty", func(r *Req) { app(r).Environment = []shapes.KeyValuePair{{Value: "x"}} }, invalid, "containerDefinitions[0].environment[0].name"},
	{"env name repeated", func(r *Req) {
		app(r).Environment = []shapes.KeyValuePair{{Name: "A"}, {Name: "A", Value: "2"}}
	}, invalid, "containerDefinitions[0].environment[1].name"},
	{"label key empty", func(r *Req) { app(r).DockerLabels = map[string]string{"": "x"} }, invalid, "containerDefinitions[0].dockerLabels"},

	// sysctls
	{"sysctl not namespaced", func(r *Req) {
		app(r).SystemControls = []shapes.SystemControl{{Namespace: "vm.swappiness", Value: "10"}}
	}, invalid, "containerDefinitions[0].systemControls[0].namespace"},
	{"net sysctl in host mode", func(r *Req) {
		r.NetworkMode = "host"
		app(r).PortMappings = nil
		app(r).SystemControls = []shapes.SystemControl{{Namespace: "net.core.somaxconn", Value: "1024"}}
	}, invalid, "containerDefinitions[0].systemControls[0].namespace"},
	{"ipc sysctl with host ipc", func(r *Req) {
		r.IpcMode = "host"
		app(r).SystemControls = []shapes.SystemControl{{Namespace: "kernel.shmmax", Value: "1"}}
	}, invalid, "containerDefinitions[0].systemControls[0].namespace"},

	// logging and AWS-only features
	{"awslogs", func(r *Req) { app(r).LogConfiguration = &shapes.LogConfiguration{LogDriver: "awslogs"} }, notSupport, "containerDefinitions[0].logConfiguration.logDriver"},
	{"awsfirelens", func(r *Req) { app(r).LogConfiguration = &shapes.LogConfiguration{LogDriver: "awsfirelens"} }, notSupport, "containerDefinitions[0].logConfiguration.logDriver"},
	{"log secret options", func(r *Req) {
		app(r).LogConfiguration = &shapes.LogConfiguration{LogDriver: "splunk", SecretOptions: []shapes.Secret{{Name: "splunk-token", ValueFrom: "arn:x"}}}
	}, notSupport, "containerDefinitions[0].logConfiguration.secretOptions"},
	{"log option name empty", func(r *Req) {
		app(r).LogConfiguration = &shapes.LogConfiguration{LogDriver: "json-file", Options: map[string]string{"": "1"}}
	}, invalid, "containerDefinitions[0].logConfiguration.options"},
	{"secrets", func(r *Req) { app(r).Secrets = []shapes.Secret{{Name: "DB", ValueFrom: "arn:x"}} }, notSupport, "containerDefinitions[0].secrets"},
	{"environment files", func(r *Req) {
		app(r).EnvironmentFiles = []shapes.EnvironmentFile{{Type: "s3", Value: "arn:aws:s3:::b/k.env"}}
	}, notSupport, "containerDefinitions[0].environmentFiles"},
	{"repository credentials", func(r *Req) {
		app(r).RepositoryCredentials = &shapes.RepositoryCredentials{CredentialsParameter: "arn:x"}
	}, notSupport, "containerDefinitions[0].repositoryCredentials"},
	{"firelens", func(r *Req) { app(r).FirelensConfiguration = &shapes.FirelensConfiguration{Type: "fluentbit"} }, notSupport, "containerDefinitions[0].firelensConfiguration"},
	{"gpu", func(r *Req) {
		app(r).ResourceRequirements = []shapes.ResourceRequirement{{Type: "GPU", Value: "1"}}
	}, notSupport, "containerDefinitions[0].resourceRequirements"},
	{"credential specs", func(r *Req) { app(r).CredentialSpecs = []string{"credentialspec:arn:x"} }, notSupport, "containerDefinitions[0].credentialSpecs"},

	// placement
	{"placement expression empty", func(r *Req) {
		r.PlacementConstraints = []shapes.TaskDefinitionPlacementConstraint{{Type: "memberOf"}}
	}, invalid, "placementConstraints[0].expression"},
	{"placement type missing", func(r *Req) {
		r.PlacementConstraints = []shapes.TaskDefinitionPlacementConstraint{{Expression: "attribute:ecs.os-type == linux"}}
	}, clientError, "placementConstraints[0].type"},
	{"too many placement constraints", func(r *Req) {
		r.PlacementConstraints = make([]shapes.TaskDefinitionPlacementConstraint, 11)
	}, invalid, "placementConstraints"},

	// tags (the model bounds count and lengths; TestCheckTags covers those)
	{"tag key empty", func(r *Req) { r.Tags = []shapes.Tag{{Value: "v"}} }, invalid, "tags[0].key"},
	{"tag key reserved", func(r *Req) { r.Tags = []shapes.Tag{{Key: "aws:owner"}} }, invalid, "tags[0].key"},
	{"tag key reserved upper case", func(r *Req) { r.Tags = []shapes.Tag{{Key: "team"}, {Key: "AWS:Owner"}} }, invalid, "tags[1].key"},
	{"tag key repeated", func(r *Req) { r.Tags = []shapes.Tag{{Key: "team"}, {Key: "team"}} }, invalid, "tags[1].key"},
	{"tag key charset", func(r *Req) { r.Tags = []shapes.Tag{{Key: "team!"}} }, invalid, "tags[0].key"},
	{"tag value charset", func(r *Req) { r.Tags = []shapes.Tag{{Key: "k", Value: "a;b"}} }, invalid, "tags[0].value"},
}

type Req = shapes.RegisterTaskDefinitionRequest

func TestCheckTaskRejects(t *testing.T) {
	for _, row := range taskRows {
		t.Run(row.name, func(t *testing.T) {
			r := validTask()
			row.mutate(r)
			// Each row must break our rule, not one the model already enforces.
			if v := r.Check(""); v != nil {
				t.Fatalf("model check fails first: %v", v)
			}
			assertFault(t, CheckTask(r), row.kind, row.field)
		})
	}
}

// assertFault checks the error's kind and that its message starts with the
// field path and goes on to state a rule.
func assertFault(t *testing.T, err error, kind fault.Kind, field string) {
	t.Helper()
	if err == nil {
		t.Fatalf("accepted; want %v error on %s", kind, field)
	}
	if fault.As(err) == nil {
		t.Fatalf("error %q is not a *fault.Error", err)
	}
	if got := fault.KindOf(err); got != kind {
		t.Errorf("kind = %v, want %v (%v)", got, kind, err)
	}
	msg := err.Error()
	if !strings.HasPrefix(msg, field+": ") || len(msg) < len(field)+10 {
		t.Errorf("message %q does not name %s and a rule", msg, field)
	}
}

// A container without any memory is refused in ECS's words, which name the
// container rather than the member path: scripts match on them.
func TestCheckTaskNoMemoryECSMessage(t *testing.T) {
	r := validTask()
	sidecar(r).MemoryReservation = nil
	err := CheckTask(r)
	if fault.KindOf(err) != fault.Client {
		t.Fatalf("kind = %v, want client (%v)", fault.KindOf(err), err)
	}
	want := "Invalid setting for container '" + sidecar(r).Name + "'. At least one of 'memory' or 'memoryReservation' must be specified."
	if err.Error() != want {
		t.Errorf("message %q, want %q", err.Error(), want)
	}
}

func TestCheckTaskAccepts(t *testing.T) {
	rows := []struct {
		name   string
		mutate func(r *Req)
		verify func(t *testing.T, r *Req)
	}{
		{"defaults filled", func(r *Req) {}, func(t *testing.T, r *Req) {
			eq(t, "networkMode", r.NetworkMode, "bridge")
			eq(t, "essential", *app(r).Essential, true)
			eq(t, "sidecar essential", *sidecar(r).Essential, false)
			eq(t, "protocol", app(r).PortMappings[0].Protocol, "tcp")
			h := app(r).HealthCheck
			eq(t, "interval", *h.Interval, 30)
			eq(t, "timeout", *h.Timeout, 5)
			eq(t, "retries", *h.Retries, 3)
			if h.StartPeriod != nil {
				t.Errorf("startPeriod filled: %d", *h.StartPeriod)
			}
		}},
		{"1 vCPU and 1GB", func(r *Req) { r.Cpu, r.Memory = "1 vCPU", "1GB" }, func(t *testing.T, r *Req) {
			eq(t, "cpu", r.Cpu, "1024")
			eq(t, "memory", r.Memory, "1024")
		}},
		{"0.5 vcpu and 0.5 GB", func(r *Req) { r.Cpu, r.Memory = "0.5 vcpu", "0.5 GB" }, func(t *testing.T, r *Req) {
			eq(t, "cpu", r.Cpu, "512")
			eq(t, "memory", r.Memory, "512")
		}},
		{"integers with spaces", func(r *Req) { r.Cpu, r.Memory = " 2048 ", "512 MiB" }, func(t *testing.T, r *Req) {
			eq(t, "cpu", r.Cpu, "2048")
			eq(t, "memory", r.Memory, "512")
		}},
		{"task memory covers containers without sizes", func(r *Req) {
			r.Memory = "1 GB"
			app(r).Memory, sidecar(r).MemoryReservation = nil, nil
		}, nil},
		{"host mode fills host port", func(r *Req) {
			r.NetworkMode = "host"
			app(r).PortMappings[0].HostPort = nil
			app(r).PortMappings = append(app(r).PortMappings, shapes.PortMapping{ContainerPort: n(443), HostPort: n(443)})
		}, func(t *testing.T, r *Req) {
			eq(t, "hostPort", *app(r).PortMappings[0].HostPort, 80)
		}},
		{"same port over tcp and udp", func(r *Req) {
			sidecar(r).PortMappings = []shapes.PortMapping{{ContainerPort: n(53), HostPort: n(8080), Protocol: "udp"}}
		}, nil},
		{"dynamic host ports repeat", func(r *Req) {
			app(r).PortMappings[0].HostPort = nil
			sidecar(r).PortMappings = []shapes.PortMapping{{ContainerPort: n(80), HostPort: n(0)}}
		}, nil},
		{"none mode without ports", func(r *Req) { r.NetworkMode = "none"; app(r).PortMappings = nil }, nil},
		{"docker volume defaults", func(r *Req) {
			r.Volumes = append(r.Volumes, shapes.Volume{Name: "cache", DockerVolumeConfiguration: &shapes.DockerVolumeConfiguration{}},
				shapes.Volume{Name: "shared", DockerVolumeConfiguration: &shapes.DockerVolumeConfiguration{Scope: "shared", Autoprovision: new(true)}},
				shapes.Volume{Name: "scratch"})
		}, func(t *testing.T, r *Req) {
			d := r.Volumes[1].DockerVolumeConfiguration
			eq(t, "driver", d.Driver, "local")
			eq(t, "scope", d.Scope, "task")
		}},
		{"restart policy default period", func(r *Req) {
			app(r).RestartPolicy = &shapes.ContainerRestartPolicy{Enabled: new(true), IgnoredExitCodes: []int32{0}}
		}, func(t *testing.T, r *Req) {
			eq(t, "restartAttemptPeriod", *app(r).RestartPolicy.RestartAttemptPeriod, 300)
		}},
		{"compatibilities and platform", func(r *Req) {
			r.RequiresCompatibilities = []string{"EC2", "EXTERNAL", "MANAGED_INSTANCES"}
			r.RuntimePlatform = &shapes.RuntimePlatform{OperatingSystemFamily: "LINUX", CpuArchitecture: "ARM64"}
		}, nil},
		{"host pid and task ipc", func(r *Req) { r.PidMode, r.IpcMode = "host", "task" }, nil},
		{"placement constraint", func(r *Req) {
			r.PlacementConstraints = []shapes.TaskDefinitionPlacementConstraint{{Type: "memberOf", Expression: "attribute:ecs.cpu-architecture == arm64"}}
		}, nil},
		{"newer capabilities", func(r *Req) {
			app(r).LinuxParameters = &shapes.LinuxParameters{
				Capabilities: &shapes.KernelCapabilities{Add: []string{"BPF", "PERFMON", "CHECKPOINT_RESTORE"}, Drop: []string{"ALL"}},
				Tmpfs:        []shapes.Tmpfs{{ContainerPath: "/run", Size: n(16)}},
				Swappiness:   n(0), MaxSwap: n(0), SharedMemorySize: n(64),
			}
		}, nil},
		{"links and volumesFrom", func(r *Req) {
			sidecar(r).Links = []string{"app:web"}
			sidecar(r).VolumesFrom = []shapes.VolumeFrom{{SourceContainer: "app", ReadOnly: new(true)}}
		}, nil},
		{"start and complete conditions", func(r *Req) {
			r.ContainerDefinitions = append(r.ContainerDefinitions, shapes.ContainerDefinition{
				Name: "migrate", Image: "busybox", Memory: n(16), Essential: new(false)})
			app(r).DependsOn = []shapes.ContainerDependency{{ContainerName: "migrate", Condition: "SUCCESS"}}
		}, nil},
		{"sysctls in bridge mode", func(r *Req) {
			app(r).SystemControls = []shapes.SystemControl{{Namespace: "net.core.somaxconn", Value: "1024"}, {Namespace: "kernel.shmmax", Value: "1"}, {Namespace: "fs.mqueue.msg_max", Value: "10"}}
		}, nil},
		{"docker log drivers", func(r *Req) {
			app(r).LogConfiguration = &shapes.LogConfiguration{LogDriver: "fluentd", Options: map[string]string{"fluentd-address": "localhost:24224"}}
			sidecar(r).LogConfiguration = &shapes.LogConfiguration{LogDriver: "json-file"}
		}, nil},
		{"unlimited ulimit", func(r *Req) {
			app(r).Ulimits = []shapes.Ulimit{{Name: "memlock", SoftLimit: n(-1), HardLimit: n(-1)}, {Name: "nofile", SoftLimit: n(1024), HardLimit: n(-1)}}
		}, nil},
		{"tags", func(r *Req) {
			r.Tags = []shapes.Tag{{Key: "team", Value: "platform"}, {Key: "cost center", Value: ""}, {Key: "Äpfel:ü/=+-@_.", Value: "ok"}}
		}, nil},
	}
	for _, row := range rows {
		t.Run(row.name, func(t *testing.T) {
			r := validTask()
			row.mutate(r)
			if v := r.Check(""); v != nil {
				t.Fatalf("model check: %v", v)
			}
			if err := CheckTask(r); err != nil {
				t.Fatalf("rejected: %v", err)
			}
			if row.verify != nil {
				row.verify(t, r)
			}
		})
	}
}

func eq[T comparable](t *testing.T, what string, got, want T) {
	t.Helper()
	if got != want {
		t.Errorf("%s = %v, want %v", what, got, want)
	}
}
