package docker

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/events"
	"github.com/moby/moby/api/types/network"

	"github.com/capstanhq/capstan/internal/runtime"
)

func TestCreateOptions(t *testing.T) {
	s := runtime.ContainerSpec{
		Name:  "web",
		Image: "busybox",
		Ports: []runtime.PortBinding{
			{ContainerPort: 80},
			{ContainerPort: 80, HostPort: 8080, HostIP: "127.0.0.1"},
			{ContainerPort: 53, HostPort: 5353, Protocol: "UDP"},
		},
		DNS:         []string{"10.0.0.2"},
		Mounts:      []runtime.Mount{{Source: "/a", Target: "/b", ReadOnly: true}, {Source: "/c", Target: "/d"}},
		Tmpfs:       []runtime.Tmpfs{{Target: "/t", SizeBytes: 4096, Options: []string{"noexec", "mode=1777"}}, {Target: "/u"}},
		Devices:     []runtime.Device{{HostPath: "/dev/fuse"}},
		Healthcheck: &runtime.Healthcheck{Test: []string{"CMD-SHELL", "curl", "-f", "localhost"}, Interval: time.Second, Retries: 2},
		StopTimeout: 2500 * time.Millisecond,
	}
	o, err := createOptions(s)
	if err != nil {
		t.Fatal(err)
	}
	tcp80, udp53 := network.MustParsePort("80/tcp"), network.MustParsePort("53/udp")
	cfg, hc := o.Config, o.HostConfig
	checks := []struct {
		name      string
		got, want string
	}{
		{"name", o.Name, "web"},
		{"exposed", fmt.Sprint(len(cfg.ExposedPorts)), "2"},
		{"80 bindings", fmt.Sprint(hc.PortBindings[tcp80]), "[{invalid IP } {127.0.0.1 8080}]"},
		{"53 bindings", fmt.Sprint(hc.PortBindings[udp53]), "[{invalid IP 5353}]"},
		{"dns", fmt.Sprint(hc.DNS), "[10.0.0.2]"},
		{"binds", fmt.Sprint(hc.Binds), "[/a:/b:ro /c:/d]"},
		{"tmpfs", fmt.Sprint(hc.Tmpfs), "map[/t:size=4096,noexec,mode=1777 /u:]"},
		{"devices", fmt.Sprint(hc.Devices), "[{/dev/fuse /dev/fuse rwm}]"},
		{"health test", fmt.Sprint(cfg.Healthcheck.Test), "[CMD-SHELL curl -f localhost]"},
		{"health retries", fmt.Sprint(cfg.Healthcheck.Retries), "2"},
		{"stop timeout", fmt.Sprint(*cfg.StopTimeout), "3"},
		{"init unset", fmt.Sprint(hc.Init), "<nil>"},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("%s = %s, want %s", c.name, c.got, c.want)
		}
	}
	if _, ok := cfg.ExposedPorts[udp53]; !ok {
		t.Error("udp port not exposed")
	}
}

func TestCreateOptionsRejects(t *testing.T) {
	base := func() runtime.ContainerSpec { return runtime.ContainerSpec{Image: "busybox"} }
	cases := []struct {
		name string
		edit func(*runtime.ContainerSpec)
		want string
	}{
		{"no image", func(s *runtime.ContainerSpec) { s.Image = "" }, "image"},
		{"port zero", func(s *runtime.ContainerSpec) { s.Ports = []runtime.PortBinding{{}} }, "ports[0]: container port"},
		{"host port", func(s *runtime.ContainerSpec) {
			s.Ports = []runtime.PortBinding{{ContainerPort: 1, HostPort: 70000}}
		}, "ports[0]: host port"},
		{"protocol", func(s *runtime.ContainerSpec) {
			s.Ports = []runtime.PortBinding{{ContainerPort: 1, Protocol: "icmp"}}
		}, "ports[0]: protocol"},
		{"host ip", func(s *runtime.ContainerSpec) {
			s.Ports = []runtime.PortBinding{{ContainerPort: 1, HostIP: "localhost"}}
		}, "ports[0]: host IP"},
		{"dns", func(s *runtime.ContainerSpec) { s.DNS = []string{"1.1.1.1", "dns.example"} }, "dns[1]"},
		{"mount colon", func(s *runtime.ContainerSpec) { s.Mounts = []runtime.Mount{{Source: "/a:b", Target: "/c"}} }, "mounts[0]"},
		{"mount empty", func(s *runtime.ContainerSpec) { s.Mounts = []runtime.Mount{{Target: "/c"}} }, "mounts[0]"},
		{"tmpfs", func(s *runtime.ContainerSpec) { s.Tmpfs = []runtime.Tmpfs{{}} }, "tmpfs[0]"},
		{"device", func(s *runtime.ContainerSpec) { s.Devices = []runtime.Device{{}} }, "devices[0]"},
		{"health form", func(s *runtime.ContainerSpec) {
			s.Healthcheck = &runtime.Healthcheck{Test: []string{"curl", "localhost"}}
		}, "healthcheck.test"},
		{"health empty cmd", func(s *runtime.ContainerSpec) {
			s.Healthcheck = &runtime.Healthcheck{Test: []string{"CMD"}}
		}, "healthcheck.test"},
	}
	for _, c := range cases {
		s := base()
		c.edit(&s)
		_, err := createOptions(s)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err = %v, want one mentioning %q", c.name, err, c.want)
		}
	}
}

func TestHealthForms(t *testing.T) {
	for _, c := range []struct{ in, want []string }{
		{nil, nil},
		{[]string{"NONE"}, []string{"NONE"}},
		{[]string{"CMD", "true"}, []string{"CMD", "true"}},
		{[]string{"CMD-SHELL", "exit 0"}, []string{"CMD-SHELL", "exit 0"}},
	} {
		h, err := healthConfig(&runtime.Healthcheck{Test: c.in})
		if err != nil || fmt.Sprint(h.Test) != fmt.Sprint(c.want) {
			t.Errorf("%q → %q %v, want %q", c.in, h.Test, err, c.want)
		}
	}
}

func TestToEvent(t *testing.T) {
	msg := func(action string, attrs map[string]string) events.Message {
		return events.Message{Type: events.ContainerEventType, Action: events.Action(action),
			Actor: events.Actor{ID: "c1", Attributes: attrs}, Time: 1, TimeNano: 1_500_000_000}
	}
	ev, ok := toEvent(msg("die", map[string]string{"exitCode": "137", "image": "busybox", "name": "x", "app": "web"}))
	if !ok || ev.Action != runtime.EventDie || ev.ExitCode != 137 || ev.ContainerID != "c1" ||
		fmt.Sprint(ev.Labels) != "map[app:web]" || !ev.Time.Equal(time.Unix(1, 500_000_000)) {
		t.Errorf("die → %+v %v", ev, ok)
	}
	ev, ok = toEvent(msg("health_status: unhealthy", nil))
	if !ok || ev.Action != runtime.EventHealth || ev.Health != runtime.HealthUnhealthy {
		t.Errorf("health → %+v %v", ev, ok)
	}
	for _, a := range []string{"exec_create: sh -c true", "attach", "health_status: running"} {
		if _, ok := toEvent(msg(a, nil)); ok {
			t.Errorf("%q passed on", a)
		}
	}
	if _, ok := toEvent(events.Message{Type: events.ImageEventType, Action: "delete"}); ok {
		t.Error("image event passed on")
	}
}

func TestFromStats(t *testing.T) {
	var s container.StatsResponse
	s.CPUStats.CPUUsage.TotalUsage = 10
	s.CPUStats.CPUUsage.PercpuUsage = []uint64{5, 5}
	s.MemoryStats = container.MemoryStats{Usage: 1000, Limit: 4000, Stats: map[string]uint64{"total_inactive_file": 300}}
	s.Networks = map[string]container.NetworkStats{"eth0": {RxBytes: 1, TxBytes: 2}, "eth1": {RxBytes: 10, TxBytes: 20}}
	s.BlkioStats.IoServiceBytesRecursive = []container.BlkioStatEntry{{Op: "Read", Value: 7}, {Op: "write", Value: 9}, {Op: "Total", Value: 16}}
	s.PidsStats.Current = 3
	got := fromStats(s)
	want := runtime.Stats{CPUTotalNanos: 10, OnlineCPUs: 2, MemoryUsageBytes: 700, MemoryLimitBytes: 4000,
		NetworkRxBytes: 11, NetworkTxBytes: 22, BlockReadBytes: 7, BlockWriteBytes: 9, Pids: 3}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("stats = %+v\nwant    %+v", got, want)
	}
	if m := memoryUsage(container.MemoryStats{Usage: 100, Stats: map[string]uint64{"inactive_file": 40}}); m != 60 {
		t.Errorf("cgroup v2 usage = %d, want 60", m)
	}
}
