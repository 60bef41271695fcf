package engine

import (
	"encoding/json"
	"os/exec"
	"slices"
	"testing"

	"github.com/capstanhq/capstan/internal/api/shapes"
	"github.com/capstanhq/capstan/internal/protocol"
)

// hostConfig is what Docker itself says of a container's host access.
type hostConfig struct {
	HostConfig struct {
		Privileged  bool
		NetworkMode string
		PidMode     string
		CapAdd      []string
	}
	Mounts []struct{ Source, Destination string }
}

func dockerInspect(t *testing.T, id string) hostConfig {
	t.Helper()
	out, err := exec.Command("docker", "inspect", id).Output()
	if err != nil {
		t.Fatalf("docker inspect %s: %v", id, err)
	}
	var v []hostConfig
	if err := json.Unmarshal(out, &v); err != nil || len(v) != 1 {
		t.Fatalf("docker inspect %s: %v %s", id, err, out)
	}
	return v[0]
}

// An application task whose definition asks for host access runs without
// it unless the server granted it; the granted twin shows the inspection
// sees host access where there is some.
func TestDockerHostAccessNeedsTheGrant(t *testing.T) {
	d := newDockerEnv(t)
	h := d.start(t, Config{VolumeDir: t.TempDir()})
	hostTask := func(granted bool) protocol.Task {
		c := d.ctr("app")
		if !granted { // this machine's Docker may refuse privileged containers, so the twin does without
			c.Privileged = new(true)
			c.LinuxParameters.Capabilities = &shapes.KernelCapabilities{Add: []string{"SYS_ADMIN"}}
		}
		c.MountPoints = []shapes.MountPoint{{SourceVolume: "root", ContainerPath: "/host"}}
		task := uniqueTask(t, c)
		task.Definition.NetworkMode, task.Definition.PidMode = "host", "host"
		task.Definition.Volumes = []shapes.Volume{{Name: "root", Host: &shapes.HostVolumeProperties{SourcePath: "/"}}}
		task.HostAccess = granted
		return task
	}
	denied, granted := hostTask(false), hostTask(true)
	h.e.SetDesired([]protocol.Task{denied, granted})

	got := dockerInspect(t, containerOf(h.waitStatus(denied.Arn, StatusRunning, dockerWait), "app").RuntimeID)
	hc := got.HostConfig
	if hc.Privileged || hc.NetworkMode == "host" || hc.PidMode == "host" || slices.Contains(hc.CapAdd, "SYS_ADMIN") || slices.Contains(hc.CapAdd, "CAP_SYS_ADMIN") {
		t.Errorf("ungranted task got host access: %+v", hc)
	}
	for _, m := range got.Mounts {
		if m.Source == "/" {
			t.Errorf("ungranted task mounts the host's / at %s", m.Destination)
		}
	}

	got = dockerInspect(t, containerOf(h.waitStatus(granted.Arn, StatusRunning, dockerWait), "app").RuntimeID)
	if hc := got.HostConfig; hc.NetworkMode != "host" || hc.PidMode != "host" {
		t.Errorf("granted task lost its host access: %+v", hc)
	}
	if !slices.ContainsFunc(got.Mounts, func(m struct{ Source, Destination string }) bool { return m.Source == "/" }) {
		t.Errorf("granted task does not mount the host's /: %+v", got.Mounts)
	}
}
