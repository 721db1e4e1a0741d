package mysql_test

import (
	"context"
	"database/sql"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/clockd/clockd/internal/alarm"
	"github.com/clockd/clockd/internal/mysql"
)

// claimCols are a clock's claim columns as the table holds them.
type claimCols struct {
	Token sql.NullInt64 `db:"claim_token"`
	Epoch sql.NullInt64 `db:"claim_epoch"`
	Time  sql.NullInt64 `db:"claim_time"`
}

// roomy is what a clock not yet claimed holds: 0, 0, 0.
var roomy = claimCols{sql.NullInt64{Valid: true}, sql.NullInt64{Valid: true}, sql.NullInt64{Valid: true}}

func claimColsOf(t *testing.T, db *sqlx.DB, id int64) claimCols {
	t.Helper()
	var c claimCols
	if err := db.Get(&c, "SELECT claim_token, claim_epoch, claim_time FROM clock WHERE id = ?", id); err != nil {
		t.Fatal(err)
	}
	return c
}

// pendingClock creates clock app/id due at ringAt and returns its id.
func pendingClock(t *testing.T, s *mysql.Store, id string, ringAt, now time.Time) int64 {
	t.Helper()
	r := createOne(t, s, alarm.NewClock{Application: "app", BusinessID: id, Payload: "{}",
		ContentType: "application/json", RingAt: ringAt}, now)
	if r.Err != nil {
		t.Fatal(r.Err)
	}
	return r.Clock.ID
}

// A new clock is written with the room its claim needs (claim_token,
// claim_epoch and claim_time 0, not NULL: the claim then updates the record
// in place) only while every live instance reads claim_token 0 as "not
// claimed". While an instance of an earlier version runs (its heartbeat
// leaves claim_room 0), new clocks get claim_token NULL, which it reads as
// before. Clocks of both forms are pending, load, claim, ring, cancel and
// count alike.
func TestClaimRoomFollowsEveryLiveInstance(t *testing.T) {
	var logs mysql.LockedBuffer
	s, db := oneShardStore(t, mysql.StoreConfig{ClaimAhead: time.Second, Logger: slog.New(slog.NewJSONHandler(&logs, nil))})
	ctx := context.Background()
	now := time.Now()
	create := func(id string) int64 { return pendingClock(t, s, id, now, now) }

	if logs.String() != "" {
		t.Fatalf("logged with every instance of this version: %s", logs.String())
	}
	first := create("roomy")
	if c := claimColsOf(t, db, first); c != roomy {
		t.Fatalf("with every instance of this version: claim columns %+v, want 0, 0, 0", c)
	}

	// an instance of an earlier version joins: its heartbeat has no claim_room
	if _, err := db.Exec(`INSERT INTO clock_instance (instance_id, http_addr, started_at, expires_at, rings)
		VALUES ('old', '', 0, CAST(UNIX_TIMESTAMP(NOW(3)) * 1000 AS SIGNED) + 60000, 1)`); err != nil {
		t.Fatal(err)
	}
	heartbeat(t, s, "a")
	heartbeat(t, s, "a")
	if n := strings.Count(logs.String(), `"msg":"instances of an earlier version are live`); n != 1 || !strings.Contains(logs.String(), `"instances":1`) {
		t.Fatalf("an earlier version live, logged %d times: %s", n, logs.String())
	}
	legacy := create("legacy")
	if c := claimColsOf(t, db, legacy); c.Token.Valid {
		t.Fatalf("with an earlier version live: claim_token %+v, want NULL", c.Token)
	}

	// both are pending, counted as pending, and not taken for firing by recovery
	for _, k := range []string{"roomy", "legacy"} {
		c, err := s.Get(ctx, alarm.Key{Application: "app", BusinessID: k})
		if err != nil || c.Status != alarm.StatusPending {
			t.Fatalf("%s: %s %v, want pending", k, c.Status, err)
		}
	}
	counts, err := s.CountClocks(ctx)
	if err != nil || counts[alarm.StatusPending] != 2 || counts[alarm.StatusFiring] != 0 {
		t.Fatalf("counts %v %v, want 2 pending, 0 firing", counts, err)
	}
	leases, err := s.AcquireLeases(ctx, "a", 1, time.Minute)
	if err != nil || len(leases) != 1 {
		t.Fatal(leases, err)
	}
	if n, err := s.RecoverFiring(ctx, 0, leases[0].Epoch+1, now.Add(time.Hour), nil, now); err != nil || n != 0 {
		t.Fatalf("recovered %d unclaimed clocks (%v)", n, err)
	}
	ds, err := s.LoadDue(ctx, 0, time.Time{}, 0, now.Add(time.Second), 10)
	if err != nil || len(ds) != 2 {
		t.Fatalf("loaded %v %v, want both", ds, err)
	}

	// both are claimed, firing, and rung; a rung clock's claim_token is NULL
	got, err := s.Claim(ctx, "a", leases, []int64{first, legacy}, 41, now.Add(time.Second), now)
	if err != nil || len(got) != 2 {
		t.Fatalf("claimed %+v %v, want both", got, err)
	}
	for _, c := range got {
		if c.Status != alarm.StatusFiring || c.Attempts != 1 {
			t.Fatalf("claimed %+v, want firing, attempt 1", c)
		}
	}
	if c := claimColsOf(t, db, first); c.Token.Int64 != 41 || c.Epoch.Int64 != leases[0].Epoch || c.Time.Int64 != now.UnixMilli() {
		t.Fatalf("claimed: %+v", c)
	}
	counts, err = s.CountClocks(ctx)
	if err != nil || counts[alarm.StatusFiring] != 2 {
		t.Fatalf("counts %v %v, want 2 firing", counts, err)
	}
	if err := s.MarkRung(ctx, []alarm.Rung{{ID: first, At: now}, {ID: legacy, At: now}}, []int64{41}); err != nil {
		t.Fatal(err)
	}
	for _, id := range []int64{first, legacy} {
		if c := claimColsOf(t, db, id); c.Token.Valid {
			t.Fatalf("rung clock %d: claim_token %+v, want NULL", id, c.Token)
		}
	}

	// the earlier version is gone: new clocks have room again, and cancel
	cancelled := create("cancelled")
	if c := claimColsOf(t, db, cancelled); c.Token.Valid {
		t.Fatalf("earlier version still live: claim_token %+v, want NULL", c.Token)
	}
	if _, err := db.Exec("UPDATE clock_instance SET expires_at = 0 WHERE instance_id = 'old'"); err != nil {
		t.Fatal(err)
	}
	heartbeat(t, s, "a")
	if !strings.Contains(logs.String(), `"msg":"every live instance is of this version`) {
		t.Fatalf("the earlier version gone, not logged: %s", logs.String())
	}
	again := create("again")
	if c := claimColsOf(t, db, again); c != roomy {
		t.Fatalf("earlier version gone: claim columns %+v, want 0, 0, 0", c)
	}
	for _, k := range []string{"cancelled", "again"} {
		c, err := s.Cancel(ctx, alarm.Key{Application: "app", BusinessID: k}, now)
		if err != nil || c.Status != alarm.StatusCancelled {
			t.Fatalf("cancel %s: %s %v", k, c.Status, err)
		}
	}
}

// A replayed clock is pending again with room for its next claim.
func TestReplayLeavesRoomForTheClaim(t *testing.T) {
	s, db := oneShardStore(t, mysql.StoreConfig{ClaimAhead: time.Second})
	ctx := context.Background()
	ids := claimedClocks(t, s, "r", 1, 9)
	now := time.Now()
	if err := s.Fail(ctx, []alarm.Outcome{{ID: ids[0], Status: alarm.StatusDead, Error: "gone"}}, []int64{9}, now); err != nil {
		t.Fatal(err)
	}
	c, err := s.Replay(ctx, alarm.Key{Application: "app", BusinessID: "r-000"}, now)
	if err != nil || c.Status != alarm.StatusPending {
		t.Fatalf("replay: %s %v", c.Status, err)
	}
	if cc := claimColsOf(t, db, ids[0]); cc != roomy {
		t.Fatalf("replayed: claim columns %+v, want 0, 0, 0", cc)
	}
}

// A claimed clock that goes back to pending (its claim released or undone,
// a failed attempt to be tried again, a stale claim recovered) keeps the
// room for its next claim: claim_token 0.
func TestBackToPendingKeepsRoomForTheClaim(t *testing.T) {
	s, db := oneShardStore(t, mysql.StoreConfig{ClaimAhead: time.Second})
	ctx := context.Background()
	ids := claimedClocks(t, s, "p", 4, 21)
	now := time.Now()
	if err := s.Release(ctx, 21, ids[:1], now); err != nil {
		t.Fatal(err)
	}
	if err := s.Unclaim(ctx, ids[1:2], []int64{21}, now); err != nil {
		t.Fatal(err)
	}
	if err := s.Fail(ctx, []alarm.Outcome{{ID: ids[2], Status: alarm.StatusPending, NextTryAt: now.Add(time.Second), Error: "nack"}},
		[]int64{21}, now); err != nil {
		t.Fatal(err)
	}
	leases, err := s.AcquireLeases(ctx, "a", 1, time.Minute)
	if err != nil || len(leases) != 1 {
		t.Fatal(leases, err)
	}
	if n, err := s.RecoverFiring(ctx, 0, leases[0].Epoch+1, now.Add(time.Minute), nil, now); err != nil || n != 1 {
		t.Fatalf("recovered %d (%v), want 1", n, err)
	}
	for i, how := range []string{"released", "unclaimed", "failed", "recovered"} {
		var tok sql.NullInt64
		if err := db.Get(&tok, "SELECT claim_token FROM clock WHERE id = ? AND status = 'pending'", ids[i]); err != nil {
			t.Fatalf("%s: %v", how, err)
		}
		if tok != (sql.NullInt64{Valid: true}) {
			t.Errorf("%s: claim_token %+v, want 0", how, tok)
		}
	}
}

// Until its first heartbeat a store does not know whether an instance of an
// earlier version is live, so it writes new clocks as that version reads
// them: claim_token NULL. Its first heartbeat (with no earlier version
// live) gives new clocks room for their claim.
func TestNoRoomBeforeTheFirstHeartbeat(t *testing.T) {
	s, db := oneShardStoreUnannounced(t, mysql.StoreConfig{})
	now := time.Now()
	create := func(id string) int64 { return pendingClock(t, s, id, now.Add(time.Hour), now) }
	if c := claimColsOf(t, db, create("before")); c.Token.Valid {
		t.Fatalf("before the first heartbeat: claim_token %+v, want NULL", c.Token)
	}
	heartbeat(t, s, "a")
	if c := claimColsOf(t, db, create("after")); c != roomy {
		t.Fatalf("after the first heartbeat: claim columns %+v, want 0, 0, 0", c)
	}
}
