package e2e

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Issue 46, point 7: the administrator secret was printed on every start.
// It is printed when the credential is created; a later start names the
// key and the file only. A short CAPSTAN_SECRET_ACCESS_KEY stops the
// server with the variable and the rule named.
func TestAdminSecretShownOnce(t *testing.T) {
	dir := t.TempDir()
	start := func(want string) string {
		t.Helper()
		cmd := exec.Command(capstanBinary(t), "server", "--listen", freeAddr(t), "--data-dir", dir, "--provisioner", "none")
		cmd.Env = os.Environ()
		var log syncBuffer
		cmd.Stdout, cmd.Stderr = &log, &log
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		defer func() { cmd.Process.Kill(); cmd.Wait() }()
		for deadline := time.Now().Add(60 * time.Second); !strings.Contains(log.String(), want); {
			if time.Now().After(deadline) {
				t.Fatalf("no %q printed:\n%s", want, log.String())
			}
			time.Sleep(100 * time.Millisecond)
		}
		time.Sleep(200 * time.Millisecond) // anything printed after it
		return log.String()
	}
	out := start("AWS_SECRET_ACCESS_KEY=")
	b, err := os.ReadFile(filepath.Join(dir, "admin-credentials.json"))
	if err != nil {
		t.Fatal(err)
	}
	var f struct{ AccessKeyID, SecretAccessKey string }
	if err := json.Unmarshal(b, &f); err != nil || !strings.Contains(out, "AWS_SECRET_ACCESS_KEY="+f.SecretAccessKey) {
		t.Fatalf("first start did not print the secret (%v):\n%s", err, out)
	}

	out = start("its secret kept in")
	if strings.Contains(out, f.SecretAccessKey) || !strings.Contains(out, f.AccessKeyID) || !strings.Contains(out, filepath.Join(dir, "admin-credentials.json")) {
		t.Fatalf("second start printed the secret, or not the key and the file:\n%s", out)
	}

	bad := exec.Command(capstanBinary(t), "server", "--listen", freeAddr(t), "--data-dir", t.TempDir(), "--provisioner", "none")
	bad.Env = append(os.Environ(), "CAPSTAN_ACCESS_KEY_ID=AKIDSHORT", "CAPSTAN_SECRET_ACCESS_KEY=x")
	msg, err := bad.CombinedOutput()
	if err == nil || !strings.Contains(string(msg), "CAPSTAN_SECRET_ACCESS_KEY must be at least 16 characters long") {
		t.Fatalf("1-character secret: %v\n%s", err, msg)
	}
}
