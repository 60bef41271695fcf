package server

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/capstanhq/capstan/internal/controller"
	"github.com/capstanhq/capstan/internal/store"
)

// storeWrites exposes what the store's watch saw written, by kind of
// record: where etcd's write load comes from (which records a rollout or a
// fleet's reports rewrite, and how large they are).
type storeWrites struct{ st *store.Store }

var (
	storeWritesDesc = prometheus.NewDesc("capstan_store_writes_total",
		"Records written to etcd (as the server's watch saw them), by kind of record and operation.", []string{"kind", "op"}, nil)
	storeBytesDesc = prometheus.NewDesc("capstan_store_written_bytes_total",
		"Bytes of record values put to etcd (as the server's watch saw them), by kind of record.", []string{"kind"}, nil)
)

func (storeWrites) Describe(ch chan<- *prometheus.Desc) {
	ch <- storeWritesDesc
	ch <- storeBytesDesc
}

func (s storeWrites) Collect(ch chan<- prometheus.Metric) {
	for kind, w := range s.st.Writes() {
		ch <- prometheus.MustNewConstMetric(storeWritesDesc, prometheus.CounterValue, float64(w.Puts), kind, "put")
		ch <- prometheus.MustNewConstMetric(storeWritesDesc, prometheus.CounterValue, float64(w.Deletes), kind, "delete")
		ch <- prometheus.MustNewConstMetric(storeBytesDesc, prometheus.CounterValue, float64(w.Bytes), kind)
	}
}

// storeWaits exposes the reads that waited for the server's cache to apply
// a write (its watch behind etcd): the lag every controller's reaction
// and every read after a write pays.
type storeWaits struct{ st *store.Store }

var (
	storeWaitsDesc = prometheus.NewDesc("capstan_store_cache_waits_total",
		"Reads that waited for the server's cache of etcd to apply a revision they must see.", nil, nil)
	storeWaitSecondsDesc = prometheus.NewDesc("capstan_store_cache_wait_seconds_total",
		"Time reads waited for the server's cache of etcd to apply a revision they must see.", nil, nil)
)

func (storeWaits) Describe(ch chan<- *prometheus.Desc) {
	ch <- storeWaitsDesc
	ch <- storeWaitSecondsDesc
}

func (s storeWaits) Collect(ch chan<- prometheus.Metric) {
	n, d := s.st.CacheWaits()
	ch <- prometheus.MustNewConstMetric(storeWaitsDesc, prometheus.CounterValue, float64(n))
	ch <- prometheus.MustNewConstMetric(storeWaitSecondsDesc, prometheus.CounterValue, d.Seconds())
}

// reconciles counts each controller's passes across leadership terms.
type reconciles map[string]*controller.Counts

func newReconciles() reconciles {
	r := reconciles{}
	for _, name := range []string{"deployments", "services", "daemons", "instances"} {
		r[name] = &controller.Counts{}
	}
	return r
}

var (
	reconcilesDesc = prometheus.NewDesc("capstan_reconciles_total",
		"Reconciles a controller ran on this server (while it led), by controller.", []string{"controller"}, nil)
	reconcileSecondsDesc = prometheus.NewDesc("capstan_reconcile_seconds_total",
		"Time a controller's reconciles took, waits included, by controller.", []string{"controller"}, nil)
)

func (reconciles) Describe(ch chan<- *prometheus.Desc) {
	ch <- reconcilesDesc
	ch <- reconcileSecondsDesc
}

func (r reconciles) Collect(ch chan<- prometheus.Metric) {
	for name, c := range r {
		n, busy := c.Get()
		ch <- prometheus.MustNewConstMetric(reconcilesDesc, prometheus.CounterValue, float64(n), name)
		ch <- prometheus.MustNewConstMetric(reconcileSecondsDesc, prometheus.CounterValue, busy.Seconds(), name)
	}
}

// Reconciles returns each controller's reconciles so far and their time.
func (s *Server) Reconciles() map[string]controller.Stat {
	out := map[string]controller.Stat{}
	for name, c := range s.reconciles {
		n, busy := c.Get()
		out[name] = controller.Stat{Passes: n, Seconds: busy.Seconds()}
	}
	return out
}

// storeSpace exposes whether the store refuses writes for want of space.
type storeSpace struct{ st *store.Store }

var (
	storeOutOfSpaceDesc = prometheus.NewDesc("capstan_store_out_of_space",
		"1 while the state store refuses writes for want of space (a full disk under the embedded etcd, or etcd's NOSPACE alarm), else 0.", nil, nil)
	storeFreeBytesDesc = prometheus.NewDesc("capstan_store_disk_free_bytes",
		"Bytes free on the embedded etcd's filesystem, as last looked at (absent for an external etcd).", nil, nil)
)

func (storeSpace) Describe(ch chan<- *prometheus.Desc) {
	ch <- storeOutOfSpaceDesc
	ch <- storeFreeBytesDesc
}

func (s storeSpace) Collect(ch chan<- prometheus.Metric) {
	sp := s.st.Space()
	out := 0.0
	if sp.OutOfSpace {
		out = 1
	}
	ch <- prometheus.MustNewConstMetric(storeOutOfSpaceDesc, prometheus.GaugeValue, out)
	if sp.FreeBytes >= 0 {
		ch <- prometheus.MustNewConstMetric(storeFreeBytesDesc, prometheus.GaugeValue, float64(sp.FreeBytes))
	}
}
