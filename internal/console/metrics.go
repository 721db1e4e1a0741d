package console

import (
	"context"
	"math"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// The overview's rates come from this process's own metrics: a sampler
// reads the registry every sampleEvery and keeps sampleKeep of history, and
// a page compares the registry now with the sample about a minute (rates)
// or five minutes (lateness) old. These are the serving instance's figures
// only: metrics are per process (Prometheus sums the instances).

const (
	sampleEvery = 10 * time.Second
	sampleKeep  = 31 // five minutes and the current one
)

type snapshot struct {
	at       time.Time
	rung     float64   // clockd_rings_total{result="rung"}
	failed   float64   // failed attempts: every other result but expired and dead
	given    float64   // clocks that became expired or dead
	bounds   []float64 // clockd_ring_lateness_seconds buckets
	cum      []uint64
	count    uint64
	heap     float64 // clockd_heap_clocks
	haveRing bool    // the ring metrics are registered
}

type sampler struct {
	g    prometheus.Gatherer
	mu   sync.Mutex
	hist []snapshot
}

func newSampler(g prometheus.Gatherer) *sampler { return &sampler{g: g} }

func (s *sampler) run(ctx context.Context) error {
	t := time.NewTicker(sampleEvery)
	defer t.Stop()
	for {
		s.add(s.take())
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

func (s *sampler) add(sn snapshot) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.hist = append(s.hist, sn)
	if len(s.hist) > sampleKeep {
		s.hist = s.hist[len(s.hist)-sampleKeep:]
	}
}

func (s *sampler) take() snapshot {
	sn := snapshot{at: time.Now()}
	if s.g == nil {
		return sn
	}
	mfs, err := s.g.Gather()
	if err != nil && len(mfs) == 0 {
		return sn
	}
	for _, mf := range mfs {
		switch mf.GetName() {
		case "clockd_rings_total":
			sn.haveRing = true
			for _, m := range mf.GetMetric() {
				v := m.GetCounter().GetValue()
				switch label(m, "result") {
				case "rung":
					sn.rung += v
				case "expired", "dead":
					sn.given += v
				default:
					sn.failed += v
				}
			}
		case "clockd_ring_lateness_seconds":
			for _, m := range mf.GetMetric() {
				h := m.GetHistogram()
				sn.count = h.GetSampleCount()
				for _, b := range h.GetBucket() {
					sn.bounds = append(sn.bounds, b.GetUpperBound())
					sn.cum = append(sn.cum, b.GetCumulativeCount())
				}
			}
		case "clockd_heap_clocks":
			for _, m := range mf.GetMetric() {
				sn.heap = m.GetGauge().GetValue()
			}
		}
	}
	return sn
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// Rates is what the overview shows of this instance's metrics.
type Rates struct {
	HaveRing       bool
	Window         time.Duration // what the rates are over
	RungPerMin     float64
	FailedPerMin   float64
	GivenUpPerMin  float64
	LatencyWindow  time.Duration
	LatenessP99    float64 // seconds; NaN: no ring in the window
	LatenessSample uint64  // first attempts measured in the window
	HeapClocks     float64
}

// rates compares the registry now with the samples of about a minute and
// five minutes ago (or the oldest one: right after start, since start).
func (s *sampler) rates() Rates {
	now := s.take()
	s.mu.Lock()
	hist := append([]snapshot(nil), s.hist...)
	s.mu.Unlock()
	out := Rates{HaveRing: now.haveRing, HeapClocks: now.heap, LatenessP99: math.NaN()}
	minute, five := snapshot{at: now.at}, snapshot{at: now.at}
	if len(hist) > 0 {
		five = hist[0]
		minute = hist[0]
		for _, h := range hist {
			if now.at.Sub(h.at) >= time.Minute {
				minute = h
			}
		}
	}
	if d := now.at.Sub(minute.at); d > 0 {
		per := float64(time.Minute) / float64(d)
		out.Window = d
		out.RungPerMin = (now.rung - minute.rung) * per
		out.FailedPerMin = (now.failed - minute.failed) * per
		out.GivenUpPerMin = (now.given - minute.given) * per
	}
	out.LatencyWindow = now.at.Sub(five.at)
	out.LatenessSample = now.count - five.count
	out.LatenessP99 = quantile(0.99, now, five)
	return out
}

// quantile estimates a quantile of the lateness observed between two
// samples, from the bucket counts (the upper bound of the bucket it falls
// in, as Prometheus's histogram_quantile does at the bucket's top).
func quantile(q float64, now, then snapshot) float64 {
	total := now.count - then.count
	if total == 0 || len(now.cum) == 0 {
		return math.NaN()
	}
	rank := uint64(math.Ceil(q * float64(total)))
	for i, c := range now.cum {
		var before uint64
		if i < len(then.cum) {
			before = then.cum[i]
		}
		if c-before >= rank {
			return now.bounds[i]
		}
	}
	return math.Inf(1) // above the largest bucket
}
