package server

import (
	"strings"
	"testing"
	"time"

	"github.com/capstanhq/capstan/internal/fleet"
)

// Stopped tasks are kept an hour unless told otherwise, and never for less
// than MinStoppedRetention; the error names the flag.
func TestStoppedRetentionConfig(t *testing.T) {
	base := func() Config { return Config{Listen: "127.0.0.1:0", DataDir: t.TempDir(), Provisioner: "none"} }
	c := base()
	if err := c.Validate(); err != nil || c.StoppedRetention != fleet.DefaultStoppedRetention {
		t.Fatalf("default: %s (%v), want %s", c.StoppedRetention, err, fleet.DefaultStoppedRetention)
	}
	c = base()
	c.StoppedRetention = 30 * time.Second
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "--stopped-task-retention must be at least 1m0s") {
		t.Fatalf("30s: %v, want the flag named with its minimum", err)
	}
	c = base()
	c.StoppedRetention = 24 * time.Hour
	if err := c.Validate(); err != nil || c.StoppedRetention != 24*time.Hour {
		t.Fatalf("24h: %s (%v)", c.StoppedRetention, err)
	}
}
