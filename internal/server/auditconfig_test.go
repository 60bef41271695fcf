package server

import (
	"strings"
	"testing"
	"time"

	"github.com/capstanhq/capstan/internal/audit"
	"github.com/capstanhq/capstan/internal/fleet"
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

// Event retention defaults to fleet's, and a retention under a minute or a
// negative limit is refused naming the flag.
func TestEventConfig(t *testing.T) {
	c := Config{Listen: "127.0.0.1:0", DataDir: t.TempDir()}
	if err := c.Validate(); err != nil || c.EventRetention != fleet.DefaultEventRetention {
		t.Fatalf("default: %v, %s", err, c.EventRetention)
	}
	c.EventRetention = 30 * time.Second
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "--event-retention must be at least 1m0s") {
		t.Fatalf("30s: %v", err)
	}
	c.EventRetention, c.EventLimit = 10*time.Minute, -1
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "--event-limit must not be negative") {
		t.Fatalf("limit -1: %v", err)
	}
}
