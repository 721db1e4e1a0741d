package mysql_test

import (
	"context"
	"database/sql"
	"errors"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/clockd/clockd/internal/alarm"
	"github.com/clockd/clockd/internal/mysql"
)

// claimStore is a migrated store with one shard and two pending clocks:
// b-1 due now and b-2 due in an hour.
func claimStore(t *testing.T) (*sqlx.DB, *mysql.Store, []alarm.Clock) {
	t.Helper()
	s, db := oneShardStore(t, mysql.StoreConfig{ClaimAhead: time.Second})
	ctx := context.Background()
	now := time.Now()
	res := s.Create(ctx, []alarm.NewClock{
		{Application: "app", BusinessID: "b-1", Payload: "{}", ContentType: "application/json", RingAt: now},
		{Application: "app", BusinessID: "b-2", Payload: "{}", ContentType: "application/json", RingAt: now.Add(time.Hour)},
	}, now)
	var out []alarm.Clock
	for _, r := range res {
		if r.Err != nil {
			t.Fatal(r.Err)
		}
		out = append(out, r.Clock)
	}
	return db, s, out
}

// indexed is what the clock table's secondary indexes hold of a row, and
// the claim columns.
type indexed struct {
	Shard      int           `db:"shard"`
	Status     string        `db:"status"`
	Next       int64         `db:"next_try_time"`
	Update     int64         `db:"update_time"`
	App        string        `db:"application"`
	ClaimToken sql.NullInt64 `db:"claim_token"`
	ClaimTime  sql.NullInt64 `db:"claim_time"`
	Attempts   int           `db:"attempts"`
}

func rawRow(t *testing.T, db *sqlx.DB, id int64) indexed {
	t.Helper()
	var r indexed
	if err := db.Get(&r, "SELECT shard, status, next_try_time, update_time, application, claim_token, claim_time, attempts FROM clock WHERE id = ?", id); err != nil {
		t.Fatal(err)
	}
	return r
}

// A claim writes only unindexed columns (issue 15: no index entry moves
// at the claim), yet everything outside tells the clock is firing: the
// API's status, the list by status, the counts, and a cancel or a change
// refused as for any firing clock. The rung mark then finishes it.
func TestClaimLeavesIndexedColumnsAlone(t *testing.T) {
	db, s, clocks := claimStore(t)
	ctx := context.Background()
	due := clocks[0]
	before := rawRow(t, db, due.ID)
	leases, err := s.AcquireLeases(ctx, "a", 1, time.Minute)
	if err != nil || len(leases) != 1 {
		t.Fatal(leases, err)
	}
	time.Sleep(5 * time.Millisecond) // a claim that wrote update_time would show
	now := time.Now()
	got, err := s.Claim(ctx, "a", leases, []int64{due.ID}, 77, now.Add(time.Second), now)
	if err != nil || len(got) != 1 || got[0].Status != alarm.StatusFiring || got[0].Attempts != 1 {
		t.Fatalf("claim: %+v %v", got, err)
	}
	after := rawRow(t, db, due.ID)
	if after.Shard != before.Shard || after.Status != "pending" || after.Next != before.Next ||
		after.Update != before.Update || after.App != before.App {
		t.Fatalf("the claim changed an indexed column: before %+v, after %+v", before, after)
	}
	if !after.ClaimToken.Valid || after.ClaimToken.Int64 != 77 || !after.ClaimTime.Valid || after.ClaimTime.Int64 != now.UnixMilli() || after.Attempts != 1 {
		t.Fatalf("claim columns: %+v", after)
	}

	key := alarm.Key{Application: "app", BusinessID: "b-1"}
	if c, err := s.Get(ctx, key); err != nil || c.Status != alarm.StatusFiring {
		t.Fatalf("get: %s %v; want firing", c.Status, err)
	}
	list := func(st alarm.Status) []int64 {
		t.Helper()
		var ids []int64
		for _, app := range []string{"app", ""} { // by application, and across them
			cs, err := s.List(ctx, alarm.ListQuery{Application: app, Status: st, Limit: 10})
			if err != nil {
				t.Fatal(err)
			}
			var these []int64
			for _, c := range cs {
				if c.Status != st {
					t.Fatalf("list %s (application %q): clock %d is %s", st, app, c.ID, c.Status)
				}
				these = append(these, c.ID)
			}
			if app == "" && len(these) != len(ids) {
				t.Fatalf("list %s: %v by application, %v across them", st, ids, these)
			}
			ids = these
		}
		return ids
	}
	if ids := list(alarm.StatusFiring); len(ids) != 1 || ids[0] != due.ID {
		t.Fatalf("list firing: %v", ids)
	}
	if ids := list(alarm.StatusPending); len(ids) != 1 || ids[0] != clocks[1].ID {
		t.Fatalf("list pending: %v", ids)
	}
	counts, err := s.CountClocks(ctx)
	if err != nil || counts[alarm.StatusFiring] != 1 || counts[alarm.StatusPending] != 1 {
		t.Fatalf("counts: %v %v; want 1 firing, 1 pending", counts, err)
	}
	per, err := s.StatusCounts(ctx, "app", 10)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range per {
		want := map[alarm.Status]int64{alarm.StatusFiring: 1, alarm.StatusPending: 1}[c.Status]
		if c.Count != want {
			t.Fatalf("console counts: %s %d, want %d", c.Status, c.Count, want)
		}
	}

	if c, err := s.Cancel(ctx, key, time.Now()); !errors.Is(err, alarm.ErrConflict) {
		t.Fatalf("cancel of a firing clock: %s %v; want a conflict", c.Status, err)
	}
	_, err = s.Reschedule(ctx, key, time.Now(), func(c alarm.Clock) (alarm.Clock, error) {
		c.Payload = `{"changed":true}`
		return c, nil
	})
	if !errors.Is(err, alarm.ErrConflict) {
		t.Fatalf("change of a firing clock: %v; want a conflict", err)
	}
	// a second claim of the same clock gets nothing
	if again, err := s.Claim(ctx, "a", leases, []int64{due.ID}, 78, now.Add(time.Second), now); err != nil || len(again) != 0 {
		t.Fatalf("second claim: %+v %v", again, err)
	}

	if err := s.MarkRung(ctx, []alarm.Rung{{ID: due.ID, At: time.Now()}}, []int64{77}); err != nil {
		t.Fatal(err)
	}
	if r := rawRow(t, db, due.ID); r.Status != "rung" || r.ClaimToken.Valid {
		t.Fatalf("after the ring: %+v", r)
	}
	if c, err := s.Get(ctx, key); err != nil || c.Status != alarm.StatusRung {
		t.Fatalf("get after the ring: %s %v", c.Status, err)
	}
}

// Recovery puts back the claims of an earlier owner (older epoch), the
// stale claims of the current one that it no longer holds, and rows that
// earlier versions left with status 'firing'; never a claim it holds or
// one made within the firing timeout.
func TestRecoverFiringBothForms(t *testing.T) {
	db, s, _ := claimStore(t)
	ctx := context.Background()
	now := time.Now()
	var ids []int64
	var batch []alarm.NewClock
	for _, k := range []string{"old-epoch", "stale", "fresh", "held", "legacy", "legacy-fresh"} {
		batch = append(batch, alarm.NewClock{Application: "rec", BusinessID: k, Payload: "{}", ContentType: "application/json", RingAt: now})
	}
	for _, r := range s.Create(ctx, batch, now) {
		if r.Err != nil {
			t.Fatal(r.Err)
		}
		ids = append(ids, r.Clock.ID)
	}
	leases, err := s.AcquireLeases(ctx, "a", 1, time.Minute)
	if err != nil || len(leases) != 1 {
		t.Fatal(leases, err)
	}
	ep := leases[0].Epoch
	hour := now.Add(-time.Hour).UnixMilli()
	set := func(id int64, q string, args ...any) {
		t.Helper()
		if _, err := db.Exec("UPDATE clock SET "+q+" WHERE id = ?", append(args, id)...); err != nil {
			t.Fatal(err)
		}
	}
	set(ids[0], "claim_token = 1, claim_epoch = ?, claim_time = ?", ep-1, now.UnixMilli())
	set(ids[1], "claim_token = 2, claim_epoch = ?, claim_time = ?", ep, hour)
	set(ids[2], "claim_token = 3, claim_epoch = ?, claim_time = ?", ep, now.UnixMilli())
	set(ids[3], "claim_token = 4, claim_epoch = ?, claim_time = ?", ep, hour)
	set(ids[4], "status = 'firing', claim_token = 5, claim_epoch = ?, update_time = ?", ep, hour)
	set(ids[5], "status = 'firing', claim_token = 6, claim_epoch = ?, update_time = ?", ep, now.UnixMilli())
	n, err := s.RecoverFiring(ctx, 0, ep, now.Add(-time.Minute), []int64{4}, now)
	if err != nil || n != 3 {
		t.Fatalf("recovered %d (%v), want 3", n, err)
	}
	want := map[string]alarm.Status{"old-epoch": alarm.StatusPending, "stale": alarm.StatusPending, "fresh": alarm.StatusFiring,
		"held": alarm.StatusFiring, "legacy": alarm.StatusPending, "legacy-fresh": alarm.StatusFiring}
	for k, st := range want {
		c, err := s.Get(ctx, alarm.Key{Application: "rec", BusinessID: k})
		if err != nil || c.Status != st {
			t.Errorf("%s: %s %v, want %s", k, c.Status, err, st)
		}
	}
	// what was recovered is loaded again
	ds, err := s.LoadDue(ctx, 0, time.Time{}, 0, now.Add(time.Second), 100)
	if err != nil {
		t.Fatal(err)
	}
	loaded := map[int64]bool{}
	for _, d := range ds {
		loaded[d.ID] = true
	}
	for i, k := range []string{"old-epoch", "stale", "legacy"} {
		if !loaded[ids[i]] {
			t.Errorf("%s was recovered but is not loaded", k)
		}
	}
}
