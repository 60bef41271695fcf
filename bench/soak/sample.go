package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	rtmetrics "runtime/metrics"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ecs"

	"github.com/capstanhq/capstan/bench/internal/benchkit"
	"github.com/capstanhq/capstan/internal/store"
)

// Sample is one reading of the process.
type Sample struct {
	At     float64 `json:"at"` // seconds into the soak
	RSSMiB float64 `json:"rssMiB"`
	// HeapLiveMiB is the Go heap the last collection found live: what a
	// leak of the process's own objects shows in, apart from how the
	// runtime (and under -race, the race detector) keeps pages.
	HeapLiveMiB float64 `json:"heapLiveMiB"`
	Goroutines  int     `json:"goroutines"`
	OpenFiles   int     `json:"openFiles"`
	EtcdDBMiB   float64 `json:"etcdDbMiB"`
	// EtcdInUseMiB is the part of the database in use: the file also
	// holds free pages, which a defragmentation gives back only once the
	// file is twice its last defragmented size, so the file's size is a
	// sawtooth whatever the records do, and what is in use is the series
	// a leak would show in.
	EtcdInUseMiB float64 `json:"etcdInUseMiB"`
	APIp99Ms     float64 `json:"apiP99Ms"`
	Calls        int     `json:"calls"`
	Instances    int     `json:"hollowInstances"`
	// What etcd holds, to tell which kind of record a growing database
	// comes from: task records, and events and audit records (stored
	// in pages of several).
	Tasks        int `json:"tasks"`
	Events       int `json:"events"`
	AuditRecords int `json:"auditRecords"`
}

// latencies holds the client's call times since the last sample.
type latencies struct {
	mu sync.Mutex
	ds []time.Duration
}

func (l *latencies) add(d time.Duration) {
	l.mu.Lock()
	l.ds = append(l.ds, d)
	l.mu.Unlock()
}

func (l *latencies) take() []time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	ds := l.ds
	l.ds = nil
	slices.Sort(ds)
	return ds
}

// client calls DescribeServices, ListTasks (a page of 100) and
// DescribeContainerInstances (10) in turn, 100 ms apart, as a user's
// tooling does, timing each call.
func (s *soak) client(ctx context.Context) {
	var some []string
	for i := 0; ctx.Err() == nil; i++ {
		t := time.Now()
		var err error
		switch i % 3 {
		case 0:
			_, err = s.c.DescribeServices(ctx, &ecs.DescribeServicesInput{Cluster: aws.String(clusterName), Services: []string{serviceName}})
		case 1:
			var out *ecs.ListContainerInstancesOutput
			out, err = s.c.ListContainerInstances(ctx, &ecs.ListContainerInstancesInput{Cluster: aws.String(clusterName), MaxResults: aws.Int32(10)})
			if err == nil {
				some = out.ContainerInstanceArns
			}
			if err == nil && len(some) > 0 {
				t = time.Now()
				_, err = s.c.DescribeContainerInstances(ctx, &ecs.DescribeContainerInstancesInput{Cluster: aws.String(clusterName), ContainerInstances: some})
			}
		case 2:
			_, err = s.c.ListTasks(ctx, &ecs.ListTasksInput{Cluster: aws.String(clusterName), MaxResults: aws.Int32(100)})
		}
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			s.fail("api client", err)
		} else {
			s.lat.add(time.Since(t))
		}
		benchkit.Sleep(ctx, 100*time.Millisecond)
	}
}

// take reads the process and the client's latencies.
func (s *soak) take(since time.Time) Sample {
	ds := s.lat.take()
	live := []rtmetrics.Sample{{Name: "/gc/heap/live:bytes"}}
	rtmetrics.Read(live)
	sm := Sample{At: time.Since(since).Seconds(), RSSMiB: float64(statusKB("VmRSS")) / 1024, Goroutines: runtime.NumGoroutine(),
		HeapLiveMiB: float64(live[0].Value.Uint64()) / (1 << 20),
		OpenFiles:   openFiles(), APIp99Ms: benchkit.Ms(benchkit.Pct(ds, 0.99)), Calls: len(ds), Instances: len(s.handles())}
	if st, err := os.Stat(filepath.Join(s.cfg.DataDir, "etcd", "data", "member", "snap", "db")); err == nil {
		sm.EtcdDBMiB = float64(st.Size()) / (1 << 20)
	}
	if _, inUse, ok := s.srv.Store.DatabaseSize(); ok {
		sm.EtcdInUseMiB = float64(inUse) / (1 << 20)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	sm.Tasks = s.records(ctx, store.TaskPrefix(clusterName), false)
	sm.Events = s.records(ctx, store.EventPrefix(clusterName), true)
	sm.AuditRecords = s.records(ctx, "audit/", true)
	return sm
}

// records counts the keys under prefix, or with paged the records in
// them: a page's key ends in ".<count>" (a key without one holds one).
func (s *soak) records(ctx context.Context, prefix string, paged bool) int {
	keys, _, err := store.Keys(ctx, s.srv.Store, prefix, "", 0)
	if err != nil {
		return -1
	}
	if !paged {
		return len(keys)
	}
	n := 0
	for _, k := range keys {
		c := 1
		if i := strings.LastIndexByte(k, '.'); i >= 0 {
			if v, err := strconv.Atoi(k[i+1:]); err == nil {
				c = v
			}
		}
		n += c
	}
	return n
}

// statusKB is a field of /proc/self/status in KiB.
func statusKB(field string) int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			var kb int64
			fmt.Sscanf(strings.TrimSpace(v), "%d", &kb)
			return kb
		}
	}
	return 0
}

func openFiles() int {
	es, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return 0
	}
	return len(es)
}

// revision is the commit the program was built from, if it can tell.
func revision(ctx context.Context) string {
	if r := benchkit.VCSRevision(); r != "" {
		return r
	}
	out, err := exec.CommandContext(ctx, "git", "rev-parse", "--short", "HEAD").Output()
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(out))
}
