package main

import (
	"strings"
	"testing"
)

// The top-level help names the commands users look for, events included.
func TestUsageNamesTheNouns(t *testing.T) {
	for _, want := range []string{"capstan events", "service", "task,", "instance", "daemon,"} {
		if !strings.Contains(usage, want) {
			t.Errorf("usage lacks %q:\n%s", want, usage)
		}
	}
}
