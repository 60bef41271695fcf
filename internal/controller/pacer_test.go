package controller

import (
	"runtime"
	"testing"
	"time"

	"github.com/capstanhq/capstan/internal/cpus"
)

// Rests are counted per processor on a core: with twice the processors a
// pass's wall time no longer measures its share of the cores.
func TestSpacingCountsProcessorsPerCore(t *testing.T) {
	was := runtime.GOMAXPROCS(0)
	t.Cleanup(func() { runtime.GOMAXPROCS(was) })
	runtime.GOMAXPROCS(cpus.Cores())
	if got := Spacing(4, 10*time.Millisecond, time.Second); got != 40*time.Millisecond {
		t.Fatalf("one processor per core: %v, want 40ms", got)
	}
	runtime.GOMAXPROCS(2 * cpus.Cores())
	if got := Spacing(4, 10*time.Millisecond, time.Second); got != 80*time.Millisecond {
		t.Fatalf("two processors per core: %v, want 80ms", got)
	}
	if got := Spacing(4, time.Second, 3*time.Second); got != 3*time.Second {
		t.Fatalf("capped: %v, want 3s", got)
	}
}
