package local

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestExitedInstanceLogLevel: an agent that stopped because its instance
// was retired is an expected end (info); one that died otherwise is a
// warning. Either way the instance is no longer Known once terminated.
func TestExitedInstanceLogLevel(t *testing.T) {
	// A pid that ran and is gone: a finished child's.
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	dead := strconv.Itoa(cmd.Process.Pid)
	for _, c := range []struct{ last, want string }{
		{`{"level":"INFO","msg":"this managed instance was deregistered and is being retired; stopping"}`, "level=INFO"},
		{"panic: runtime error: index out of range", "level=WARN"},
	} {
		var logs bytes.Buffer
		p, err := New("/bin/true", t.TempDir(), nil, slog.New(slog.NewTextHandler(&logs, nil)))
		if err != nil {
			t.Fatal(err)
		}
		dir := filepath.Join(p.Dir, "i-1")
		os.MkdirAll(dir, 0o700)
		os.WriteFile(filepath.Join(dir, "pid"), []byte(dead), 0o600)
		os.WriteFile(filepath.Join(dir, "agent.log"), []byte("started\n"+c.last+"\n"), 0o600)
		if !p.Known("i-1") {
			t.Fatal("an instance with a directory is not Known")
		}
		if err := p.Terminate(context.Background(), "i-1"); err != nil {
			t.Fatal(err)
		}
		if line := logs.String(); !strings.Contains(line, c.want+` msg="local instance had exited"`) {
			t.Errorf("last words %q: want %s, logged:\n%s", c.last, c.want, line)
		}
		if p.Known("i-1") {
			t.Error("a terminated instance is still Known")
		}
	}
}
