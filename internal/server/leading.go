package server

import (
	"context"
	"log/slog"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// leading says whether this server's controllers run: 1 from the moment
// it is elected until its controllers have all stopped, so that two
// servers' gauges show whether their terms overlapped.
type leading struct{ on atomic.Bool }

var leadingDesc = prometheus.NewDesc("capstan_controllers_leading",
	"1 while this server is the elected leader and its controllers run, 0 otherwise.", nil, nil)

func (*leading) Describe(ch chan<- *prometheus.Desc) { ch <- leadingDesc }

func (l *leading) Collect(ch chan<- prometheus.Metric) {
	v := 0.0
	if l.on.Load() {
		v = 1
	}
	ch <- prometheus.MustNewConstMetric(leadingDesc, prometheus.GaugeValue, v)
}

// run runs the controllers for one leadership term.
func (l *leading) run(ctx context.Context, log *slog.Logger, controllers func(context.Context)) {
	l.on.Store(true)
	defer l.on.Store(false)
	controllers(ctx)
	log.Info("controllers stopped")
}
