package main

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"time"

	"github.com/capstanhq/capstan/bench/internal/benchkit"
	"github.com/capstanhq/capstan/internal/cpus"
	"github.com/capstanhq/capstan/internal/fleet"
	"github.com/capstanhq/capstan/internal/store"
)

// run performs the whole measurement; the report holds what was measured
// even when a step fails.
func run(ctx context.Context, o options, w io.Writer) (*Report, error) {
	if o.serverProcs > 0 {
		cpus.SetProcs(o.serverProcs)
	} else {
		cpus.Apply(0) // as capstan server chooses
	}
	if o.serverGOGC > 0 {
		debug.SetGCPercent(o.serverGOGC)
	}
	serverGOGC := debug.SetGCPercent(-1)
	debug.SetGCPercent(serverGOGC)
	rep := &Report{Started: time.Now().UTC(), Machine: machine(), Instances: o.instances, Etcd: "embedded", AgentNice: o.agentNice, AgentGOGC: o.agentGOGC, AgentState: o.agentState, Fleet: "joined", ServerMemoryLimitMiB: o.memoryLimit.MiB, ServerMemoryLimit: o.memoryLimit.String(), ServerGOGC: serverGOGC, RolloutSeconds: -1,
		StoppedRetentionSeconds: cmp.Or(o.retention, fleet.DefaultStoppedRetention).Seconds(),
		DetectSeconds:           -1, ReplaceSeconds: -1, Invariants: []string{}}
	if len(o.etcdEndpoints) > 0 {
		rep.Etcd = strings.Join(o.etcdEndpoints, ",")
	}
	if o.work == "" {
		dir, err := os.MkdirTemp("", "capstan-scale-")
		if err != nil {
			return nil, err
		}
		o.work = dir
		if !o.keep {
			defer os.RemoveAll(dir)
		}
	}
	var member *etcdProcess
	if o.etcdProcess {
		var err error
		if member, err = startEtcdProcess(o.work); err != nil {
			return rep, err
		}
		defer member.stop()
		o.etcdEndpoints, o.etcdMaxTxnOps, o.etcdTLS = []string{member.url}, store.EmbeddedMaxTxnOps, member.tls
		rep.Etcd = "process " + member.url
	}
	switch o.profilePhase {
	case "":
		stop, err := o.profile("", nil)
		if err != nil {
			return nil, err
		}
		defer stop()
	case "service", "idle", "rollout":
	default:
		return nil, fmt.Errorf("-profile-phase: want service, idle or rollout, got %q", o.profilePhase)
	}
	mem := startMemWatch(250*time.Millisecond, o.memProfile)
	h, err := start(ctx, o, w)
	if err != nil {
		mem.finish()
		return nil, err
	}
	h.mem = mem
	defer func() {
		h.logf("stopping %d hollow instances and the server", len(h.handles))
		if err := h.close(); err != nil {
			fmt.Fprintln(os.Stderr, "scale: cleanup:", err)
		}
	}()
	if o.provisioned {
		rep.Fleet = "provisioned"
		err = measureProvisioned(ctx, o, h, rep)
	} else {
		err = measure(ctx, o, h, rep)
	}
	rep.ServerPeaks = mem.finish()
	rep.Machine.LoadAvgEnd = benchkit.LoadAvg()
	rep.Machine.StealSeconds += stealSeconds()
	// The end's resident readings come before any collection the bench
	// forces, so that -settle sees what the server gives back on its own.
	rep.ServerRSSMiB = float64(rss(os.Getpid())) / (1 << 20)
	rep.ServerPeakRSSMiB = float64(peakRSS()) / (1 << 20)
	rep.ServerRSSAnonMiB = float64(procStatus(os.Getpid(), "RssAnon")) / (1 << 20)
	rep.ServerRSSFileMiB = float64(procStatus(os.Getpid(), "RssFile")) / (1 << 20)
	rep.ServerCPUSeconds = cpuSeconds(os.Getpid())
	if o.settle > 0 {
		time.Sleep(o.settle)
		rep.ServerSettledRSSMiB = float64(rss(os.Getpid())) / (1 << 20)
		rep.ServerSettledAnonMiB = float64(procStatus(os.Getpid(), "RssAnon")) / (1 << 20)
	}
	if o.memProfile != "" {
		writeHeapProfile(o.memProfile + ".end")
	}
	// The heap's make-up, after a collection (and after -settle).
	self := selfStats()
	rep.ServerHeapMiB = float64(self.HeapBytes) / (1 << 20)
	rep.ServerStacksMiB = float64(self.StackBytes) / (1 << 20)
	rep.ServerHeapFreeMiB = float64(self.HeapFree) / (1 << 20)
	rep.ServerHeapLiveMiB = float64(self.HeapLive) / (1 << 20)
	rep.ServerGoroutines = self.Goroutines
	dbPath := filepath.Join(h.cfg.DataDir, "etcd", "data", "member", "snap", "db")
	if member != nil {
		dbPath = filepath.Join(o.work, "etcd", "data", "member", "snap", "db")
		rep.EtcdRSSMiB, rep.EtcdPeakRSSMiB, rep.EtcdCPUSeconds = member.stats()
	}
	if st, serr := os.Stat(dbPath); serr == nil {
		rep.EtcdDBMiB = float64(st.Size()) / (1 << 20)
	}
	rep.Stored = storedKinds(ctx, h.srv.Store)
	for _, d := range h.srv.Store.Defrags() {
		rep.EtcdDefrags = append(rep.EtcdDefrags, defragRun{At: d.At.Sub(rep.Started).Seconds(),
			BeforeMiB: float64(d.BeforeBytes) / (1 << 20), AfterMiB: float64(d.AfterBytes) / (1 << 20), Seconds: d.Took.Seconds()})
	}
	if hs, herr := h.host.Stats(); herr == nil {
		rep.AgentCPUSeconds = hs.CPUSeconds
	}
	return rep, err
}

// storedKinds sizes the live records by kind: what the database and the
// cache hold apart from history.
func storedKinds(ctx context.Context, s *store.Store) map[string]storedKind {
	out := map[string]storedKind{}
	for _, kind := range []string{"capacityproviders", "clusters", "containerinstances", "credentials",
		"daemondeployments", "daemonplacements", "daemonrevisions", "daemons", "daemontaskdeffamilies",
		"daemontaskdefs", "desired", "events", "managedinstances", "serviceevents", "services", "sessions",
		"taskdeffamilies", "taskdefs", "tasks"} {
		vals, err := store.ListRaw(ctx, s, kind+"/")
		if err != nil || len(vals) == 0 {
			continue
		}
		k := storedKind{Count: len(vals)}
		for _, v := range vals {
			k.MiB += float64(len(v))
		}
		k.MiB /= 1 << 20
		out[kind] = k
	}
	return out
}

// peakRSS is this process's high-water resident set.
func peakRSS() int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			var kb int64
			fmt.Sscanf(strings.TrimSpace(v), "%d", &kb)
			return kb << 10
		}
	}
	return 0
}
