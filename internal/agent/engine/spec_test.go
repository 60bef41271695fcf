package engine

import (
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/capstanhq/capstan/internal/api/shapes"
	"github.com/capstanhq/capstan/internal/protocol"
	"github.com/capstanhq/capstan/internal/runtime"
)

func TestBuildSpec(t *testing.T) {
	full := shapes.ContainerDefinition{
		Name:                   "app",
		Image:                  "repo/app:1",
		EntryPoint:             []string{"/bin/sh", "-c"},
		Command:                []string{"run"},
		Environment:            []shapes.KeyValuePair{{Name: "A", Value: "1"}},
		Memory:                 new(int32(256)),
		MemoryReservation:      new(int32(128)),
		PortMappings:           []shapes.PortMapping{{ContainerPort: new(int32(80)), HostPort: new(int32(0)), Protocol: "tcp"}, {ContainerPort: new(int32(53)), HostPort: new(int32(5353)), Protocol: "udp"}},
		MountPoints:            []shapes.MountPoint{{SourceVolume: "data", ContainerPath: "/data", ReadOnly: new(true)}, {SourceVolume: "scratch", ContainerPath: "/tmp/s"}},
		HealthCheck:            &shapes.HealthCheck{Command: []string{"CMD-SHELL", "true"}, Interval: new(int32(5)), Timeout: new(int32(2)), Retries: new(int32(3)), StartPeriod: new(int32(1))},
		User:                   "1000:1000",
		WorkingDirectory:       "/work",
		ReadonlyRootFilesystem: new(true),
		Privileged:             new(true),
		Ulimits:                []shapes.Ulimit{{Name: "nofile", SoftLimit: new(int32(1024)), HardLimit: new(int32(4096))}},
		SystemControls:         []shapes.SystemControl{{Namespace: "net.core.somaxconn", Value: "1024"}},
		DockerLabels:           map[string]string{"x": "y"},
		LogConfiguration:       &shapes.LogConfiguration{LogDriver: "json-file", Options: map[string]string{"max-size": "10m"}},
		ExtraHosts:             []shapes.HostEntry{{Hostname: "db", IpAddress: "10.0.0.1"}},
		DnsServers:             []string{"1.1.1.1"},
		Hostname:               "apphost",
		StopTimeout:            new(int32(7)),
		LinuxParameters: &shapes.LinuxParameters{
			Capabilities:       &shapes.KernelCapabilities{Add: []string{"NET_ADMIN"}, Drop: []string{"MKNOD"}},
			Devices:            []shapes.Device{{HostPath: "/dev/fuse", ContainerPath: "/dev/fuse", Permissions: []string{"read", "write"}}},
			InitProcessEnabled: new(true),
			Tmpfs:              []shapes.Tmpfs{{ContainerPath: "/run", Size: new(int32(64)), MountOptions: []string{"noexec"}}},
			SharedMemorySize:   new(int32(128)),
		},
	}
	side := shapes.ContainerDefinition{Name: "side", Image: "side", VolumesFrom: []shapes.VolumeFrom{{SourceContainer: "app", ReadOnly: new(true)}}}
	task := protocol.Task{Arn: "arn:aws:ecs:us-east-1:1:task/c/abcdef0123456789abcd"}
	def := shapes.TaskDefinition{Family: "web", Revision: new(int32(7)), Memory: "1024", PidMode: "task", IpcMode: "task",
		ContainerDefinitions: []shapes.ContainerDefinition{full, side}}
	cfg := &Config{Cluster: "cl", ContainerInstanceArn: "inst", StopTimeout: 30 * time.Second, ExtraHosts: []string{"daemon:169.254.172.2"},
		MetadataURI: func(arn, c string) string { return "http://md/" + c }}
	volumes := map[string]string{"data": "/host/data", "scratch": "/v/tasks/x/scratch"}

	got := buildSpec(specInput{cfg: cfg, task: &task, def: &def, index: 0, networkMode: "bridge", volumes: volumes, cpuShares: 512})
	want := runtime.ContainerSpec{
		Name:  "capstan-web-7-app-23456789abcd",
		Image: "repo/app:1",
		Labels: map[string]string{"x": "y", LabelTaskArn: task.Arn, LabelContainerName: "app", LabelCluster: "cl",
			LabelInstance: "inst", LabelTaskFamily: "web", LabelTaskRevision: "7"},
		Entrypoint:        []string{"/bin/sh", "-c"},
		Cmd:               []string{"run"},
		Env:               []string{"A=1", "ECS_CONTAINER_METADATA_URI_V4=http://md/app", "ECS_CONTAINER_METADATA_URI=http://md/app"},
		WorkingDir:        "/work",
		User:              "1000:1000",
		Hostname:          "apphost",
		CPUShares:         512,
		MemoryLimit:       256 << 20,
		MemoryReservation: 128 << 20,
		NetworkMode:       "bridge",
		Ports:             []runtime.PortBinding{{ContainerPort: 80, Protocol: "tcp"}, {ContainerPort: 53, HostPort: 5353, Protocol: "udp"}},
		ExtraHosts:        []string{"db:10.0.0.1", "daemon:169.254.172.2"},
		DNS:               []string{"1.1.1.1"},
		Mounts:            []runtime.Mount{{Source: "/host/data", Target: "/data", ReadOnly: true}, {Source: "/v/tasks/x/scratch", Target: "/tmp/s"}},
		Tmpfs:             []runtime.Tmpfs{{Target: "/run", SizeBytes: 64 << 20, Options: []string{"noexec"}}},
		Privileged:        true,
		CapAdd:            []string{"NET_ADMIN"},
		CapDrop:           []string{"MKNOD"},
		Devices:           []runtime.Device{{HostPath: "/dev/fuse", ContainerPath: "/dev/fuse", Permissions: "rw"}},
		Init:              true,
		ReadonlyRootfs:    true,
		Ulimits:           []runtime.Ulimit{{Name: "nofile", Soft: 1024, Hard: 4096}},
		Sysctls:           map[string]string{"net.core.somaxconn": "1024"},
		PidMode:           "",
		IpcMode:           "shareable",
		ShmSizeBytes:      128 << 20,
		Healthcheck:       &runtime.Healthcheck{Test: []string{"CMD-SHELL", "true"}, Interval: 5 * time.Second, Timeout: 2 * time.Second, Retries: 3, StartPeriod: time.Second},
		LogDriver:         "json-file",
		LogOptions:        map[string]string{"max-size": "10m", "max-file": LogMaxFile},
		StopTimeout:       7 * time.Second,
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("spec\n%+v\nwant\n%+v", got, want)
	}

	// The second container joins the holder's namespaces, takes the task
	// memory as its limit, and gets app's mounts read-only.
	got = buildSpec(specInput{cfg: cfg, task: &task, def: &def, index: 1, networkMode: "bridge", volumes: volumes, cpuShares: 2, holderID: "abc",
		linkHosts: []string{"app:172.17.0.2"}})
	if got.PidMode != "container:abc" || got.IpcMode != "container:abc" || got.MemoryLimit != 1024<<20 || got.StopTimeout != 30*time.Second {
		t.Errorf("side spec %+v", got)
	}
	if !reflect.DeepEqual(got.Mounts, []runtime.Mount{{Source: "/host/data", Target: "/data", ReadOnly: true}, {Source: "/v/tasks/x/scratch", Target: "/tmp/s", ReadOnly: true}}) {
		t.Errorf("volumesFrom mounts %+v", got.Mounts)
	}
	if !slices.Equal(got.ExtraHosts, []string{"app:172.17.0.2", "daemon:169.254.172.2"}) {
		t.Errorf("extra hosts %v", got.ExtraHosts)
	}

	// Host mode publishes nothing and sets no hostname; a joined network
	// namespace takes no host entries.
	got = buildSpec(specInput{cfg: cfg, task: &task, def: &def, index: 0, networkMode: "host", volumes: volumes})
	if got.Ports != nil || got.Hostname != "" || len(got.ExtraHosts) != 2 {
		t.Errorf("host mode %+v", got)
	}
	got = buildSpec(specInput{cfg: cfg, task: &task, def: &def, index: 0, networkMode: "container:daemonns", volumes: volumes})
	if got.Ports != nil || got.ExtraHosts != nil {
		t.Errorf("joined mode %+v", got)
	}

	// On the instance's own network, bridge mode keeps its ports and
	// hostname; other modes are not moved there.
	cfg.BridgeNetwork = "capstan-inst"
	got = buildSpec(specInput{cfg: cfg, task: &task, def: &def, index: 0, networkMode: "bridge", volumes: volumes})
	if got.NetworkMode != "capstan-inst" || len(got.Ports) != 2 || got.Hostname != "apphost" {
		t.Errorf("bridge on the instance network %+v", got)
	}
	for _, mode := range []string{"host", "none", "container:daemonns"} {
		if got := buildSpec(specInput{cfg: cfg, task: &task, def: &def, index: 0, networkMode: mode, volumes: volumes}); got.NetworkMode != mode {
			t.Errorf("%s moved to %s", mode, got.NetworkMode)
		}
	}
}

func TestNetworkModes(t *testing.T) {
	tests := []struct {
		mode, daemon, want string
		err                bool
	}{
		{"", "", "bridge", false},
		{"bridge", "", "bridge", false},
		{"host", "", "host", false},
		{"none", "", "none", false},
		{"daemon", "", "host", false},
		{"daemon", "container:ns", "container:ns", false},
		{"awsvpc", "", "awsvpc", false}, // in its namespace when there is a TaskNetwork
		{"nat", "", "", true},
	}
	for _, tt := range tests {
		got, err := dockerNetworkMode(tt.mode, tt.daemon)
		if got != tt.want || (err != nil) != tt.err {
			t.Errorf("%q/%q: %q, %v", tt.mode, tt.daemon, got, err)
		}
	}
}

func TestNamespaceModes(t *testing.T) {
	tests := []struct{ mode, holder, holderMode, want string }{
		{"", "", "", ""},
		{"host", "x", "", "host"},
		{"none", "", "", "none"},
		{"shared", "", "", "host"},
		{"task", "", "shareable", "shareable"},
		{"task", "abc", "shareable", "container:abc"},
	}
	for _, tt := range tests {
		if got := namespaceMode(tt.mode, tt.holder, tt.holderMode); got != tt.want {
			t.Errorf("%+v: got %q", tt, got)
		}
	}
}

func TestVolumePaths(t *testing.T) {
	def := shapes.TaskDefinition{Volumes: []shapes.Volume{
		{Name: "logs", Host: &shapes.HostVolumeProperties{SourcePath: "/var/log"}},
		{Name: "scratch"},
		{Name: "empty", Host: &shapes.HostVolumeProperties{}},
		{Name: "cache", DockerVolumeConfiguration: &shapes.DockerVolumeConfiguration{Scope: "task"}},
		{Name: "shared", DockerVolumeConfiguration: &shapes.DockerVolumeConfiguration{Scope: "shared"}},
	}}
	got := volumePaths(&def, "arn:aws:ecs:r:1:task/c/abc", "/v")
	want := map[string]string{
		"logs":    "/var/log",
		"scratch": "/v/tasks/abc/scratch",
		"empty":   "/v/tasks/abc/empty",
		"cache":   "/v/tasks/abc/cache",
		"shared":  "/v/shared/shared",
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %v", got)
	}
}

func TestContainerName(t *testing.T) {
	def := shapes.TaskDefinition{Family: "my_app", Revision: new(int32(12))}
	tests := []struct{ arn, want string }{
		{"arn:aws:ecs:r:1:task/c/0123456789abcdef0123456789abcdef", "capstan-my_app-12-web-456789abcdef"},
		{"arn:aws:ecs:r:1:task/c/short", "capstan-my_app-12-web-short"},
		{"weird id!", "capstan-my_app-12-web-weird-id-"},
	}
	for _, tt := range tests {
		if got := containerName(&def, tt.arn, "web"); got != tt.want {
			t.Errorf("%s: %s, want %s", tt.arn, got, tt.want)
		}
	}
}

// TestLogConfig: output is rotated unless the definition chose a driver
// that does not write files here, and the definition's own limits win.
func TestLogConfig(t *testing.T) {
	bounded := map[string]string{"max-size": LogMaxSize, "max-file": LogMaxFile}
	for _, c := range []struct {
		name   string
		lc     *shapes.LogConfiguration
		driver string
		opts   map[string]string
	}{
		{"none given", nil, "json-file", bounded},
		{"json-file without limits", &shapes.LogConfiguration{LogDriver: "json-file"}, "json-file", bounded},
		{"local with its own size", &shapes.LogConfiguration{LogDriver: "local", Options: map[string]string{"max-size": "1m"}}, "local",
			map[string]string{"max-size": "1m", "max-file": LogMaxFile}},
		{"none", &shapes.LogConfiguration{LogDriver: "none"}, "none", nil},
		{"syslog keeps its options", &shapes.LogConfiguration{LogDriver: "syslog", Options: map[string]string{"tag": "x"}}, "syslog",
			map[string]string{"tag": "x"}},
	} {
		d, o := logConfig(c.lc)
		if d != c.driver || !reflect.DeepEqual(o, c.opts) {
			t.Errorf("%s: %s %v, want %s %v", c.name, d, o, c.driver, c.opts)
		}
	}
	lc := &shapes.LogConfiguration{LogDriver: "json-file", Options: map[string]string{"labels": "a"}}
	logConfig(lc)
	if len(lc.Options) != 1 {
		t.Errorf("the definition's options were changed: %v", lc.Options)
	}
}
