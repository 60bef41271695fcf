package taskdef

import (
	"encoding/json"
	"slices"
	"testing"

	"github.com/capstanhq/capstan/internal/api/shapes"
)

func TestWithoutHostAccess(t *testing.T) {
	yes := true
	td := shapes.TaskDefinition{
		NetworkMode: "host", PidMode: "host", IpcMode: "host",
		Volumes: []shapes.Volume{{Name: "root", Host: &shapes.HostVolumeProperties{SourcePath: "/"}}, {Name: "scratch"}},
		ContainerDefinitions: []shapes.ContainerDefinition{{
			Name: "a", Privileged: &yes,
			SystemControls:  []shapes.SystemControl{{Namespace: "kernel.domainname", Value: "x"}, {Namespace: "net.core.somaxconn", Value: "1024"}},
			LinuxParameters: &shapes.LinuxParameters{Capabilities: &shapes.KernelCapabilities{Add: []string{"SYS_ADMIN"}, Drop: []string{"NET_RAW"}}, Devices: []shapes.Device{{HostPath: "/dev/kmsg"}}},
		}, {Name: "b"}},
	}
	before, _ := json.Marshal(td)
	out, removed := WithoutHostAccess(td)
	want := []string{"networkMode:host", "pidMode:host", "ipcMode:host", "hostVolume", "privileged", "sysctls", "capabilities", "devices"}
	if !slices.Equal(removed, want) {
		t.Errorf("removed %v, want %v", removed, want)
	}
	c := out.ContainerDefinitions[0]
	switch {
	case out.NetworkMode != "bridge" || out.PidMode != "" || out.IpcMode != "":
		t.Errorf("modes %q %q %q", out.NetworkMode, out.PidMode, out.IpcMode)
	case out.Volumes[0].Host != nil || out.Volumes[0].Name != "root":
		t.Errorf("host volume kept: %+v", out.Volumes[0])
	case c.Privileged != nil || len(c.SystemControls) != 1 || c.SystemControls[0].Namespace != "net.core.somaxconn" || len(c.LinuxParameters.Capabilities.Add) != 0 || c.LinuxParameters.Devices != nil:
		t.Errorf("container kept host access: %+v", c)
	case !slices.Equal(c.LinuxParameters.Capabilities.Drop, []string{"NET_RAW"}):
		t.Errorf("dropped capabilities lost: %v", c.LinuxParameters.Capabilities.Drop)
	}
	// What is left asks for nothing.
	if kinds := HostAccessKinds(out); len(kinds) != 0 {
		t.Errorf("still asks for %v", kinds)
	}
	// The caller's definition is untouched (the agent keeps it as sent).
	if after, _ := json.Marshal(td); string(after) != string(before) {
		t.Errorf("input changed:\n%s\n%s", before, after)
	}
	// A definition asking for nothing comes back equal, nothing named.
	plain := shapes.TaskDefinition{NetworkMode: "bridge", ContainerDefinitions: []shapes.ContainerDefinition{{Name: "a"}}}
	got, removed := WithoutHostAccess(plain)
	a, _ := json.Marshal(plain)
	b, _ := json.Marshal(got)
	if len(removed) != 0 || string(a) != string(b) {
		t.Errorf("plain definition changed: %v %s", removed, b)
	}
}
