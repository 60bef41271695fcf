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

	if got := SetProcs(0); got != cores || runtime.GOMAXPROCS(0) != got {
		t.Fatalf("SetProcs(0) on %d cores: returned %d, GOMAXPROCS %d, want %d", cores, got, runtime.GOMAXPROCS(0), cores)
	}
	// Set twice, still per core: the cores are what Go started with.
	if got := SetProcs(0); got != cores {
		t.Fatalf("SetProcs(0) again: %d, want %d", got, cores)
	}
	if Cores() != cores || PerCore() != 1 {
		t.Fatalf("Cores %d PerCore %d at GOMAXPROCS %d, want %d and %d", Cores(), PerCore(), runtime.GOMAXPROCS(0), cores, 1)
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

func TestApplyChoosesPerCore(t *testing.T) {
	was := runtime.GOMAXPROCS(0)
	t.Cleanup(func() { runtime.GOMAXPROCS(was) })
	t.Setenv("GOMAXPROCS", "")
	cores := Cores()
	want := 2
	if cores > AutoUpTo {
		want = 1
	}
	if AutoPerCore() != want {
		t.Fatalf("AutoPerCore on %d cores: %d, want %d", cores, AutoPerCore(), want)
	}
	if procs, asked := Apply(0); procs != want*cores || asked != want || runtime.GOMAXPROCS(0) != procs {
		t.Fatalf("Apply(0) on %d cores: %d processors, %d per core; GOMAXPROCS %d", cores, procs, asked, runtime.GOMAXPROCS(0))
	}
	if procs, asked := Apply(3); procs != 3*cores || asked != 3 {
		t.Fatalf("Apply(3): %d processors, %d per core", procs, asked)
	}
	// One per core leaves Go's own, which follows a changing CPU limit.
	runtime.GOMAXPROCS(was)
	if procs, _ := Apply(1); procs != was {
		t.Fatalf("Apply(1): %d processors, want Go's %d left alone", procs, was)
	}
}
