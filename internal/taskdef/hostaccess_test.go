package taskdef

import (
	"slices"
	"testing"

	"github.com/capstanhq/capstan/internal/api/shapes"
)

func TestHostAccessKinds(t *testing.T) {
	yes := true
	no := false
	// container builds a task definition of one container changed by mod.
	container := func(mod func(*shapes.ContainerDefinition)) shapes.TaskDefinition {
		c := shapes.ContainerDefinition{Name: "app", Image: "busybox"}
		mod(&c)
		return shapes.TaskDefinition{NetworkMode: "bridge", ContainerDefinitions: []shapes.ContainerDefinition{c}}
	}
	hostVolume := func(p string) shapes.TaskDefinition {
		return shapes.TaskDefinition{NetworkMode: "bridge",
			Volumes:              []shapes.Volume{{Name: "v", Host: &shapes.HostVolumeProperties{SourcePath: p}}},
			ContainerDefinitions: []shapes.ContainerDefinition{{Name: "app"}}}
	}
	sysctl := func(mode, name string) shapes.TaskDefinition {
		td := container(func(c *shapes.ContainerDefinition) {
			c.SystemControls = []shapes.SystemControl{{Namespace: name, Value: "1"}}
		})
		td.NetworkMode = mode
		return td
	}
	rows := []struct {
		name string
		td   shapes.TaskDefinition
		want []string
	}{
		{"nothing", container(func(*shapes.ContainerDefinition) {}), nil},
		{"privileged", container(func(c *shapes.ContainerDefinition) { c.Privileged = &yes }), []string{HostPrivileged}},
		{"privileged false", container(func(c *shapes.ContainerDefinition) { c.Privileged = &no }), nil},
		{"host network", shapes.TaskDefinition{NetworkMode: "host"}, []string{HostNetwork}},
		{"host pid", shapes.TaskDefinition{PidMode: "host"}, []string{HostPID}},
		{"task pid", shapes.TaskDefinition{PidMode: "task"}, nil},
		{"host ipc", shapes.TaskDefinition{IpcMode: "host"}, []string{HostIPC}},
		{"task ipc", shapes.TaskDefinition{IpcMode: "task"}, nil},
		{"capability added", container(func(c *shapes.ContainerDefinition) {
			c.LinuxParameters = &shapes.LinuxParameters{Capabilities: &shapes.KernelCapabilities{Add: []string{"NET_ADMIN"}}}
		}), []string{HostCapabilities}},
		{"capability dropped only", container(func(c *shapes.ContainerDefinition) {
			c.LinuxParameters = &shapes.LinuxParameters{Capabilities: &shapes.KernelCapabilities{Drop: []string{"ALL"}}}
		}), nil},
		{"device", container(func(c *shapes.ContainerDefinition) {
			c.LinuxParameters = &shapes.LinuxParameters{Devices: []shapes.Device{{HostPath: "/dev/fuse"}}}
		}), []string{HostDevices}},
		{"tmpfs is not host access", container(func(c *shapes.ContainerDefinition) {
			c.LinuxParameters = &shapes.LinuxParameters{Tmpfs: []shapes.Tmpfs{{ContainerPath: "/tmp"}}}
		}), nil},
		{"host volume", hostVolume("/srv/data"), []string{HostVolume}},
		{"host volume of /", hostVolume("/"), []string{HostVolume, HostDockerSocket}},
		{"docker socket", hostVolume("/var/run/docker.sock"), []string{HostVolume, HostDockerSocket}},
		{"docker socket under /run", hostVolume("/run/docker.sock"), []string{HostVolume, HostDockerSocket}},
		{"docker socket directory", hostVolume("/var/run"), []string{HostVolume, HostDockerSocket}},
		{"docker socket directory, trailing slash", hostVolume("/run/"), []string{HostVolume, HostDockerSocket}},
		{"var", hostVolume("/var"), []string{HostVolume, HostDockerSocket}},
		{"rootless docker socket", hostVolume("/home/u/.docker/run/docker.sock"), []string{HostVolume, HostDockerSocket}},
		{"rootless runtime directory", hostVolume("/run/user/1000"), []string{HostVolume, HostDockerSocket}},
		{"host processes' roots", hostVolume("/proc/1/root"), []string{HostVolume, HostDockerSocket}},
		{"path written with dots", hostVolume("/srv/../var/run/"), []string{HostVolume, HostDockerSocket}},
		{"sibling of the socket", hostVolume("/var/run/app"), []string{HostVolume}},
		{"var lib", hostVolume("/var/lib/app"), []string{HostVolume}},
		{"scratch volume", shapes.TaskDefinition{Volumes: []shapes.Volume{{Name: "s", Host: &shapes.HostVolumeProperties{}}}}, nil},
		{"docker volume", shapes.TaskDefinition{Volumes: []shapes.Volume{{Name: "d",
			DockerVolumeConfiguration: &shapes.DockerVolumeConfiguration{Driver: "local", Scope: "shared"}}}}, nil},
		{"docker volume binding a host path", shapes.TaskDefinition{Volumes: []shapes.Volume{{Name: "d",
			DockerVolumeConfiguration: &shapes.DockerVolumeConfiguration{Driver: "local",
				DriverOpts: map[string]string{"type": "none", "o": "bind", "device": "/var/run"}}}}},
			[]string{HostVolume, HostDockerSocket}},
		{"net sysctl in bridge mode", sysctl("bridge", "net.ipv4.ip_forward"), nil},
		{"mqueue sysctl", sysctl("bridge", "fs.mqueue.msg_max"), nil},
		{"net sysctl in host mode", sysctl("host", "net.ipv4.ip_forward"), []string{HostNetwork, HostSysctls}},
		{"kernel sysctl", sysctl("bridge", "kernel.shmmax"), []string{HostSysctls}},
		{"vm sysctl", sysctl("bridge", "vm.overcommit_memory"), []string{HostSysctls}},
		{"sysctl with host ipc", func() shapes.TaskDefinition {
			td := sysctl("bridge", "fs.mqueue.msg_max")
			td.IpcMode = "host"
			return td
		}(), []string{HostIPC, HostSysctls}},
		{"everything, in order", shapes.TaskDefinition{NetworkMode: "host", PidMode: "host", IpcMode: "host",
			Volumes: []shapes.Volume{{Name: "root", Host: &shapes.HostVolumeProperties{SourcePath: "/"}}},
			ContainerDefinitions: []shapes.ContainerDefinition{
				{Name: "a", SystemControls: []shapes.SystemControl{{Namespace: "kernel.msgmax"}}},
				{Name: "b", Privileged: &yes, LinuxParameters: &shapes.LinuxParameters{
					Capabilities: &shapes.KernelCapabilities{Add: []string{"SYS_ADMIN"}},
					Devices:      []shapes.Device{{HostPath: "/dev/kmsg"}}}},
			}},
			[]string{HostPrivileged, HostNetwork, HostPID, HostIPC, HostCapabilities, HostDevices, HostVolume, HostDockerSocket, HostSysctls}},
	}
	for _, row := range rows {
		t.Run(row.name, func(t *testing.T) {
			if got := HostAccessKinds(row.td); !slices.Equal(got, row.want) {
				t.Errorf("HostAccessKinds = %q, want %q", got, row.want)
			}
		})
	}
}
