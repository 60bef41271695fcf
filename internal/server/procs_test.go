package server

import (
	"runtime"
	"testing"
)

func TestSetProcs(t *testing.T) {
	was := runtime.GOMAXPROCS(0)
	t.Cleanup(func() { runtime.GOMAXPROCS(was) })
	t.Setenv("GOMAXPROCS", "")

	runtime.GOMAXPROCS(3)
	if got := SetProcs(0); got != 3*ProcsPerCore || runtime.GOMAXPROCS(0) != 3*ProcsPerCore {
		t.Fatalf("SetProcs(0) at 3: returned %d, GOMAXPROCS %d, want %d", got, runtime.GOMAXPROCS(0), 3*ProcsPerCore)
	}
	if got := SetProcs(5); got != 5 || runtime.GOMAXPROCS(0) != 5 {
		t.Fatalf("SetProcs(5): returned %d, GOMAXPROCS %d", got, runtime.GOMAXPROCS(0))
	}
	// An operator's GOMAXPROCS wins: the runtime has applied it already.
	t.Setenv("GOMAXPROCS", "5")
	if got := SetProcs(0); got != 5 || runtime.GOMAXPROCS(0) != 5 {
		t.Fatalf("with GOMAXPROCS set: returned %d, GOMAXPROCS %d, want 5 left alone", got, runtime.GOMAXPROCS(0))
	}
}
