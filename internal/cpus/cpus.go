// Package cpus says how many cores the server runs on and how many Go
// processors it runs per core.
package cpus

import (
	"os"
	"runtime"
)

// AutoPerCore is how many Go processors the server's process runs per
// core unless told otherwise (capstan server --procs-per-core): two on a
// host of up to AutoUpTo cores, Go's one above. Extra processors let the
// kernel time-slice an API call made ready while every core is busy,
// instead of it waiting in Go's run queue behind the sessions' and
// controllers' bursts; on two cores at 5,000 instances that took the API's
// p99 during a rollout from 47-93 ms to ~21 ms, for a rollout ~20 % slower
// (docs/performance.md). A host of many cores rarely has all of them busy
// at once, and was not measured. What is sized or paced by the cores (the
// gateway's admission, the controllers' rests) uses Cores and PerCore, so
// extra processors add no work of their own.
func AutoPerCore() int {
	if Cores() <= AutoUpTo {
		return 2
	}
	return 1
}

// AutoUpTo is the most cores AutoPerCore runs two processors on.
const AutoUpTo = 4

// Apply runs perCore processors per core (0: AutoPerCore) unless the
// GOMAXPROCS environment variable names them, and returns the processors
// in use and the per-core count asked for.
func Apply(perCore int) (procs, asked int) {
	if perCore == 0 {
		perCore = AutoPerCore()
	}
	n := 0 // Go's own at one per core
	if perCore > 1 {
		n = perCore * Cores()
	}
	return SetProcs(n), perCore
}

// startProcs is the processors Go started with: one per core the process
// may use (it follows the CPU limit), or GOMAXPROCS from the environment.
var startProcs = runtime.GOMAXPROCS(0)

// Cores is how many cores the process's goroutines run on: the processors
// Go started with, no more than the machine's CPUs.
func Cores() int { return max(1, min(startProcs, runtime.NumCPU())) }

// PerCore is how many processors run per core now (at least 1).
func PerCore() int { return max(1, runtime.GOMAXPROCS(0)/Cores()) }

// SetProcs sets GOMAXPROCS to n processors, unless the GOMAXPROCS
// environment variable names it; 0 leaves Go's own, which follows a CPU
// limit that changes (setting it stops that). It returns the processors
// in use.
func SetProcs(n int) int {
	if n > 0 && os.Getenv("GOMAXPROCS") == "" {
		runtime.GOMAXPROCS(n)
	}
	return runtime.GOMAXPROCS(0)
}
