package server

import (
	"os"
	"runtime"
)

// ProcsPerCore is how many Go processors the server's process runs per
// core it may use. The server's work is thousands of short bursts (agent
// sessions, controllers' passes, etcd) and a few API calls that must not
// wait behind them: with every processor busy, a call made ready waits in
// Go's run queue, in turn behind the bursts queued before it. With more
// processors than cores the kernel shares the cores among them by time
// slice, so the call waits a slice. Measured in docs/performance.md
// (sixteenth round): API p99 during a 5,000-instance replacement rollout
// 25.7 ms against 53–64 ms at one per core, for the same CPU.
const ProcsPerCore = 2

// SetProcs sets GOMAXPROCS to n processors (0: ProcsPerCore per core Go
// found, which follows the process's CPU limit), unless the GOMAXPROCS
// environment variable names it. It returns the processors in use.
func SetProcs(n int) int {
	if os.Getenv("GOMAXPROCS") != "" {
		return runtime.GOMAXPROCS(0)
	}
	if n <= 0 {
		n = ProcsPerCore * runtime.GOMAXPROCS(0)
	}
	runtime.GOMAXPROCS(n)
	return n
}
