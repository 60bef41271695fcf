package server

import (
	"strings"
	"testing"
	"time"

	"github.com/capstanhq/capstan/internal/audit"
)

// The audit retention defaults, and one under a minute is refused naming
// the flag.
func TestAuditConfig(t *testing.T) {
	c := Config{Listen: "127.0.0.1:0", DataDir: t.TempDir()}
	if err := c.Validate(); err != nil || c.AuditRetention != audit.DefaultRetention {
		t.Fatalf("default: %v, %s", err, c.AuditRetention)
	}
	c.AuditRetention = 30 * time.Second
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "--audit-retention must be at least 1m0s") {
		t.Fatalf("30s: %v", err)
	}
	c.AuditRetention, c.AuditLimit = time.Hour, -1
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "--audit-limit must not be negative") {
		t.Fatalf("limit -1: %v", err)
	}
}
