package agent

import (
	"strconv"
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/capstanhq/capstan/internal/agent/engine"
	"github.com/capstanhq/capstan/internal/agent/images"
	"github.com/capstanhq/capstan/internal/agent/metadata"
)

// metadataSource shows the engine's tasks to the metadata endpoint.
type metadataSource struct{ eng *engine.Engine }

func (m *metadataSource) TaskARNs() []string {
	if m.eng == nil {
		return nil
	}
	var out []string
	for _, s := range m.eng.Snapshot() {
		out = append(out, s.Arn)
	}
	return out
}

func (m *metadataSource) Task(arn string) (metadata.TaskView, bool) {
	if m.eng == nil {
		return metadata.TaskView{}, false
	}
	info, ok := m.eng.Task(arn)
	if !ok {
		return metadata.TaskView{}, false
	}
	def := info.Definition
	v := metadata.TaskView{Cluster: info.Cluster, ARN: info.Arn, Family: def.Family, DesiredStatus: info.DesiredStatus,
		KnownStatus: info.State.LastStatus, CPUUnits: info.CPU, MemoryMiB: info.MemoryMiB, NetworkMode: info.NetworkMode,
		PullStartedAt: info.State.PullStartedAt, PullStoppedAt: info.State.PullStoppedAt, ExecutionStoppedAt: info.State.StoppedAt,
		Tags: map[string]string{}}
	if def.Revision != nil {
		v.Revision = strconv.Itoa(int(*def.Revision))
	}
	if name, ok := strings.CutPrefix(info.Task.Group, "service:"); ok {
		v.ServiceName = name
	}
	for _, t := range info.Task.Tags {
		v.Tags[t.Key] = t.Value
	}
	for _, c := range info.Containers {
		cv := metadata.ContainerView{Name: c.Name, RuntimeID: c.RuntimeID, RuntimeName: c.RuntimeName, Image: c.Image, ImageID: c.ImageID,
			Labels: c.Labels, DesiredStatus: c.DesiredStatus, KnownStatus: c.KnownStatus, ExitCode: c.ExitCode, CPUUnits: c.CPUShares,
			MemoryMiB: c.MemoryMiB, CreatedAt: c.CreatedAt, StartedAt: c.StartedAt, FinishedAt: c.FinishedAt, Health: c.Health,
			LogDriver: c.LogDriver, LogOptions: c.LogOptions, RestartCount: c.RestartCount}
		if c.IPAddress != "" {
			cv.IPv4 = []string{c.IPAddress}
		}
		for _, p := range c.Ports {
			pv := metadata.PortView{Protocol: p.Protocol, HostIP: p.BindIP}
			if p.ContainerPort != nil {
				pv.ContainerPort = int(*p.ContainerPort)
			}
			if p.HostPort != nil {
				pv.HostPort = int(*p.HostPort)
			}
			cv.Ports = append(cv.Ports, pv)
		}
		for _, vol := range c.Volumes {
			cv.Volumes = append(cv.Volumes, metadata.VolumeView{Source: vol.Source, Destination: vol.Destination})
		}
		v.Containers = append(v.Containers, cv)
	}
	return v, true
}

var (
	tasksDesc    = prometheus.NewDesc("capstan_agent_tasks", "Tasks on this instance by last status.", []string{"status"}, nil)
	engineDesc   = prometheus.NewDesc("capstan_agent_engine_events_total", "Engine events since start.", []string{"event"}, nil)
	reservedDesc = prometheus.NewDesc("capstan_agent_reserved", "Resources reserved by tasks.", []string{"resource"}, nil)
	waitingDesc  = prometheus.NewDesc("capstan_agent_tasks_waiting_for_room", "Tasks waiting for resources held by stopping tasks.", nil, nil)
	imagesDesc   = prometheus.NewDesc("capstan_agent_images_total", "Image manager events since start.", []string{"event"}, nil)
)

// engineCollector reads the engine's counters at scrape time.
type engineCollector struct{ eng *engine.Engine }

func (engineCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- tasksDesc
	ch <- engineDesc
	ch <- reservedDesc
	ch <- waitingDesc
}

func (c engineCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.eng.Stats()
	for _, status := range []string{"PROVISIONING", "PENDING", "ACTIVATING", "RUNNING", "DEACTIVATING", "STOPPING", "DEPROVISIONING", "STOPPED"} {
		ch <- prometheus.MustNewConstMetric(tasksDesc, prometheus.GaugeValue, float64(s.Tasks[status]), status)
	}
	for name, v := range map[string]uint64{"pull": s.Pulls, "pull_failure": s.PullFailures, "restart": s.Restarts,
		"vanished": s.Vanished, "orphan_removed": s.OrphansRemoved} {
		ch <- prometheus.MustNewConstMetric(engineDesc, prometheus.CounterValue, float64(v), name)
	}
	ch <- prometheus.MustNewConstMetric(reservedDesc, prometheus.GaugeValue, float64(s.ReservedCPU), "cpu_units")
	ch <- prometheus.MustNewConstMetric(reservedDesc, prometheus.GaugeValue, float64(s.ReservedMemory), "memory_mib")
	ch <- prometheus.MustNewConstMetric(waitingDesc, prometheus.GaugeValue, float64(s.WaitingForRoom))
}

// imagesCollector reads the image manager's counters at scrape time.
type imagesCollector struct{ m *images.Manager }

func (imagesCollector) Describe(ch chan<- *prometheus.Desc) { ch <- imagesDesc }

func (c imagesCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.m.Metrics()
	for name, v := range map[string]uint64{"pull_ok": s.PullsOK, "pull_failed": s.PullsFailed, "cache_hit": s.CacheHits,
		"deleted": s.ImagesDeleted, "delete_failed": s.DeleteFailed, "cleanup_cycle": s.CleanupCycles} {
		ch <- prometheus.MustNewConstMetric(imagesDesc, prometheus.CounterValue, float64(v), name)
	}
}
