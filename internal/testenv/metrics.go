package testenv

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// Metric is the value of the counter or gauge name gathered from reg: of
// its first series whose labels include every name, value pair of labels
// (none: its first series). The test fails when there is no such series.
func Metric(t testing.TB, reg prometheus.Gatherer, name string, labels ...string) float64 {
	t.Helper()
	if len(labels)%2 != 0 {
		t.Fatalf("Metric(%s): labels come in name, value pairs: %q", name, labels)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			have := map[string]string{}
			for _, l := range m.GetLabel() {
				have[l.GetName()] = l.GetValue()
			}
			match := true
			for i := 0; i < len(labels); i += 2 {
				if v, ok := have[labels[i]]; !ok || v != labels[i+1] {
					match = false
				}
			}
			if !match {
				continue
			}
			switch {
			case m.GetGauge() != nil:
				return m.GetGauge().GetValue()
			case m.GetCounter() != nil:
				return m.GetCounter().GetValue()
			}
			t.Fatalf("%s is neither a counter nor a gauge", name)
		}
	}
	t.Fatalf("no series of %s with labels %q", name, labels)
	return 0
}
