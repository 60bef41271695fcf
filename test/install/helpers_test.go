package install

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/capstanhq/capstan/internal/testenv"
)

// testVersion is stamped into the agent the tests build, so they can see it
// reported by the binary and by the server; upgradeVersion is the agent
// TestAgentImage upgrades to.
const (
	testVersion    = "0.9.1-installtest"
	upgradeVersion = "0.9.2-installtest"
)

// repoRoot is the module root, two levels above this package.
func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	return root
}

var (
	agentMu   sync.Mutex
	agentBins = map[string]string{}
)

// agentBinary builds cmd/capstan-agent once per version and test process,
// statically and with the version stamped in, as the packaging docs say to.
func agentBinary(t *testing.T, version string) string {
	t.Helper()
	agentMu.Lock()
	defer agentMu.Unlock()
	if p, ok := agentBins[version]; ok {
		return p
	}
	dir, err := os.MkdirTemp("", "capstan-install-test")
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, "capstan-agent")
	if _, err := run(t, repoRoot(t), []string{"CGO_ENABLED=0"}, "go", "build", "-trimpath",
		"-ldflags", "-X github.com/capstanhq/capstan/internal/agent.Version="+version, "-o", p, "./cmd/capstan-agent"); err != nil {
		t.Fatal(err)
	}
	agentBins[version] = p
	return p
}

// run runs a command in dir and returns its stdout; the error carries stderr.
func run(t *testing.T, dir string, env []string, name string, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return out.String(), &cmdError{cmd: name + " " + strings.Join(args, " "), err: err, stderr: errb.String() + out.String()}
	}
	return out.String(), nil
}

type cmdError struct {
	cmd, stderr string
	err         error
}

func (e *cmdError) Error() string { return e.cmd + ": " + e.err.Error() + "\n" + e.stderr }

// docker runs the Docker CLI and fails the test on error.
func docker(t *testing.T, args ...string) string {
	t.Helper()
	out, err := run(t, "", nil, "docker", args...)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(out)
}

// needDockerCLI fails in CI and skips elsewhere when the docker command is
// missing (the engine itself is checked by testenv.RequireDocker).
func needDockerCLI(t *testing.T) {
	t.Helper()
	testenv.RequireBinary(t, "docker-ce-cli or docker.io", "docker")
}
