package cpus

import (
	"runtime"
	"testing"
)

func TestProcessorsAboveTheCores(t *testing.T) {
	was := runtime.GOMAXPROCS(0)
	t.Cleanup(func() { runtime.GOMAXPROCS(was) })
	t.Setenv("GOMAXPROCS", "")
	cores := min(startProcs, runtime.NumCPU())

	if got := SetProcs(0); got != ProcsPerCore*cores || runtime.GOMAXPROCS(0) != got {
		t.Fatalf("SetProcs(0) on %d cores: returned %d, GOMAXPROCS %d, want %d", cores, got, runtime.GOMAXPROCS(0), ProcsPerCore*cores)
	}
	// Set twice, still per core: the cores are what Go started with.
	if got := SetProcs(0); got != ProcsPerCore*cores {
		t.Fatalf("SetProcs(0) again: %d, want %d", got, ProcsPerCore*cores)
	}
	if Cores() != cores || PerCore() != ProcsPerCore {
		t.Fatalf("Cores %d PerCore %d at GOMAXPROCS %d, want %d and %d", Cores(), PerCore(), runtime.GOMAXPROCS(0), cores, ProcsPerCore)
	}
	if got := SetProcs(5 * cores); got != 5*cores || PerCore() != 5 {
		t.Fatalf("SetProcs(%d): returned %d, PerCore %d", 5*cores, got, PerCore())
	}
	runtime.GOMAXPROCS(1)
	if PerCore() != 1 {
		t.Fatalf("PerCore at one processor: %d, want 1", PerCore())
	}
	// An operator's GOMAXPROCS wins: the runtime has applied it already.
	t.Setenv("GOMAXPROCS", "3")
	if got := SetProcs(0); got != 1 || runtime.GOMAXPROCS(0) != 1 {
		t.Fatalf("with GOMAXPROCS set: returned %d, GOMAXPROCS %d, want 1 left alone", got, runtime.GOMAXPROCS(0))
	}
}
