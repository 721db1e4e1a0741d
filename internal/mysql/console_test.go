package mysql_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/clockd/clockd/internal/alarm"
	"github.com/clockd/clockd/internal/mysql"
)

// The console's reads: capped counts, the due histogram, failing clocks
// grouped by error, and instance heap sizes written with the heartbeat.
func TestConsoleReads(t *testing.T) {
	s, db := historyStore(t, mysql.StoreConfig{})
	ctx := context.Background()
	now := time.Now().UTC().Truncate(time.Minute)
	mk := func(app, id string, at time.Time) int64 {
		r := createOne(t, s, alarm.NewClock{Application: app, BusinessID: id, Payload: "{}", ContentType: "application/json", RingAt: at}, now)
		if r.Err != nil {
			t.Fatal(r.Err)
		}
		return r.Clock.ID
	}
	// shop: 12 pending due over the next hour (4 in minute 5), 2 dead.
	for i := range 12 {
		m := i
		if i < 3 {
			m = 5
		}
		mk("shop", fmt.Sprintf("p-%d", i), now.Add(time.Duration(m)*time.Minute+time.Second))
	}
	for i := range 2 {
		finish(t, db, mk("shop", fmt.Sprintf("d-%d", i), now.Add(time.Minute)), alarm.StatusDead, now)
	}
	// lost: failing unroutable, due again in 30 s; and one due in 2 h.
	failing := mk("lost", "f-1", now.Add(-time.Minute))
	if _, err := db.Exec("UPDATE clock SET attempts = 3, last_error = 'rabbit: message unroutable', next_try_time = ? WHERE id = ?",
		now.Add(30*time.Second).UnixMilli(), failing); err != nil {
		t.Fatal(err)
	}
	mk("lost", "later", now.Add(2*time.Hour))

	apps, err := s.Applications(ctx, 10)
	if err != nil || len(apps) != 2 || apps[0] != "lost" || apps[1] != "shop" {
		t.Fatalf("Applications = %v, %v", apps, err)
	}
	counts, err := s.StatusCounts(ctx, "shop", 10)
	if err != nil {
		t.Fatal(err)
	}
	got := map[alarm.Status]alarm.StatusCount{}
	for _, c := range counts {
		got[c.Status] = c
	}
	// 12 pending past the cap of 10: InnoDB's estimate of the range, or
	// the cap as a lower bound.
	if c := got[alarm.StatusPending]; !(c.Estimated && c.Count > 10 && !c.AtLeast) && !(c.AtLeast && c.Count == 10) {
		t.Errorf("pending of shop past the cap of 10: %+v, want an estimate above 10 or 10 at least", c)
	}
	if c := got[alarm.StatusDead]; c.Count != 2 || c.AtLeast {
		t.Errorf("dead of shop: %+v", c)
	}
	if c := got[alarm.StatusRung]; c.Count != 0 || c.AtLeast {
		t.Errorf("rung of shop: %+v", c)
	}

	buckets, capped, err := s.DueHistogram(ctx, now, time.Minute, 60, 1000)
	if err != nil || capped || len(buckets) != 60 {
		t.Fatalf("DueHistogram: %d buckets, capped %v, %v", len(buckets), capped, err)
	}
	var total int64
	for _, b := range buckets {
		total += b.Count
	}
	// 12 of shop and the failing clock of lost; not the one due in 2 h.
	if total != 13 || buckets[5].Count != 4 || buckets[0].Count != 1 || !buckets[5].At.Equal(now.Add(5*time.Minute)) {
		t.Errorf("DueHistogram: total %d, minute 0: %d, minute 5: %+v", total, buckets[0].Count, buckets[5])
	}
	if _, capped, err := s.DueHistogram(ctx, now, time.Minute, 60, 5); err != nil || !capped {
		t.Errorf("DueHistogram over 5 rows: capped %v, %v", capped, err)
	}

	groups, examined, err := s.Failing(ctx, now.Add(5*time.Minute), 1000)
	if err != nil {
		t.Fatal(err)
	}
	// Examined: the pending clocks due by now+5m: lost/f-1, shop/p-3, shop/p-4.
	if len(groups) != 1 || groups[0].Application != "lost" || groups[0].Count != 1 || groups[0].MaxAttempts != 3 ||
		groups[0].Sample != "f-1" || groups[0].LastError != "rabbit: message unroutable" || examined != 3 {
		t.Errorf("Failing = %+v, examined %d", groups, examined)
	}
	// While retried, the failing clock is firing: it stays on the list. A
	// clock firing for its first attempt (no error yet) is not failing.
	if _, err := db.Exec("UPDATE clock SET status = 'firing', attempts = attempts + 1 WHERE application = 'lost' AND business_id = 'f-1' OR application = 'shop' AND business_id = 'p-3'"); err != nil {
		t.Fatal(err)
	}
	groups, examined, err = s.Failing(ctx, now.Add(5*time.Minute), 1000)
	if err != nil || len(groups) != 1 || groups[0].Application != "lost" || groups[0].Count != 1 || groups[0].MaxAttempts != 4 || examined != 3 {
		t.Errorf("Failing with the failing clock being retried = %+v, examined %d, %v", groups, examined, err)
	}
	if _, err := db.Exec("UPDATE clock SET status = 'pending', attempts = attempts - 1 WHERE application = 'lost' AND business_id = 'f-1' OR application = 'shop' AND business_id = 'p-3'"); err != nil {
		t.Fatal(err)
	}

	if _, err := s.Heartbeat(ctx, "i-1", "127.0.0.1:1", now, time.Minute, true, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	inst, leases, dbNow, err := s.Instances(ctx)
	if err != nil || len(inst) != 1 || !inst[0].StatsAt.IsZero() || len(leases) != 4 || dbNow.IsZero() {
		t.Fatalf("Instances before stats: %+v %d %v %v", inst, len(leases), dbNow, err)
	}
	if err := s.SetInstanceStats(ctx, "i-1", 1234, 5<<20); err != nil {
		t.Fatal(err)
	}
	inst, _, _, err = s.Instances(ctx)
	if err != nil || inst[0].HeapClocks != 1234 || inst[0].HeapBytes != 5<<20 || inst[0].StatsAt.IsZero() || !inst[0].Rings {
		t.Errorf("Instances after stats: %+v, %v", inst, err)
	}

	// An instance that cannot ring is live but takes no part in the
	// shares; its next heartbeat that can ring puts it back.
	if _, err := s.Heartbeat(ctx, "i-2", "127.0.0.1:2", now, time.Minute, false, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if ids, err := s.RingingInstances(ctx); err != nil || !slices.Equal(ids, []string{"i-1"}) {
		t.Errorf("RingingInstances with i-2 unable to ring = %v, %v; want [i-1]", ids, err)
	}
	inst, _, _, err = s.Instances(ctx)
	if err != nil || len(inst) != 2 || inst[1].ID != "i-2" || inst[1].Rings {
		t.Errorf("Instances with i-2 unable to ring: %+v, %v", inst, err)
	}
	if _, err := s.Heartbeat(ctx, "i-2", "127.0.0.1:2", now, time.Minute, true, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if ids, err := s.RingingInstances(ctx); err != nil || !slices.Equal(ids, []string{"i-1", "i-2"}) {
		t.Errorf("RingingInstances with both able to ring = %v, %v", ids, err)
	}
}

// The heartbeat answers the largest preload window of the live instances:
// a create for another instance's shard is hinted within it.
func TestHeartbeatAnswersTheLargestLiveWindow(t *testing.T) {
	t.Parallel()
	s, _ := historyStore(t, mysql.StoreConfig{})
	ctx := context.Background()
	now := time.Now()
	if w, err := s.Heartbeat(ctx, "w-1", "", now, time.Minute, true, 2*time.Second); err != nil || w != 2*time.Second {
		t.Fatalf("alone: %s, %v; want 2s", w, err)
	}
	if w, err := s.Heartbeat(ctx, "w-2", "", now, time.Minute, true, 10*time.Second); err != nil || w != 10*time.Second {
		t.Fatalf("with a 10 s peer: %s, %v; want 10s", w, err)
	}
	if w, err := s.Heartbeat(ctx, "w-1", "", now, time.Minute, true, 2*time.Second); err != nil || w != 10*time.Second {
		t.Fatalf("w-1 again: %s, %v; want 10s (w-2's)", w, err)
	}
	if err := s.Leave(ctx, "w-2"); err != nil {
		t.Fatal(err)
	}
	if w, err := s.Heartbeat(ctx, "w-1", "", now, time.Minute, true, 2*time.Second); err != nil || w != 2*time.Second {
		t.Fatalf("after w-2 left: %s, %v; want 2s", w, err)
	}
}
