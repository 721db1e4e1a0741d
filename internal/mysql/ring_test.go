package mysql_test

import (
	"context"
	"testing"
	"time"

	"github.com/clockd/clockd/internal/alarm"
	"github.com/clockd/clockd/internal/mysql"
)

// ringStore is a migrated store with one shard, and one pending clock due
// now.
func ringStore(t *testing.T) (*mysql.Store, int64) {
	t.Helper()
	db, _ := schemaDB(t, true)
	ctx := context.Background()
	if _, err := mysql.SetupShards(ctx, db, 1); err != nil {
		t.Fatal(err)
	}
	s := mysql.NewStore(db, mysql.StoreConfig{Shards: 1})
	t.Cleanup(s.Close)
	now := time.Now()
	r := s.Create(ctx, []alarm.NewClock{{Application: "app", BusinessID: "b-1", Payload: "{}", ContentType: "application/json", RingAt: now}}, now)
	if r[0].Err != nil {
		t.Fatal(r[0].Err)
	}
	return s, r[0].Clock.ID
}

func status(t *testing.T, s *mysql.Store, want alarm.Status) alarm.Clock {
	t.Helper()
	c, err := s.Get(context.Background(), alarm.Key{Application: "app", BusinessID: "b-1"})
	if err != nil {
		t.Fatal(err)
	}
	if c.Status != want {
		t.Fatalf("status %s, want %s", c.Status, want)
	}
	return c
}

// An instance that lost a shard and records late cannot overwrite the
// claim of the shard's new owner: outcome writes are fenced by claim token.
func TestRingWritesAreFencedByClaimToken(t *testing.T) {
	s, id := ringStore(t)
	ctx := context.Background()
	ids := []int64{id}
	claim := func(owner string, token int64) alarm.Lease {
		t.Helper()
		leases, err := s.AcquireLeases(ctx, owner, 1, time.Minute)
		if err != nil || len(leases) != 1 {
			t.Fatalf("acquire: %v %v", leases, err)
		}
		now := time.Now()
		got, err := s.Claim(ctx, owner, leases, ids, token, now.Add(time.Second), now)
		if err != nil || len(got) != 1 {
			t.Fatalf("claim by %s: %v %v", owner, got, err)
		}
		return leases[0]
	}
	claim("a", 1)
	status(t, s, alarm.StatusFiring)
	// a loses the shard; b takes it, recovers the clock a left firing and
	// claims it
	if err := s.ReleaseLeases(ctx, "a", []int{0}); err != nil {
		t.Fatal(err)
	}
	leases, err := s.AcquireLeases(ctx, "b", 1, time.Minute)
	if err != nil || len(leases) != 1 {
		t.Fatal(leases, err)
	}
	if n, err := s.RecoverFiring(ctx, 0, leases[0].Epoch, time.Now().Add(-time.Hour), nil, time.Now()); err != nil || n != 1 {
		t.Fatalf("recover: %d %v", n, err)
	}
	now := time.Now()
	got, err := s.Claim(ctx, "b", leases, ids, 2, now.Add(time.Second), now)
	if err != nil || len(got) != 1 {
		t.Fatalf("claim by b: %v %v", got, err)
	}
	// a's ring may have reached the broker: b's is attempt 2, not 1 again
	if got[0].Attempts != 2 {
		t.Fatalf("the re-ring after a takeover is attempt %d, want 2", got[0].Attempts)
	}
	// a's late writes change nothing
	late := []func() error{
		func() error { return s.Unclaim(ctx, ids, []int64{1}, time.Now()) },
		func() error { return s.MarkRung(ctx, []alarm.Rung{{ID: id, At: time.Now()}}, []int64{1}) },
		func() error { return s.Expire(ctx, ids, []int64{1, 7}, time.Now()) },
		func() error {
			return s.Fail(ctx, []alarm.Outcome{{ID: id, Status: alarm.StatusPending, NextTryAt: time.Now(), Error: "x"}}, []int64{1}, time.Now())
		},
		func() error { return s.Release(ctx, 1, ids, time.Now()) },
		func() error { return s.Unclaim(ctx, ids, nil, time.Now()) },
	}
	for i, w := range late {
		if err := w(); err != nil {
			t.Fatalf("late write %d: %v", i, err)
		}
		if c := status(t, s, alarm.StatusFiring); c.Attempts != 2 {
			t.Fatalf("late write %d changed the attempts to %d", i, c.Attempts)
		}
	}
	// b's write applies, with its own confirm time
	confirmed := time.Now().Add(-1500 * time.Millisecond).Truncate(time.Millisecond)
	if err := s.MarkRung(ctx, []alarm.Rung{{ID: id, At: confirmed}}, []int64{2}); err != nil {
		t.Fatal(err)
	}
	if c := status(t, s, alarm.StatusRung); c.Attempts != 2 || !c.RungAt.Equal(confirmed) {
		t.Errorf("after b's ring: attempts %d rung_at %v, want 2 and %v", c.Attempts, c.RungAt, confirmed)
	}
}

// A claim whose answer was lost is released by its token, and only by it.
func TestRingReleaseLostClaim(t *testing.T) {
	s, id := ringStore(t)
	ctx := context.Background()
	leases, err := s.AcquireLeases(ctx, "a", 1, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	if _, err := s.Claim(ctx, "a", leases, []int64{id}, 5, now.Add(time.Second), now); err != nil {
		t.Fatal(err)
	}
	if err := s.Release(ctx, 6, []int64{id}, time.Now()); err != nil {
		t.Fatal(err)
	}
	status(t, s, alarm.StatusFiring)
	if err := s.Release(ctx, 5, []int64{id}, time.Now()); err != nil {
		t.Fatal(err)
	}
	if c := status(t, s, alarm.StatusPending); c.Attempts != 0 {
		t.Errorf("attempts %d after a release", c.Attempts)
	}
	// claimable again
	now = time.Now()
	if got, err := s.Claim(ctx, "a", leases, []int64{id}, 8, now.Add(time.Second), now); err != nil || len(got) != 1 {
		t.Fatalf("claim after release: %v %v", got, err)
	}
}
