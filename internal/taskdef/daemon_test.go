package taskdef

import (
	"testing"

	"github.com/capstanhq/capstan/internal/api/shapes"
	"github.com/capstanhq/capstan/internal/fault"
)

type DReq = shapes.RegisterDaemonTaskDefinitionRequest

// validDaemon looks like a CloudWatch-agent style metrics daemon: privileged,
// reading /proc, /sys and the instance's container logs, plus a helper.
func validDaemon() *DReq {
	ro := new(true)
	return &DReq{
		Family: "cloudwatch-agent",
		Cpu:    "1024",
		Memory: "512",
		Volumes: []shapes.DaemonVolume{
			{Name: "proc", Host: &shapes.HostVolumeProperties{SourcePath: "/proc"}},
			{Name: "sys", Host: &shapes.HostVolumeProperties{SourcePath: "/sys"}},
			{Name: "container-logs", LogDriverVolumeConfiguration: &shapes.LogDriverVolumeConfiguration{Driver: "json-file"}},
		},
		ContainerDefinitions: []shapes.DaemonContainerDefinition{
			{
				Name:       "agent",
				Image:      "public.ecr.aws/cloudwatch-agent/cloudwatch-agent:latest",
				Privileged: new(true),
				Memory:     n(256),
				MountPoints: []shapes.MountPoint{
					{SourceVolume: "proc", ContainerPath: "/rootfs/proc", ReadOnly: ro},
					{SourceVolume: "sys", ContainerPath: "/rootfs/sys", ReadOnly: ro},
					{SourceVolume: "container-logs", ContainerPath: "/var/log/containers", ReadOnly: ro},
				},
				LinuxParameters: &shapes.DaemonLinuxParameters{
					Capabilities: &shapes.KernelCapabilities{Add: []string{"BPF", "PERFMON", "SYS_ADMIN", "NET_ADMIN", "SYS_PTRACE"}},
				},
				HealthCheck:      &shapes.HealthCheck{Command: []string{"CMD", "/opt/aws/amazon-cloudwatch-agent/bin/health"}},
				RestartPolicy:    &shapes.ContainerRestartPolicy{Enabled: new(true)},
				LogConfiguration: &shapes.LogConfiguration{LogDriver: "json-file", Options: map[string]string{"max-size": "10m"}},
			},
			{
				Name:              "config-reloader",
				Image:             "busybox",
				Essential:         new(false),
				MemoryReservation: n(16),
				DependsOn:         []shapes.ContainerDependency{{ContainerName: "agent", Condition: "HEALTHY"}},
			},
		},
		PidMode: "shared",
		Tags:    []shapes.Tag{{Key: "team", Value: "observability"}},
	}
}

func agent(r *DReq) *shapes.DaemonContainerDefinition    { return &r.ContainerDefinitions[0] }
func reloader(r *DReq) *shapes.DaemonContainerDefinition { return &r.ContainerDefinitions[1] }

func TestCheckDaemonRejects(t *testing.T) {
	rows := []struct {
		name   string
		mutate func(r *DReq)
		kind   fault.Kind
		field  string
	}{
		{"family charset", func(r *DReq) { r.Family = "cloudwatch/agent" }, invalid, "family"},
		{"cpu syntax", func(r *DReq) { r.Cpu = "lots" }, invalid, "cpu"},
		{"memory below floor", func(r *DReq) { r.Memory = "1" }, invalid, "memory"},
		{"container name missing", func(r *DReq) { reloader(r).Name = "" }, clientError, "containerDefinitions[1].name"},
		{"container name repeated", func(r *DReq) { reloader(r).Name = "agent" }, invalid, "containerDefinitions[1].name"},
		{"no containers", func(r *DReq) { r.ContainerDefinitions = []shapes.DaemonContainerDefinition{} }, invalid, "containerDefinitions"},
		{"no essential container", func(r *DReq) { agent(r).Essential = new(false) }, invalid, "containerDefinitions"},
		{"containers exceed task memory", func(r *DReq) { agent(r).Memory = n(500) }, invalid, "containerDefinitions[1].memoryReservation"},
		{"container cpu exceeds task", func(r *DReq) { agent(r).Cpu = n(2048) }, invalid, "containerDefinitions[0].cpu"},
		{"volume without source", func(r *DReq) { r.Volumes[0].Host = nil }, invalid, "volumes[0]"},
		{"volume with both sources", func(r *DReq) {
			r.Volumes[0].LogDriverVolumeConfiguration = &shapes.LogDriverVolumeConfiguration{Driver: "json-file"}
		}, invalid, "volumes[0]"},
		{"host path missing", func(r *DReq) { r.Volumes[0].Host.SourcePath = "" }, clientError, "volumes[0].host.sourcePath"},
		{"host path relative", func(r *DReq) { r.Volumes[1].Host.SourcePath = "sys" }, invalid, "volumes[1].host.sourcePath"},
		{"log volume driver", func(r *DReq) { r.Volumes[2].LogDriverVolumeConfiguration.Driver = "syslog" }, invalid, "volumes[2].logDriverVolumeConfiguration.driver"},
		{"volume name repeated", func(r *DReq) { r.Volumes[1].Name = "proc" }, invalid, "volumes[1].name"},
		{"mount of unknown volume", func(r *DReq) { agent(r).MountPoints[0].SourceVolume = "rootfs" }, invalid, "containerDefinitions[0].mountPoints[0].sourceVolume"},
		{"healthy without health check", func(r *DReq) { agent(r).HealthCheck = nil }, invalid, "containerDefinitions[1].dependsOn[0].condition"},
		{"success on essential", func(r *DReq) { reloader(r).DependsOn[0].Condition = "SUCCESS" }, invalid, "containerDefinitions[1].dependsOn[0].condition"},
		{"dependency cycle", func(r *DReq) {
			agent(r).DependsOn = []shapes.ContainerDependency{{ContainerName: "config-reloader", Condition: "START"}}
		}, invalid, "containerDefinitions[1].dependsOn[0].containerName"},
		{"health interval", func(r *DReq) { agent(r).HealthCheck.Interval = n(301) }, invalid, "containerDefinitions[0].healthCheck.interval"},
		{"restart period", func(r *DReq) { agent(r).RestartPolicy.RestartAttemptPeriod = n(30) }, invalid, "containerDefinitions[0].restartPolicy.restartAttemptPeriod"},
		{"ulimit soft above hard", func(r *DReq) {
			agent(r).Ulimits = []shapes.Ulimit{{Name: "nofile", SoftLimit: n(2), HardLimit: n(1)}}
		}, invalid, "containerDefinitions[0].ulimits[0].softLimit"},
		{"capability unknown", func(r *DReq) {
			agent(r).LinuxParameters.Capabilities.Add = append(agent(r).LinuxParameters.Capabilities.Add, "EBPF")
		}, invalid, "containerDefinitions[0].linuxParameters.capabilities.add[5]"},
		{"tmpfs size", func(r *DReq) {
			agent(r).LinuxParameters.Tmpfs = []shapes.Tmpfs{{ContainerPath: "/tmp", Size: n(-1)}}
		}, invalid, "containerDefinitions[0].linuxParameters.tmpfs[0].size"},
		{"device path", func(r *DReq) {
			agent(r).LinuxParameters.Devices = []shapes.Device{{HostPath: "kmsg"}}
		}, invalid, "containerDefinitions[0].linuxParameters.devices[0].hostPath"},
		{"ipc sysctl with shared ipc", func(r *DReq) {
			r.IpcMode = "shared"
			agent(r).SystemControls = []shapes.SystemControl{{Namespace: "kernel.msgmax", Value: "65536"}}
		}, invalid, "containerDefinitions[0].systemControls[0].namespace"},
		{"stop timeout", func(r *DReq) { agent(r).StopTimeout = n(-5) }, invalid, "containerDefinitions[0].stopTimeout"},
		{"env repeated", func(r *DReq) { agent(r).Environment = []shapes.KeyValuePair{{Name: "X"}, {Name: "X"}} }, invalid, "containerDefinitions[0].environment[1].name"},
		{"awslogs", func(r *DReq) { agent(r).LogConfiguration.LogDriver = "awslogs" }, notSupport, "containerDefinitions[0].logConfiguration.logDriver"},
		{"secrets", func(r *DReq) { agent(r).Secrets = []shapes.Secret{{Name: "K", ValueFrom: "arn:x"}} }, notSupport, "containerDefinitions[0].secrets"},
		{"repository credentials", func(r *DReq) {
			agent(r).RepositoryCredentials = &shapes.RepositoryCredentials{CredentialsParameter: "arn:x"}
		}, notSupport, "containerDefinitions[0].repositoryCredentials"},
		{"environment files", func(r *DReq) {
			reloader(r).EnvironmentFiles = []shapes.EnvironmentFile{{Type: "s3", Value: "arn:aws:s3:::b/k"}}
		}, notSupport, "containerDefinitions[1].environmentFiles"},
		{"firelens", func(r *DReq) { reloader(r).FirelensConfiguration = &shapes.FirelensConfiguration{Type: "fluentd"} }, notSupport, "containerDefinitions[1].firelensConfiguration"},
		{"tag reserved", func(r *DReq) { r.Tags[0].Key = "aws:cloudformation:stack" }, invalid, "tags[0].key"},
	}
	for _, row := range rows {
		t.Run(row.name, func(t *testing.T) {
			r := validDaemon()
			row.mutate(r)
			if v := r.Check(""); v != nil {
				t.Fatalf("model check fails first: %v", v)
			}
			assertFault(t, CheckDaemon(r), row.kind, row.field)
		})
	}
}

func TestCheckDaemonAccepts(t *testing.T) {
	rows := []struct {
		name   string
		mutate func(r *DReq)
		verify func(t *testing.T, r *DReq)
	}{
		{"cloudwatch agent", func(r *DReq) {}, func(t *testing.T, r *DReq) {
			eq(t, "cpu", r.Cpu, "1024")
			eq(t, "memory", r.Memory, "512")
			eq(t, "essential", *agent(r).Essential, true)
			eq(t, "reloader essential", *reloader(r).Essential, false)
			eq(t, "interval", *agent(r).HealthCheck.Interval, 30)
			eq(t, "restartAttemptPeriod", *agent(r).RestartPolicy.RestartAttemptPeriod, 300)
		}},
		{"vCPU and GB", func(r *DReq) { r.Cpu, r.Memory = "1 vCPU", "0.5 GB" }, func(t *testing.T, r *DReq) {
			eq(t, "cpu", r.Cpu, "1024")
			eq(t, "memory", r.Memory, "512")
		}},
		{"1GB", func(r *DReq) { r.Memory = "1GB" }, func(t *testing.T, r *DReq) { eq(t, "memory", r.Memory, "1024") }},
		{"no task size", func(r *DReq) { r.Cpu, r.Memory = "", "" }, nil},
		{"shared ipc and net sysctl", func(r *DReq) {
			r.IpcMode = "shared"
			agent(r).SystemControls = []shapes.SystemControl{{Namespace: "net.core.rmem_max", Value: "2500000"}}
		}, nil},
		{"devices and tmpfs", func(r *DReq) {
			agent(r).LinuxParameters.Devices = []shapes.Device{{HostPath: "/dev/kmsg", ContainerPath: "/dev/kmsg", Permissions: []string{"read"}}}
			agent(r).LinuxParameters.Tmpfs = []shapes.Tmpfs{{ContainerPath: "/tmp", Size: n(64)}}
			agent(r).LinuxParameters.InitProcessEnabled = new(true)
		}, nil},
		{"syslog driver", func(r *DReq) { agent(r).LogConfiguration = &shapes.LogConfiguration{LogDriver: "syslog"} }, nil},
	}
	for _, row := range rows {
		t.Run(row.name, func(t *testing.T) {
			r := validDaemon()
			row.mutate(r)
			if v := r.Check(""); v != nil {
				t.Fatalf("model check: %v", v)
			}
			if err := CheckDaemon(r); err != nil {
				t.Fatalf("rejected: %v", err)
			}
			if row.verify != nil {
				row.verify(t, r)
			}
		})
	}
}
