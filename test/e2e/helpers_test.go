package e2e

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"testing"
	"time"
)

// needAWS returns the path of the AWS CLI. Without it the test fails in CI
// and is skipped elsewhere.
func needAWS(t *testing.T) string {
	t.Helper()
	path, err := exec.LookPath("aws")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("the AWS CLI is required in CI: %v", err)
		}
		t.Skipf("aws not on PATH: %v", err)
	}
	return path
}

// runAWS runs the AWS CLI with env and returns its stdout, stderr and error.
func runAWS(t *testing.T, env []string, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, needAWS(t), args...)
	cmd.Env = env
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err = cmd.Run()
	return out.String(), errb.String(), err
}
