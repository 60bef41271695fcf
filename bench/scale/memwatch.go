package main

import (
	"os"
	"runtime/metrics"
	"runtime/pprof"
	"sync"
	"time"
)

// memPeaks are the highest readings of the server's memory while the run
// went on: what the end's readings, taken after a collection, miss.
type memPeaks struct {
	HeapLiveMiB     float64 `json:"heap_live_mib"`     // marked by a collection
	HeapGoalMiB     float64 `json:"heap_goal_mib"`     // the collector's target
	HeapRetainedMiB float64 `json:"heap_retained_mib"` // heap memory held from the system
	RSSAnonMiB      float64 `json:"rss_anon_mib"`
	RSSFileMiB      float64 `json:"rss_file_mib"`
	// At is the phase the live heap peaked in.
	At string `json:"heap_live_at"`
}

// memWatch samples the process every interval until stopped. With a
// profile path it writes the heap profile of each new live peak (10%
// over the last one written) there, so the peak's holders can be read.
type memWatch struct {
	mu      sync.Mutex
	peaks   memPeaks
	phase   string
	profile string
	stop    chan struct{}
	done    chan struct{}
}

func startMemWatch(every time.Duration, profile string) *memWatch {
	m := &memWatch{profile: profile, phase: "start", stop: make(chan struct{}), done: make(chan struct{})}
	go m.run(every)
	return m
}

// setPhase names what the run is doing now.
func (m *memWatch) setPhase(p string) {
	m.mu.Lock()
	m.phase = p
	m.mu.Unlock()
}

func (m *memWatch) run(every time.Duration) {
	defer close(m.done)
	s := []metrics.Sample{
		{Name: "/gc/heap/live:bytes"},
		{Name: "/gc/heap/goal:bytes"},
		{Name: "/memory/classes/heap/objects:bytes"},
		{Name: "/memory/classes/heap/unused:bytes"},
		{Name: "/memory/classes/heap/free:bytes"},
	}
	const mib = 1 << 20
	var written float64
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-m.stop:
			return
		case <-t.C:
		}
		metrics.Read(s)
		live := float64(s[0].Value.Uint64()) / mib
		goal := float64(s[1].Value.Uint64()) / mib
		retained := float64(s[2].Value.Uint64()+s[3].Value.Uint64()+s[4].Value.Uint64()) / mib
		anon := float64(procStatus(os.Getpid(), "RssAnon")) / mib
		file := float64(procStatus(os.Getpid(), "RssFile")) / mib
		m.mu.Lock()
		p := &m.peaks
		if live > p.HeapLiveMiB {
			p.HeapLiveMiB, p.At = live, m.phase
		}
		p.HeapGoalMiB = max(p.HeapGoalMiB, goal)
		p.HeapRetainedMiB = max(p.HeapRetainedMiB, retained)
		p.RSSAnonMiB = max(p.RSSAnonMiB, anon)
		p.RSSFileMiB = max(p.RSSFileMiB, file)
		m.mu.Unlock()
		if m.profile != "" && live > written*1.1 {
			written = live
			if f, err := os.Create(m.profile + ".peak"); err == nil {
				// The profile is of the last collection: no collection here.
				pprof.Lookup("heap").WriteTo(f, 0)
				f.Close()
			}
		}
	}
}

// finish stops the sampling and returns the peaks.
func (m *memWatch) finish() memPeaks {
	close(m.stop)
	<-m.done
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.peaks
}
