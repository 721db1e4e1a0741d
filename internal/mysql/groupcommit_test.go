package mysql_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/clockd/clockd/internal/alarm"
	"github.com/clockd/clockd/internal/mysql"
)

// batchRows reads the clockd_create_batch_rows histogram in reg: how many
// create batches were committed, the rows they held, and its cumulative
// buckets (for messages).
func batchRows(t *testing.T, reg *prometheus.Registry) (batches, rows uint64, buckets []string) {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "clockd_create_batch_rows" {
			h := mf.GetMetric()[0].GetHistogram()
			for _, b := range h.GetBucket() {
				buckets = append(buckets, fmt.Sprintf("<=%g:%d", b.GetUpperBound(), b.GetCumulativeCount()))
			}
			return h.GetSampleCount(), uint64(h.GetSampleSum()), buckets
		}
	}
	return 0, 0, nil
}

// A commit that does not end (MySQL stalled, or a lock wait) holds a
// single create back for GroupWait at most: then it commits beside it.
func TestGroupCommitWaitsGroupWaitAtMost(t *testing.T) {
	reg := prometheus.NewRegistry()
	s, proxy, _ := proxiedStore(t, mysql.StoreConfig{Writers: 4, GroupWait: 50 * time.Millisecond, Registerer: reg})
	now := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var wg sync.WaitGroup
	for i := range 3 {
		if i == 0 {
			proxy.Stall()
		}
		wg.Go(func() {
			r := s.Create(ctx, []alarm.NewClock{{Application: "gw", BusinessID: fmt.Sprintf("c-%d", i), Payload: "{}",
				ContentType: "application/json", RingAt: now.Add(time.Hour)}}, now)
			if r[0].Err != nil {
				t.Errorf("create %d: %v", i, r[0].Err)
			}
		})
		time.Sleep(300 * time.Millisecond) // > GroupWait: each went to MySQL alone
	}
	proxy.Resume()
	wg.Wait()
	if n, _, _ := batchRows(t, reg); n != 3 {
		t.Errorf("%d batches, want 3: a create 300 ms behind a stalled commit went on after GroupWait (50ms)", n)
	}
}

// While one batch commits, single creates gather into one batch that
// waits for that commit instead of going in small batches side by side;
// a large request commits at once beside it. MySQL is stalled (a proxy
// holds every byte) so that the first commit stays in flight while the
// others arrive.
func TestGroupCommitWaitsForTheCommitInFlight(t *testing.T) {
	reg := prometheus.NewRegistry()
	s, proxy, direct := proxiedStore(t, mysql.StoreConfig{Writers: 4, GroupWait: 10 * time.Second, Registerer: reg})
	now := time.Now()
	clock := func(id string) alarm.NewClock {
		return alarm.NewClock{Application: "gc", BusinessID: id, Payload: "{}", ContentType: "application/json", RingAt: now.Add(time.Hour)}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var wg sync.WaitGroup
	var mu sync.Mutex
	var errs []error
	create := func(clocks []alarm.NewClock) {
		wg.Go(func() {
			for _, r := range s.Create(ctx, clocks, now) {
				if r.Err != nil {
					mu.Lock()
					errs = append(errs, r.Err)
					mu.Unlock()
				}
			}
		})
	}

	proxy.Stall()
	create([]alarm.NewClock{clock("first")}) // its batch commits, and waits in the stall
	time.Sleep(200 * time.Millisecond)
	var large []alarm.NewClock
	for i := range 200 {
		large = append(large, clock(fmt.Sprintf("large-%03d", i)))
	}
	create(large) // a quarter of a batch or more: commits at once, beside the first
	time.Sleep(200 * time.Millisecond)
	for i := range 50 {
		create([]alarm.NewClock{clock(fmt.Sprintf("single-%02d", i))}) // gathered into one batch
	}
	time.Sleep(300 * time.Millisecond)
	proxy.Resume()
	wg.Wait()
	if len(errs) > 0 {
		t.Fatalf("%d creates failed, the first: %v", len(errs), errs[0])
	}

	var n int
	if err := direct.Get(&n, "SELECT COUNT(*) FROM clock WHERE application = 'gc'"); err != nil {
		t.Fatal(err)
	}
	if n != 251 {
		t.Fatalf("%d clocks in the table, want 251", n)
	}
	batches, rows, sizes := batchRows(t, reg)
	// 1, 200 and 50: three batches. Writers each gathering for itself
	// made at least 4 of the singles alone, or more.
	if batches != 3 || rows != 251 {
		t.Errorf("%d batches holding %d rows (cumulative buckets %v); want 3 (1, 200 and 50) holding 251", batches, rows, sizes)
	}
}
