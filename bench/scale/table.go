package main

import (
	"cmp"
	"fmt"
	"io"
	"maps"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/capstanhq/capstan/internal/controller"
	"github.com/capstanhq/capstan/internal/store"
)

func secs(v float64) string {
	if v < 0 {
		return "not finished"
	}
	return fmt.Sprintf("%.1f s", v)
}

// printLatencies prints p50 and p99 per operation, then by the calls'
// place after the sampler's pause.
func printLatencies(w io.Writer, byOp, byPosition map[string][2]float64) {
	for _, m := range []map[string][2]float64{byOp, byPosition} {
		for _, k := range slices.Sorted(maps.Keys(m)) {
			fmt.Fprintf(w, "  %s\tp50 %.1f ms\tp99 %.1f ms\n", k, m[k][0], m[k][1])
		}
	}
}

// printWrites lists a rollout's etcd writes by kind, most bytes first,
// and per instance of the fleet.
func printWrites(w io.Writer, ws map[string]store.WriteCount, instances int) {
	if len(ws) == 0 || instances == 0 {
		return
	}
	var total store.WriteCount
	kinds := slices.Collect(maps.Keys(ws))
	for _, k := range kinds {
		total.Puts += ws[k].Puts
		total.Deletes += ws[k].Deletes
		total.Bytes += ws[k].Bytes
	}
	slices.SortFunc(kinds, func(a, b string) int { return cmp.Or(cmp.Compare(ws[b].Bytes, ws[a].Bytes), strings.Compare(a, b)) })
	per := float64(instances)
	fmt.Fprintf(w, "  etcd writes: puts / deletes / MiB (per instance: puts, KiB)\t%d / %d / %.1f\t%.1f, %.1f\n", total.Puts, total.Deletes,
		float64(total.Bytes)/(1<<20), float64(total.Puts)/per, float64(total.Bytes)/1024/per)
	for _, k := range kinds {
		c := ws[k]
		fmt.Fprintf(w, "    %s\t%d / %d / %.1f\t%.1f, %.1f\n", k, c.Puts, c.Deletes, float64(c.Bytes)/(1<<20), float64(c.Puts)/per, float64(c.Bytes)/1024/per)
	}
}

func printReconciles(w io.Writer, rs map[string]controller.Stat) {
	names := slices.Sorted(maps.Keys(rs))
	if len(names) == 0 {
		return
	}
	parts := make([]string, len(names))
	for i, n := range names {
		parts[i] = fmt.Sprintf("%s %d (%.1f s)", n, rs[n].Passes, rs[n].Seconds)
	}
	fmt.Fprintf(w, "  reconciles (time in them)\t%s\n", strings.Join(parts, ", "))
}

func printTable(w io.Writer, r *Report) {
	m := r.Machine
	fmt.Fprintf(w, "\n%s/%s, %d CPUs (%s), GOMAXPROCS %d, %s, revision %.12s, load %s → %s, CPU stolen by the host %.1f s, etcd %s, server GOGC %d, memory limit %s, stopped tasks kept %s, agents at nice %d, GOGC %d, state in %s\n\n", m.GOOS, m.GOARCH, m.NumCPU, m.CPUModel,
		m.GOMAXPROCS, m.GoVersion, m.Revision, m.LoadAvgStart, m.LoadAvgEnd, m.StealSeconds, r.Etcd, r.ServerGOGC, r.ServerMemoryLimit, time.Duration(r.StoppedRetentionSeconds*float64(time.Second)), r.AgentNice, r.AgentGOGC, r.AgentState)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "hollow instances\t%d\n", r.Instances)
	if r.Fleet == "provisioned" {
		fmt.Fprintf(tw, "service of %d tasks → instances provisioned, daemon and tasks RUNNING\t%.1f s\n", r.ServiceTasks, r.ProvisionSeconds)
	} else {
		fmt.Fprintf(tw, "registration (launch → all ACTIVE, connected)\t%.1f s\t%.0f instances/s\n", r.RegisterSeconds, r.InstancesPerSecond)
		fmt.Fprintf(tw, "CreateDaemon → RUNNING on all\t%.1f s\n", r.DaemonPlacementSeconds)
		fmt.Fprintf(tw, "service of %d tasks → all placed\t%.1f s\t%.0f placements/s\n", r.ServiceTasks, r.PlacedSeconds, r.PlacementsPerSecond)
		fmt.Fprintf(tw, "  → all RUNNING\t%.1f s\t%.0f tasks/s\n", r.ServiceSeconds, r.RunningPerSecond)
	}
	for _, ro := range r.Rollouts {
		fmt.Fprintf(tw, "UpdateDaemon drainPercent %v → SUCCESSFUL\t%s\t%s, %d/%d on target, %.1f s stolen, server CPU %.1f s\n", ro.DrainPercent, secs(ro.Seconds), ro.Status,
			ro.OnTarget, ro.OnTarget+ro.Remaining, ro.StealSeconds, ro.ServerCPUSeconds)
		if ro.ConsolePages > 0 {
			fmt.Fprintf(tw, "  with %d live console pages: change → page\tp50 %.0f ms, p99 %.0f ms\t%d events (%d whole), %.0f bytes each\n", ro.ConsolePages, ro.PageDelayP50Ms, ro.PageDelayP99Ms, ro.PageEvents, ro.PageWholeEvents, ro.PageBytesPerEvent)
		}
		printWrites(tw, ro.Writes, r.Instances)
		printReconciles(tw, ro.Reconciles)
		if ro.CacheWaits > 0 {
			fmt.Fprintf(tw, "  reads that waited for the cache to apply a write\t%d, %.1f s\tmean %.0f ms\n", ro.CacheWaits, ro.CacheWaitSeconds, 1000*ro.CacheWaitSeconds/float64(ro.CacheWaits))
		}
		fmt.Fprintf(tw, "  then: tasks / container instances kept, server heap live\t%d / %d\t%.0f MiB\n", ro.TasksStored, ro.InstancesStored, ro.HeapLiveMiB)
		if len(ro.Stages) > 0 {
			fmt.Fprintf(tw, "  replacing an instance X by R, step by step\n")
			printStages(tw, ro.Stages)
		}
	}
	fmt.Fprintf(tw, "API during rollout, client %s (%d calls, %d errors)\tp50 %.1f ms\tp99 %.1f ms\n", r.APIClient, r.APISamples, r.APIErrors, r.APIP50Ms, r.APIP99Ms)
	printLatencies(tw, r.APIByOp, r.APIByPosition)
	if r.APIInProcessSamples > 0 {
		fmt.Fprintf(tw, "API at the same time, client in the server's process (%d calls)\tp50 %.1f ms\tp99 %.1f ms\n", r.APIInProcessSamples, r.APIInProcessP50Ms, r.APIInProcessP99Ms)
		printLatencies(tw, r.APIInProcessByOp, r.APIInProcessByPosition)
	}
	fmt.Fprintf(tw, "server RSS (now / peak)\t%.0f MiB\t%.0f MiB\n", r.ServerRSSMiB, r.ServerPeakRSSMiB)
	fmt.Fprintf(tw, "  anonymous / mapped files / Go heap in use\t%.0f MiB\t%.0f MiB\t%.0f MiB\n", r.ServerRSSAnonMiB, r.ServerRSSFileMiB, r.ServerHeapMiB)
	fmt.Fprintf(tw, "  goroutine stacks / free heap not returned / heap live\t%.0f MiB\t%.0f MiB\t%.0f MiB\n", r.ServerStacksMiB, r.ServerHeapFreeMiB, r.ServerHeapLiveMiB)
	if r.ServerSettledRSSMiB > 0 {
		fmt.Fprintf(tw, "  settled: RSS / anonymous\t%.0f MiB\t%.0f MiB\n", r.ServerSettledRSSMiB, r.ServerSettledAnonMiB)
	}
	pk := r.ServerPeaks
	fmt.Fprintf(tw, "  peaks: anonymous / mapped files\t%.0f MiB\t%.0f MiB\n", pk.RSSAnonMiB, pk.RSSFileMiB)
	fmt.Fprintf(tw, "  peaks: heap held / goal / live (at)\t%.0f MiB\t%.0f MiB\t%.0f MiB (%s)\n", pk.HeapRetainedMiB, pk.HeapGoalMiB, pk.HeapLiveMiB, pk.At)
	fmt.Fprintf(tw, "server CPU\t%.1f s\n", r.ServerCPUSeconds)
	fmt.Fprintf(tw, "server heap per instance (sessions, records)\t%.1f KiB\n", r.ServerHeapPerInstanceKi)
	fmt.Fprintf(tw, "etcd db\t%.1f MiB\n", r.EtcdDBMiB)
	for _, d := range r.EtcdDefrags {
		fmt.Fprintf(tw, "  defragmented at %.0f s\t%.1f → %.1f MiB\tin %.2f s\n", d.At, d.BeforeMiB, d.AfterMiB, d.Seconds)
	}
	if r.EtcdRSSMiB > 0 {
		fmt.Fprintf(tw, "etcd process RSS (now / peak), CPU\t%.0f MiB\t%.0f MiB\t%.1f s\n", r.EtcdRSSMiB, r.EtcdPeakRSSMiB, r.EtcdCPUSeconds)
	}
	kinds := make([]string, 0, len(r.Stored))
	for k := range r.Stored {
		kinds = append(kinds, k)
	}
	sort.Slice(kinds, func(i, j int) bool { return r.Stored[kinds[i]].MiB > r.Stored[kinds[j]].MiB })
	for _, k := range kinds {
		fmt.Fprintf(tw, "  live %s\t%d\t%.1f MiB\n", k, r.Stored[k].Count, r.Stored[k].MiB)
	}
	fmt.Fprintf(tw, "hollow agent per instance (RSS / heap)\t%.0f KiB\t%.0f KiB\t%.1f goroutines\n", r.AgentRSSPerInstanceKiB, r.AgentHeapPerInstanceKiB, r.AgentGoroutinesPerInst)
	fmt.Fprintf(tw, "hollow agents CPU\t%.1f s\n", r.AgentCPUSeconds)
	if r.IdleSeconds > 0 {
		fmt.Fprintf(tw, "steady fleet CPU (server / hollow agents)\t%.3f cores\t%.3f cores\n", r.IdleServerCores, r.IdleAgentCores)
	}
	fmt.Fprintf(tw, "loss of %d instances: detected\t%s\n", r.Killed, secs(r.DetectSeconds))
	fmt.Fprintf(tw, "  replaced (service and daemon whole again)\t%s\n", secs(r.ReplaceSeconds))
	fmt.Fprintf(tw, "invariant violations\t%d\n", len(r.Invariants))
	tw.Flush()
	for _, v := range r.Invariants {
		fmt.Fprintln(w, "  violation:", v)
	}
	for _, n := range r.Notes {
		fmt.Fprintln(w, "note:", n)
	}
}
