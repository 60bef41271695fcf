package server

import (
	"github.com/prometheus/client_golang/prometheus"

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
