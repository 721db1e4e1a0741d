package rabbit

import (
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// Results of a publish, the values of the result label.
const (
	resultOK = iota
	resultUnroutable
	resultNacked
	resultTimeout
	resultUnavailable
	nResults
)

var resultNames = [nResults]string{"ok", "unroutable", "nacked", "timeout", "unavailable"}

type metrics struct {
	latency    prometheus.Histogram
	results    [nResults]prometheus.Counter
	connected  prometheus.Gauge
	blocked    prometheus.Gauge
	reconnects prometheus.Counter
}

// newMetrics builds the collectors and registers them when reg is not nil.
func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	published := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "clockd_rabbit_publishes_total",
		Help: "Rings published to RabbitMQ, by result (ok, unroutable, nacked, timeout, unavailable).",
	}, []string{"result"})
	m := &metrics{
		latency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "clockd_rabbit_confirm_latency_seconds",
			Help:    "Time from publishing a ring to the broker's confirm (ack, nack or return).",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14), // 0.5ms .. 4s
		}),
		connected: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "clockd_rabbit_connected",
			Help: "1 while connected to RabbitMQ with confirm channels, else 0.",
		}),
		blocked: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "clockd_rabbit_blocked",
			Help: "1 while RabbitMQ blocks the connection (a memory or disk alarm): connected, but nothing can be published, so nothing rings.",
		}),
		reconnects: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "clockd_rabbit_reconnects_total",
			Help: "Successful reconnections to RabbitMQ after a connection loss.",
		}),
	}
	for r, name := range resultNames {
		m.results[r] = published.WithLabelValues(name)
	}
	if reg == nil {
		return m, nil
	}
	cs := []prometheus.Collector{m.latency, published, m.connected, m.blocked, m.reconnects}
	for i, c := range cs {
		if err := reg.Register(c); err != nil {
			for _, done := range cs[:i] {
				reg.Unregister(done)
			}
			return nil, fmt.Errorf("rabbit: register metrics: %w", err)
		}
	}
	return m, nil
}

// count adds the results of one batch.
func (m *metrics) count(errs []error) {
	var n [nResults]int
	for _, err := range errs {
		n[result(err)]++
	}
	for r, c := range n {
		if c > 0 {
			m.results[r].Add(float64(c))
		}
	}
}

// ResultName names the outcome of one publish as the metrics do: ok,
// unroutable, nacked, timeout or unavailable.
func ResultName(err error) string { return resultNames[result(err)] }

func result(err error) int {
	switch {
	case err == nil:
		return resultOK
	case errors.Is(err, ErrUnroutable):
		return resultUnroutable
	case errors.Is(err, ErrNacked), errors.Is(err, ErrTooLarge):
		return resultNacked
	case errors.Is(err, ErrTimeout):
		return resultTimeout
	default:
		return resultUnavailable
	}
}
