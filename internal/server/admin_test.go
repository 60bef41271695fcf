package server

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Issue 46, point 7: a 1-character administrator secret was taken. The
// configured secret needs MinSecretLength characters, and the error names
// the variable and the rule.
func TestAdminSecretLength(t *testing.T) {
	c := Config{Listen: "127.0.0.1:0", DataDir: t.TempDir(), Provisioner: "none", AdminKeyID: "AKIDSHORT", AdminSecret: "x"}
	err := c.Validate()
	if err == nil || err.Error() != "CAPSTAN_SECRET_ACCESS_KEY must be at least 16 characters long, got 1" {
		t.Fatalf("1-character secret: %v", err)
	}
	c.AdminSecret = strings.Repeat("s", MinSecretLength)
	if err := c.Validate(); err != nil {
		t.Fatalf("16-character secret: %v", err)
	}
}

// The credential is created once and reported as created only then; a
// kept file with a short secret is refused.
func TestAdminCredentialCreatedOnce(t *testing.T) {
	cfg := Config{DataDir: t.TempDir()}
	first, file, created, err := adminCredential(cfg)
	if err != nil || !created || file != filepath.Join(cfg.DataDir, "admin-credentials.json") || len(first.SecretAccessKey) != 40 {
		t.Fatalf("first start: %v %q created=%v %v", first, file, created, err)
	}
	again, file2, created, err := adminCredential(cfg)
	if err != nil || created || file2 != file || again.SecretAccessKey != first.SecretAccessKey {
		t.Fatalf("second start: %v %q created=%v %v", again, file2, created, err)
	}
	if _, file, created, _ := adminCredential(Config{DataDir: cfg.DataDir, AdminKeyID: "AKIDENV", AdminSecret: "env-secret-0123456789"}); file != "" || created {
		t.Fatalf("from the environment: file %q, created %v", file, created)
	}
	os.WriteFile(file, []byte(`{"accessKeyId":"CSAKX","secretAccessKey":"short"}`), 0o600)
	if _, _, _, err := adminCredential(cfg); err == nil || !strings.Contains(err.Error(), "shorter than 16 characters") {
		t.Fatalf("short secret in the file: %v", err)
	}
}
