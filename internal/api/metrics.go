package api

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics counts API requests by operation and error code.
type Metrics struct {
	requests *prometheus.CounterVec
	latency  *prometheus.HistogramVec
}

func newMetrics() *Metrics {
	return &Metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "capstan_api_requests_total",
			Help: "ECS API requests by operation and error code (empty when it succeeded).",
		}, []string{"operation", "code"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "capstan_api_request_duration_seconds",
			Help:    "ECS API request latency by operation.",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5},
		}, []string{"operation"}),
	}
}

func (m *Metrics) observe(op, code string, d time.Duration) {
	if len(op) > 64 {
		op = "invalid"
	}
	m.requests.WithLabelValues(op, code).Inc()
	m.latency.WithLabelValues(op).Observe(d.Seconds())
}

// Collectors returns the collectors to register with a Prometheus registry.
func (h *Handler) Collectors() []prometheus.Collector {
	return []prometheus.Collector{h.metrics.requests, h.metrics.latency}
}
