package main

import (
	"bufio"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/clockd/clockd/internal/testenv"
)

// A bounded heap (CLOCKD_HEAP_CAP=64 over 8 shards: 4 clocks per shard and
// class in memory) with far more clocks due than it holds still rings them
// all, none early: the loaders refill it as the ring loop drains it.
func TestRingHeapCapped(t *testing.T) {
	t.Parallel()
	const n = 3000
	e := newEnv(t)
	d := testenv.StartClockd(t, e.vars(map[string]string{"CLOCKD_HEAP_CAP": "64", "CLOCKD_SHARDS": "8"}))
	cons := testenv.Consume(t, e.AMQP, e.Exchange, "capped")

	// watch the heap size while it drains
	stop := make(chan struct{})
	peak := make(chan float64, 1)
	go func() {
		m := 0.0
		defer func() { peak <- m }()
		for {
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
			if v, ok := scrapeGauge(d, "clockd_heap_clocks"); ok {
				m = max(m, v)
			}
		}
	}()
	from := time.Now().Add(1500 * time.Millisecond)
	clocks := postClocks(t, d, spreadSpecs("capped", "h", n, from, time.Second))
	if !waitReceived(cons, clocks, time.Until(latest(clocks))+40*time.Second) {
		t.Error("not every clock arrived")
	}
	close(stop)
	if m := <-peak; m > 64 || m == 0 {
		t.Errorf("clockd_heap_clocks peaked at %v; the cap is 64", m)
	} else {
		t.Logf("clockd_heap_clocks peaked at %v (cap 64)", m)
	}
	time.Sleep(500 * time.Millisecond)
	j := judge(cons, clocks)
	j.check(t)
	if j.dups > 0 {
		t.Errorf("%d duplicates without any failure", j.dups)
	}
	t.Logf("%v", j)
}

// scrapeGauge reads an unlabelled sample from /metrics.
func scrapeGauge(d *testenv.Clockd, name string) (float64, bool) {
	resp, err := http.Get(d.URL + "/metrics")
	if err != nil {
		return 0, false
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			return f, err == nil
		}
	}
	return 0, false
}
