// Package cpus says how many cores the server runs on and how many Go
// processors it runs per core.
package cpus

import (
	"os"
	"runtime"
)

// ProcsPerCore is how many Go processors the server's process runs per
// core unless told otherwise: Go's one. More (capstan server
// --procs-per-core) lets the kernel time-slice an API call made ready
// while every core is busy, instead of it waiting in Go's run queue behind
// the sessions' and controllers' bursts, at a cost in throughput. What is
// sized or paced by the cores (the gateway's admission, the controllers'
// rests) uses Cores and PerCore, so extra processors add no work of their
// own. Measured in docs/performance-history.md (seventeenth round).
const ProcsPerCore = 1

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
