package taskdef

import (
	"slices"
	"testing"

	"github.com/capstanhq/capstan/internal/api/shapes"
)

// fargateTask is a definition as users bring it for AWS Fargate.
func fargateTask() *Req {
	return &Req{
		Family:                  "web",
		NetworkMode:             "awsvpc",
		RequiresCompatibilities: []string{"FARGATE"},
		Cpu:                     "256",
		Memory:                  "512",
		EphemeralStorage:        &shapes.EphemeralStorage{SizeInGiB: n(30)},
		RuntimePlatform:         &shapes.RuntimePlatform{OperatingSystemFamily: "LINUX", CpuArchitecture: "X86_64"},
		ContainerDefinitions: []shapes.ContainerDefinition{{
			Name:         "app",
			Image:        "nginx:1.27",
			PortMappings: []shapes.PortMapping{{ContainerPort: n(80)}, {ContainerPort: n(443), HostPort: n(443)}},
		}},
	}
}

func TestCheckTaskAcceptsFargate(t *testing.T) {
	r := fargateTask()
	if v := r.Check(""); v != nil {
		t.Fatalf("model check: %v", v)
	}
	if err := CheckTask(r); err != nil {
		t.Fatalf("CheckTask: %v", err)
	}
	pms := r.ContainerDefinitions[0].PortMappings
	eq(t, "hostPort filled from containerPort", *pms[0].HostPort, 80)
	eq(t, "hostPort kept", *pms[1].HostPort, 443)
	eq(t, "networkMode", r.NetworkMode, "awsvpc")

	// awsvpc without FARGATE, no task size: an EC2-style awsvpc definition.
	r = fargateTask()
	r.RequiresCompatibilities, r.Cpu, r.Memory, r.EphemeralStorage = nil, "", "", nil
	r.ContainerDefinitions[0].Memory = n(128)
	if err := CheckTask(r); err != nil {
		t.Fatalf("awsvpc without FARGATE: %v", err)
	}
}

func TestCheckTaskRejectsFargate(t *testing.T) {
	rows := []taskRow{
		{"bridge", func(r *Req) { r.NetworkMode = "bridge" }, clientError, "networkMode"},
		{"no task cpu", func(r *Req) { r.Cpu = "" }, clientError, "cpu"},
		{"no task memory", func(r *Req) { r.Memory = ""; r.ContainerDefinitions[0].Memory = n(256) }, clientError, "memory"},
		{"size Fargate lacks", func(r *Req) { r.Cpu, r.Memory = "256", "4096" }, clientError, "cpu, memory"},
		{"cpu Fargate lacks", func(r *Req) { r.Cpu, r.Memory = "384", "1024" }, clientError, "cpu, memory"},
		{"ephemeral storage too small", func(r *Req) { r.EphemeralStorage.SizeInGiB = n(10) }, invalid, "ephemeralStorage.sizeInGiB"},
		{"awsvpc host port differs", func(r *Req) {
			r.ContainerDefinitions[0].PortMappings[0].HostPort = n(8080)
		}, invalid, "containerDefinitions[0].portMappings[0].hostPort"},
		{"awsvpc port twice", func(r *Req) {
			r.ContainerDefinitions = append(r.ContainerDefinitions, shapes.ContainerDefinition{
				Name: "side", Image: "busybox", Essential: new(false),
				PortMappings: []shapes.PortMapping{{ContainerPort: n(80)}}})
		}, invalid, "containerDefinitions[1].portMappings[0].hostPort"},
		{"awsvpc links", func(r *Req) {
			r.ContainerDefinitions = append(r.ContainerDefinitions, shapes.ContainerDefinition{
				Name: "side", Image: "busybox", Essential: new(false), Links: []string{"app"}})
		}, invalid, "containerDefinitions[1].links[0]"},
		{"efs", func(r *Req) {
			r.Volumes = []shapes.Volume{{Name: "data", EfsVolumeConfiguration: &shapes.EFSVolumeConfiguration{FileSystemId: "fs-1"}}}
		}, notSupport, "volumes[0].efsVolumeConfiguration"},
		{"inference accelerators", func(r *Req) {
			r.InferenceAccelerators = []shapes.InferenceAccelerator{{DeviceName: "d", DeviceType: "eia2.medium"}}
		}, notSupport, "inferenceAccelerators"},
		{"ephemeral storage without FARGATE", func(r *Req) { r.RequiresCompatibilities = []string{"EC2"} }, notSupport, "ephemeralStorage"},
	}
	for _, row := range rows {
		t.Run(row.name, func(t *testing.T) {
			r := fargateTask()
			row.mutate(r)
			if v := r.Check(""); v != nil {
				t.Fatalf("model check fails first: %v", v)
			}
			assertFault(t, CheckTask(r), row.kind, row.field)
		})
	}
}

func TestFargateSize(t *testing.T) {
	for _, c := range []struct {
		cpu, mem int
		ok       bool
	}{
		{256, 512, true}, {256, 1024, true}, {256, 2048, true}, {256, 1536, false}, {256, 3072, false},
		{512, 1024, true}, {512, 4096, true}, {512, 512, false},
		{1024, 2048, true}, {1024, 8192, true}, {1024, 9216, false},
		{4096, 30720, true}, {4096, 31744, false},
		{8192, 20480, true}, {8192, 17408, false},
		{16384, 122880, true}, {16384, 36864, false},
		{128, 512, false},
	} {
		if got := FargateSize(c.cpu, c.mem); got != c.ok {
			t.Errorf("FargateSize(%d, %d) = %v, want %v", c.cpu, c.mem, got, c.ok)
		}
	}
}

func TestCompatibilities(t *testing.T) {
	base := []string{"EC2", "MANAGED_INSTANCES"}
	td := &shapes.TaskDefinition{NetworkMode: "awsvpc", Cpu: "256", Memory: "512"}
	if got := Compatibilities(base, td); !slices.Equal(got, []string{"EC2", "FARGATE", "MANAGED_INSTANCES"}) {
		t.Errorf("awsvpc 256/512: %v", got)
	}
	if got := Compatibilities([]string{"FARGATE"}, td); !slices.Equal(got, []string{"EC2", "FARGATE", "MANAGED_INSTANCES"}) {
		t.Errorf("awsvpc 256/512 requiring FARGATE: %v", got)
	}
	if !slices.Equal(base, []string{"EC2", "MANAGED_INSTANCES"}) {
		t.Errorf("base changed: %v", base)
	}
	for _, td := range []*shapes.TaskDefinition{
		{NetworkMode: "bridge", Cpu: "256", Memory: "512"},
		{NetworkMode: "awsvpc", Cpu: "256", Memory: "4096"},
		{NetworkMode: "awsvpc"},
	} {
		if got := Compatibilities(base, td); slices.Contains(got, "FARGATE") {
			t.Errorf("%s %s/%s: %v has FARGATE", td.NetworkMode, td.Cpu, td.Memory, got)
		}
	}
}
