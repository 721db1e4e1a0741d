package mysql_test

import (
	"context"
	"database/sql"
	"fmt"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/clockd/clockd/internal/alarm"
	"github.com/clockd/clockd/internal/mysql"
)

// oneShardStore is a migrated store with one shard, on the test's own
// database (cfg.Shards is set to 1), that has sent its first heartbeat.
func oneShardStore(t *testing.T, cfg mysql.StoreConfig) (*mysql.Store, *sqlx.DB) {
	t.Helper()
	s, db := oneShardStoreUnannounced(t, cfg)
	// as in a cluster of this version: clocks are written with room for
	// their claim, claim_token 0 (claimroom_test.go has both forms)
	heartbeat(t, s, "a")
	return s, db
}

// oneShardStoreUnannounced is oneShardStore before its first heartbeat.
func oneShardStoreUnannounced(t *testing.T, cfg mysql.StoreConfig) (*mysql.Store, *sqlx.DB) {
	t.Helper()
	db, _ := schemaDB(t, true)
	if _, err := mysql.SetupShards(context.Background(), db, 1); err != nil {
		t.Fatal(err)
	}
	cfg.Shards = 1
	s := mysql.NewStore(db, cfg)
	t.Cleanup(s.Close)
	return s, db
}

func heartbeat(t *testing.T, s *mysql.Store, instance string) {
	t.Helper()
	// one process per instance id: the same start time at every beat
	if _, err := s.Heartbeat(context.Background(), instance, "", processStarted, time.Minute, true, 10*time.Second); err != nil {
		t.Fatal(err)
	}
}

// processStarted is when the tests' instances "started" (their heartbeats
// are one process's: see Store.Heartbeat).
var processStarted = time.UnixMilli(1_750_000_000_000)

// ringStore is a migrated store with one shard, and one pending clock due
// now.
func ringStore(t *testing.T) (*mysql.Store, int64) {
	t.Helper()
	s, _ := oneShardStore(t, mysql.StoreConfig{})
	ctx := context.Background()
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

// Claims and outcome writes touch exactly the listed clocks, whether the
// ids are close together (read as one primary-key range with the list as a
// filter) or scattered, and rung_at is each clock's own confirm time
// whether the chunk has one, a few or many distinct confirm times.
func TestRingWritesTouchOnlyListedClocks(t *testing.T) {
	s, db := oneShardStore(t, mysql.StoreConfig{})
	ctx := context.Background()
	now := time.Now().Truncate(time.Millisecond)
	all := createdClocks(t, s, "d", 200)
	leases, err := s.AcquireLeases(ctx, "a", 1, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	statusOf := func() map[int64]string {
		var rows []struct {
			ID     int64  `db:"id"`
			Status string `db:"status"`
		}
		if err := db.Select(&rows, "SELECT id, IF(status = 'pending' AND claim_token <> 0, 'firing', status) AS status FROM clock"); err != nil {
			t.Fatal(err)
		}
		out := map[int64]string{}
		for _, r := range rows {
			out[r.ID] = r.Status
		}
		return out
	}
	// dense: every clock of the first 100 but one; scattered: every 7th
	dense := append(append([]int64{}, all[:50]...), all[51:100]...)
	var scattered []int64
	for i := 100; i < 200; i += 7 {
		scattered = append(scattered, all[i])
	}
	for name, ids := range map[string][]int64{"dense": dense, "scattered": scattered} {
		t.Run(name, func(t *testing.T) {
			tok := int64(len(ids))
			got, err := s.Claim(ctx, "a", leases, ids, tok, time.Now().Add(time.Second), time.Now())
			if err != nil || len(got) != len(ids) {
				t.Fatalf("claimed %d of %d: %v", len(got), len(ids), err)
			}
			claimed := map[int64]bool{}
			for _, id := range ids {
				claimed[id] = true
			}
			for id, st := range statusOf() {
				if claimed[id] != (st == "firing") && st != "rung" {
					t.Fatalf("clock %d is %s after the claim (listed: %v)", id, st, claimed[id])
				}
			}
			// confirm times: many distinct for the first third, a few for
			// the rest
			var rungs []alarm.Rung
			want := map[int64]time.Time{}
			for i, id := range ids {
				at := now.Add(time.Duration(i) * time.Millisecond)
				if i >= len(ids)/3 {
					at = now.Add(time.Duration(i%3) * time.Second)
				}
				rungs = append(rungs, alarm.Rung{ID: id, At: at})
				want[id] = at
			}
			for _, chunk := range [][]alarm.Rung{rungs[:len(rungs)/3], rungs[len(rungs)/3:]} {
				if err := s.MarkRung(ctx, chunk, []int64{tok}); err != nil {
					t.Fatal(err)
				}
			}
			var rows []struct {
				ID     int64         `db:"id"`
				Status string        `db:"status"`
				RungAt sql.NullInt64 `db:"rung_at"`
			}
			if err := db.Select(&rows, "SELECT id, IF(status = 'pending' AND claim_token <> 0, 'firing', status) AS status, rung_at FROM clock"); err != nil {
				t.Fatal(err)
			}
			for _, r := range rows {
				w, listed := want[r.ID]
				switch {
				case listed && (r.Status != "rung" || r.RungAt.Int64 != w.UnixMilli()):
					t.Errorf("clock %d: %s rung_at %d, want rung at %d", r.ID, r.Status, r.RungAt.Int64, w.UnixMilli())
				case !listed && r.Status == "firing":
					t.Errorf("clock %d was not listed but is firing", r.ID)
				}
			}
		})
	}
	if st := statusOf()[all[50]]; st != "pending" {
		t.Errorf("the clock in the middle of the dense range, not listed, is %s; want pending", st)
	}
}

// createdClocks creates n clocks due a second ago, named prefix-NNN; it
// returns their ids.
func createdClocks(t *testing.T, s *mysql.Store, prefix string, n int) []int64 {
	t.Helper()
	now := time.Now()
	var in []alarm.NewClock
	for i := range n {
		in = append(in, alarm.NewClock{Application: "app", BusinessID: fmt.Sprintf("%s-%03d", prefix, i), Payload: "{}",
			ContentType: "application/json", RingAt: now.Add(-time.Second)})
	}
	var ids []int64
	for _, r := range s.Create(context.Background(), in, now) {
		if r.Err != nil {
			t.Fatal(r.Err)
		}
		ids = append(ids, r.Clock.ID)
	}
	return ids
}

// claimedClocks creates n clocks due now, named prefix-NNN, and claims
// them with token tok; it returns their ids.
func claimedClocks(t *testing.T, s *mysql.Store, prefix string, n int, tok int64) []int64 {
	t.Helper()
	ctx := context.Background()
	now := time.Now()
	leases, err := s.AcquireLeases(ctx, "a", 1, time.Minute)
	if err != nil || len(leases) != 1 {
		t.Fatalf("leases %v: %v", leases, err)
	}
	ids := createdClocks(t, s, prefix, n)
	if got, err := s.Claim(ctx, "a", leases, ids, tok, now.Add(time.Second), now); err != nil || len(got) != n {
		t.Fatalf("claimed %d of %d: %v", len(got), n, err)
	}
	return ids
}

type outcomeRow struct {
	ID        int64          `db:"id"`
	Status    string         `db:"status"`
	RungAt    sql.NullInt64  `db:"rung_at"`
	NextTry   int64          `db:"next_try_time"`
	LastError sql.NullString `db:"last_error"`
	Claimed   bool           `db:"claimed"`
}

func outcomeRows(t *testing.T, db *sqlx.DB, prefix string, n int) []outcomeRow {
	t.Helper()
	var rows []outcomeRow
	if err := db.Select(&rows, `SELECT id, status, rung_at, next_try_time, last_error, COALESCE(claim_token, 0) <> 0 AS claimed
		FROM clock WHERE business_id LIKE ?`, prefix+"-%"); err != nil {
		t.Fatal(err)
	}
	if len(rows) != n {
		t.Fatalf("%s: %d clocks, read %d", prefix, n, len(rows))
	}
	return rows
}

// Each clock of an outcome write gets its own values, however they fall
// over the ids: rung_at of a rung mark, and status, next try and error of
// failed attempts, are trees of CASE expressions (byIDTree) once there are
// more than a few distinct values.
func TestOutcomeWritesEachClockItsOwnValues(t *testing.T) {
	t.Parallel()
	s, db := oneShardStore(t, mysql.StoreConfig{})
	ctx := context.Background()
	now := time.Now().Truncate(time.Millisecond)
	for _, n := range []int{9, 17, 100, 500} {
		// in an order other than the ids', values shared in runs and
		// scattered, and a few of their own
		order := func(i int) int { return (i * 7) % n } // n is not a multiple of 7
		at := func(i int) time.Time {
			if i%5 == 0 {
				return now.Add(time.Duration(100+i) * time.Millisecond)
			}
			return now.Add(time.Duration(i%13) * time.Millisecond)
		}

		prefix := fmt.Sprintf("rung%d", n)
		ids := claimedClocks(t, s, prefix, n, int64(1000+n))
		rungs := make([]alarm.Rung, n)
		want := map[int64]int64{}
		for i := range n {
			rungs[i] = alarm.Rung{ID: ids[order(i)], At: at(i)}
			want[ids[order(i)]] = at(i).UnixMilli()
		}
		if err := s.MarkRung(ctx, rungs, []int64{int64(1000 + n)}); err != nil {
			t.Fatal(err)
		}
		for _, r := range outcomeRows(t, db, prefix, n) {
			if r.Status != "rung" || r.Claimed || r.RungAt.Int64 != want[r.ID] {
				t.Errorf("%s: clock %d %s (claimed %v) rung_at %d; want rung at %d", prefix, r.ID, r.Status, r.Claimed, r.RungAt.Int64, want[r.ID])
			}
		}

		prefix = fmt.Sprintf("fail%d", n)
		ids = claimedClocks(t, s, prefix, n, int64(2000+n))
		outs := make([]alarm.Outcome, n)
		wantOut := map[int64]alarm.Outcome{}
		for i := range n {
			o := alarm.Outcome{ID: ids[order(i)], Status: alarm.StatusPending, NextTryAt: at(i).Add(time.Minute),
				Error: fmt.Sprintf("unroutable %d", i%3)}
			if i%11 == 0 {
				o = alarm.Outcome{ID: o.ID, Status: alarm.StatusDead, NextTryAt: at(i), Error: "max_attempts reached"}
			}
			outs[i] = o
			wantOut[o.ID] = o
		}
		if err := s.Fail(ctx, outs, []int64{int64(2000 + n)}, now); err != nil {
			t.Fatal(err)
		}
		for _, r := range outcomeRows(t, db, prefix, n) {
			w := wantOut[r.ID]
			if r.Status != string(w.Status) || r.Claimed || r.NextTry != w.NextTryAt.UnixMilli() || r.LastError.String != w.Error {
				t.Errorf("%s: clock %d %s (claimed %v) next %d error %q; want %s next %d error %q", prefix, r.ID, r.Status, r.Claimed,
					r.NextTry, r.LastError.String, w.Status, w.NextTryAt.UnixMilli(), w.Error)
			}
		}
	}
}

// Waiting reads back, by primary key, the clocks a claim missed because
// their row was moved later than the ring loop had them: pending,
// unclaimed, due after until. Clocks missed for other reasons (cancelled,
// claimed, still due within until) are left out.
func TestWaitingReadsBackClocksMovedLater(t *testing.T) {
	s, _ := oneShardStore(t, mysql.StoreConfig{})
	ctx := context.Background()
	now := time.Now().Truncate(time.Millisecond)
	later := now.Add(time.Hour)
	var news []alarm.NewClock
	for i, at := range []time.Time{later, now, now, now} {
		news = append(news, alarm.NewClock{Application: "app", BusinessID: fmt.Sprintf("w-%d", i), Payload: "{}", ContentType: "application/json", RingAt: at})
	}
	var ids []int64
	for _, r := range s.Create(ctx, news, now) {
		if r.Err != nil {
			t.Fatal(r.Err)
		}
		ids = append(ids, r.Clock.ID)
	}
	if _, err := s.Cancel(ctx, alarm.Key{Application: "app", BusinessID: "w-2"}, now); err != nil {
		t.Fatal(err)
	}
	leases, err := s.AcquireLeases(ctx, "a", 1, time.Minute)
	if err != nil || len(leases) != 1 {
		t.Fatalf("acquire: %v %v", leases, err)
	}
	if got, err := s.Claim(ctx, "a", leases, ids[3:], 1, now.Add(time.Second), now); err != nil || len(got) != 1 {
		t.Fatalf("claim: %v %v", got, err)
	}
	got, err := s.Waiting(ctx, append(ids, 1<<40), now.Add(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].ID != ids[0] || got[0].Shard != 0 || !got[0].At.Equal(later) {
		t.Fatalf("Waiting = %+v, want only clock %d (moved later) at %v", got, ids[0], later)
	}
	if got, err := s.Waiting(ctx, nil, now); err != nil || len(got) != 0 {
		t.Errorf("Waiting of no ids = %v, %v", got, err)
	}
}

// A hand-over releases its shards under the epochs it drained: a lease of
// the shard taken again since (a newer epoch, its loader running) stays.
func TestReleaseLeasesAtIsFencedByEpoch(t *testing.T) {
	s, _ := ringStore(t)
	ctx := context.Background()
	leases, err := s.AcquireLeases(ctx, "a", 1, time.Minute)
	if err != nil || len(leases) != 1 {
		t.Fatalf("acquire: %v %v", leases, err)
	}
	old := leases[0]
	if err := s.ReleaseLeases(ctx, "a", []int{old.Shard}); err != nil {
		t.Fatal(err)
	}
	again, err := s.AcquireLeases(ctx, "a", 1, time.Minute)
	if err != nil || len(again) != 1 || again[0].Shard != old.Shard || again[0].Epoch == old.Epoch {
		t.Fatalf("acquire again: %v %v; want shard %d under a new epoch", again, err, old.Shard)
	}
	if err := s.ReleaseLeasesAt(ctx, "a", []alarm.Lease{old}); err != nil {
		t.Fatal(err)
	}
	if held, err := s.RenewLeases(ctx, "a", time.Minute); err != nil || len(held) != 1 || held[0] != again[0] {
		t.Fatalf("after a release under the old epoch a holds %v (%v); want %v still", held, err, again[0])
	}
	if err := s.ReleaseLeasesAt(ctx, "a", again); err != nil {
		t.Fatal(err)
	}
	if held, err := s.RenewLeases(ctx, "a", time.Minute); err != nil || len(held) != 0 {
		t.Fatalf("after a release under its epoch a holds %v (%v); want none", held, err)
	}
}
