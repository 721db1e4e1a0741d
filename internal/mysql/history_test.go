package mysql_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/pressly/goose/v3"

	"github.com/clockd/clockd/internal/alarm"
	"github.com/clockd/clockd/internal/mysql"
	"github.com/clockd/clockd/migrations"
)

// historyStore is a migrated store on the test's own database.
func historyStore(t *testing.T, cfg mysql.StoreConfig) (*mysql.Store, *sqlx.DB) {
	t.Helper()
	db, _ := schemaDB(t, true)
	n, err := mysql.SetupShards(context.Background(), db, 4)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Shards = n
	s := mysql.NewStore(db, cfg)
	t.Cleanup(s.Close)
	return s, db
}

func createOne(t *testing.T, s *mysql.Store, n alarm.NewClock, now time.Time) alarm.CreateResult {
	t.Helper()
	res := s.Create(context.Background(), []alarm.NewClock{n}, now)
	if len(res) != 1 {
		t.Fatalf("Create returned %d results", len(res))
	}
	return res[0]
}

// finish puts a clock in a final status as the ring loop would, at `at`.
func finish(t *testing.T, db *sqlx.DB, id int64, status alarm.Status, at time.Time) {
	t.Helper()
	rung := "NULL"
	if status == alarm.StatusRung {
		rung = "update_time"
	}
	if _, err := db.Exec("UPDATE clock SET status = ?, update_time = ?, rung_at = "+rung+", attempts = 1 WHERE id = ?",
		string(status), at.UnixMilli(), id); err != nil {
		t.Fatal(err)
	}
}

func historyCount(t *testing.T, db *sqlx.DB, where string, args ...any) int {
	t.Helper()
	var n int
	if err := db.Get(&n, "SELECT COUNT(*) FROM clock_history WHERE "+where, args...); err != nil {
		t.Fatal(err)
	}
	return n
}

// The rule for re-arming a key, in every case: a create for a finished
// clock's key makes a new clock (new id, pending, so it rings again) and
// moves the finished one to history in the same transaction (with
// history.keep 0, only while it is within the idempotency window), except an
// identical create within the idempotency window of the finished clock's
// creation, which is a retry of the create that made it: 200 with it.
func TestRearmFinishedKey(t *testing.T) {
	t.Parallel()
	const window = 10 * time.Minute
	t0 := time.Date(2030, 1, 1, 10, 0, 0, 0, time.UTC)
	base := alarm.NewClock{Application: "order", Payload: `{"o":1}`, ContentType: "application/json", RingAt: t0.Add(time.Minute)}
	tests := []struct {
		name      string
		status    alarm.Status
		again     func(n alarm.NewClock) alarm.NewClock // the second create
		after     time.Duration                         // since the first create
		noHistory bool
		wantNew   bool
	}{
		{"rung, identical retry within the window", alarm.StatusRung, same, 2 * time.Minute, false, false},
		{"rung, identical after the window", alarm.StatusRung, same, window + time.Second, false, true},
		{"rung, different within the window", alarm.StatusRung, otherPayload, 2 * time.Minute, false, true},
		{"cancelled, identical within the window", alarm.StatusCancelled, same, time.Minute, false, false},
		{"cancelled, different", alarm.StatusCancelled, otherPayload, time.Minute, false, true},
		{"expired, identical after the window", alarm.StatusExpired, same, time.Hour, false, true},
		{"dead, different", alarm.StatusDead, otherPayload, 3 * time.Minute, false, true},
		{"rung, different, no history", alarm.StatusRung, otherPayload, time.Minute, true, true},
		{"rung, different after the window, no history", alarm.StatusRung, otherPayload, window + time.Second, true, true},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s, db := historyStore(t, mysql.StoreConfig{IdempotencyWindow: window, NoHistory: tt.noHistory})
			n := base
			n.BusinessID = "o-" + string(rune('a'+i))
			first := createOne(t, s, n, t0)
			if first.Err != nil || !first.Created {
				t.Fatalf("first create: %+v", first)
			}
			finish(t, db, first.Clock.ID, tt.status, t0.Add(time.Minute))
			second := createOne(t, s, tt.again(n), t0.Add(tt.after))
			if second.Err != nil {
				t.Fatalf("second create: %v", second.Err)
			}
			got, err := s.Get(context.Background(), alarm.Key{Application: n.Application, BusinessID: n.BusinessID})
			if err != nil {
				t.Fatal(err)
			}
			if !tt.wantNew {
				if second.Created || second.Clock.ID != first.Clock.ID || second.Clock.Status != tt.status {
					t.Fatalf("want 200 with the finished clock %d, got created=%v %+v", first.Clock.ID, second.Created, second.Clock)
				}
				if got.ID != first.Clock.ID || historyCount(t, db, "1=1") != 0 {
					t.Errorf("the finished clock moved: get %+v", got)
				}
				return
			}
			if !second.Created || second.Clock.ID == first.Clock.ID || second.Clock.Status != alarm.StatusPending {
				t.Fatalf("want a new pending clock, got created=%v %+v", second.Created, second.Clock)
			}
			if got.ID != second.Clock.ID || got.Archived {
				t.Errorf("GET finds %+v, want the new clock %d", got, second.Clock.ID)
			}
			// with history.keep 0, only a clock a retry may still be for
			wantHist := 1
			if tt.noHistory && tt.after >= window {
				wantHist = 0
			}
			if h := historyCount(t, db, "id = ? AND status = ? AND finish_time = ?", first.Clock.ID, string(tt.status), t0.Add(time.Minute).UnixMilli()); h != wantHist {
				t.Errorf("history holds %d rows of the finished clock, want %d", h, wantHist)
			}
			// A retry of the re-arming create answers 200 with the new clock.
			third := createOne(t, s, tt.again(n), t0.Add(tt.after+time.Second))
			if third.Err != nil || third.Created || third.Clock.ID != second.Clock.ID {
				t.Errorf("retry of the re-arming create: %+v", third)
			}
		})
	}
}

func same(n alarm.NewClock) alarm.NewClock { return n }

func otherPayload(n alarm.NewClock) alarm.NewClock {
	n.Payload = `{"o":2}`
	return n
}

// Two creates of one finished key in one batch: the first re-arms it, the
// second is compared with the new clock.
func TestRearmTwiceInOneBatch(t *testing.T) {
	t.Parallel()
	s, db := historyStore(t, mysql.StoreConfig{})
	t0 := time.Date(2030, 1, 1, 10, 0, 0, 0, time.UTC)
	n := alarm.NewClock{Application: "order", BusinessID: "o-1", Payload: "a", ContentType: "text/plain", RingAt: t0.Add(time.Hour)}
	first := createOne(t, s, n, t0)
	finish(t, db, first.Clock.ID, alarm.StatusCancelled, t0.Add(time.Minute))
	m := n
	m.Payload = "b"
	o := n
	o.Payload = "c"
	res := s.Create(context.Background(), []alarm.NewClock{m, m, o}, t0.Add(2*time.Minute))
	if res[0].Err != nil || !res[0].Created || res[0].Clock.ID == first.Clock.ID {
		t.Errorf("first of the batch: %+v", res[0])
	}
	if res[1].Err != nil || res[1].Created || res[1].Clock.ID != res[0].Clock.ID {
		t.Errorf("identical second: %+v", res[1])
	}
	if !errors.Is(res[2].Err, alarm.ErrConflict) {
		t.Errorf("different third: %+v", res[2])
	}
	if h := historyCount(t, db, "id = ?", first.Clock.ID); h != 1 {
		t.Errorf("history has %d rows of the cancelled clock", h)
	}
}

// The 409 says what to do, and what it says works: PATCH a pending clock,
// or cancel it and create it again.
func TestConflictSaysWhatWorks(t *testing.T) {
	t.Parallel()
	s, _ := historyStore(t, mysql.StoreConfig{})
	ctx := context.Background()
	now := time.Now().UTC().Truncate(time.Millisecond)
	k := alarm.Key{Application: "order", BusinessID: "o-123"}
	n := alarm.NewClock{Application: k.Application, BusinessID: k.BusinessID, Payload: "a", ContentType: "text/plain", RingAt: now.Add(30 * time.Minute)}
	first := createOne(t, s, n, now)
	m := n
	m.RingAt = now.Add(45 * time.Minute)
	res := createOne(t, s, m, now)
	var ce *alarm.ConflictError
	if !errors.As(res.Err, &ce) {
		t.Fatalf("different create: %v, want a conflict", res.Err)
	}
	for _, w := range []string{"PATCH /v1/clocks/order/o-123", "DELETE /v1/clocks/order/o-123", "create it again"} {
		if !strings.Contains(ce.Message, w) {
			t.Errorf("409 message %q does not say %q", ce.Message, w)
		}
	}
	// PATCH works on it.
	c, err := s.Reschedule(ctx, k, now, func(c alarm.Clock) (alarm.Clock, error) {
		c.RingAt, c.NextTryAt = m.RingAt, m.RingAt
		return c, nil
	})
	if err != nil || !c.RingAt.Equal(m.RingAt) {
		t.Fatalf("PATCH as the 409 says: %+v, %v", c, err)
	}
	// Cancel, then create again: a new clock.
	if _, err := s.Cancel(ctx, k, now); err != nil {
		t.Fatal(err)
	}
	m.Payload = "b"
	again := createOne(t, s, m, now.Add(time.Second))
	if again.Err != nil || !again.Created || again.Clock.ID == first.Clock.ID {
		t.Fatalf("create after cancel, as the 409 says: %+v", again)
	}
	// PATCH of a finished clock says a create sets a new one.
	if _, err := s.Cancel(ctx, k, now); err != nil {
		t.Fatal(err)
	}
	_, err = s.Reschedule(ctx, k, now, func(c alarm.Clock) (alarm.Clock, error) { return c, nil })
	if !errors.As(err, &ce) || !strings.Contains(ce.Message, "a create (POST /v1/clocks) for the key sets a new clock") {
		t.Errorf("PATCH of a cancelled clock: %v", err)
	}
}

// GET finds a clock in history when it is no longer in clock, says so, and
// changes of it answer 409.
func TestGetFindsHistory(t *testing.T) {
	t.Parallel()
	s, db := historyStore(t, mysql.StoreConfig{})
	ctx := context.Background()
	t0 := time.Date(2030, 1, 1, 10, 0, 0, 0, time.UTC)
	k := alarm.Key{Application: "order", BusinessID: "o-9"}
	n := alarm.NewClock{Application: k.Application, BusinessID: k.BusinessID, Payload: "p", ContentType: "text/plain",
		RingAt: t0.Add(time.Minute), LatestRingAt: t0.Add(time.Hour), MaxAttempts: 3}
	first := createOne(t, s, n, t0)
	finish(t, db, first.Clock.ID, alarm.StatusRung, t0.Add(time.Minute))
	before, err := s.Get(ctx, k)
	if err != nil || before.Archived {
		t.Fatalf("get before the move: %+v %v", before, err)
	}
	a, d, err := s.MoveFinished(ctx, alarm.StatusRung, []int64{first.Clock.ID}, t0.Add(time.Hour), time.Time{}, true)
	if err != nil || a != 1 || d != 0 {
		t.Fatalf("MoveFinished = %d, %d, %v", a, d, err)
	}
	got, err := s.Get(ctx, k)
	if err != nil {
		t.Fatal(err)
	}
	if !got.Archived || !got.FinishedAt.Equal(t0.Add(time.Minute)) {
		t.Errorf("archived %v finished %v", got.Archived, got.FinishedAt)
	}
	got.Archived, got.FinishedAt = false, time.Time{}
	if got != before {
		t.Errorf("history copy differs:\n got %+v\nwant %+v", got, before)
	}
	var ce *alarm.ConflictError
	if _, err := s.Cancel(ctx, k, t0.Add(2*time.Hour)); !errors.As(err, &ce) || !strings.Contains(ce.Message, "archived") {
		t.Errorf("cancel of an archived clock: %v", err)
	}
	if _, err := s.Replay(ctx, k, t0.Add(2*time.Hour)); !errors.Is(err, alarm.ErrConflict) {
		t.Errorf("replay of an archived clock: %v", err)
	}
	if _, err := s.Get(ctx, alarm.Key{Application: "order", BusinessID: "nope"}); !errors.Is(err, alarm.ErrNotFound) {
		t.Errorf("get of nothing: %v", err)
	}
	// Re-armed after it was archived: GET shows the new clock; once that
	// one is archived too, the newest of history.
	second := createOne(t, s, n, t0.Add(3*time.Hour))
	if !second.Created {
		t.Fatalf("re-arm of an archived key: %+v", second)
	}
	finish(t, db, second.Clock.ID, alarm.StatusCancelled, t0.Add(4*time.Hour))
	if _, _, err := s.MoveFinished(ctx, alarm.StatusCancelled, []int64{second.Clock.ID}, t0.Add(5*time.Hour), time.Time{}, true); err != nil {
		t.Fatal(err)
	}
	if got, err := s.Get(ctx, k); err != nil || got.ID != second.Clock.ID || got.Status != alarm.StatusCancelled || !got.Archived {
		t.Errorf("get after two archived clocks: %+v %v", got, err)
	}
}

// MoveFinished moves only what is still finished before the cutoff: a
// clock replayed meanwhile stays.
func TestMoveFinishedSkipsChangedClocks(t *testing.T) {
	t.Parallel()
	s, db := historyStore(t, mysql.StoreConfig{})
	ctx := context.Background()
	t0 := time.Date(2030, 1, 1, 10, 0, 0, 0, time.UTC)
	var ids []int64
	for i, st := range []alarm.Status{alarm.StatusDead, alarm.StatusDead, alarm.StatusDead} {
		r := createOne(t, s, alarm.NewClock{Application: "a", BusinessID: string(rune('x' + i)), Payload: "p", ContentType: "t", RingAt: t0}, t0)
		finish(t, db, r.Clock.ID, st, t0)
		ids = append(ids, r.Clock.ID)
	}
	if _, err := s.Replay(ctx, alarm.Key{Application: "a", BusinessID: "y"}, t0.Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	// the cutoff excludes z: finished at t0, cutoff t0 (not before it)
	finish(t, db, ids[2], alarm.StatusDead, t0.Add(time.Hour))
	a, d, err := s.MoveFinished(ctx, alarm.StatusDead, ids, t0.Add(time.Minute), time.Time{}, true)
	if err != nil || a != 1 || d != 0 {
		t.Fatalf("MoveFinished = %d archived, %d deleted, %v; want 1, 0", a, d, err)
	}
	var left []string
	if err := db.Select(&left, "SELECT business_id FROM clock ORDER BY business_id"); err != nil {
		t.Fatal(err)
	}
	if strings.Join(left, ",") != "y,z" {
		t.Errorf("left in clock: %v, want y,z", left)
	}
}

// The list endpoint's queries: every combination answers the right clocks,
// newest first, page by page, from an index.
func TestListUsesIndexes(t *testing.T) {
	t.Parallel()
	s, db := historyStore(t, mysql.StoreConfig{})
	ctx := context.Background()
	now := time.Now().UTC()
	statuses := []alarm.Status{alarm.StatusPending, alarm.StatusRung, alarm.StatusDead, alarm.StatusPending, alarm.StatusCancelled}
	var batch []alarm.NewClock
	for i := 0; i < 300; i++ {
		app := "a"
		if i%3 == 0 {
			app = "b"
		}
		batch = append(batch, alarm.NewClock{Application: app, BusinessID: "k" + strings.Repeat("x", i%7) + string(rune('A'+i%50)) + time.Duration(i).String(),
			Payload: "p", ContentType: "t", RingAt: now.Add(time.Hour)})
	}
	res := s.Create(ctx, batch, now)
	want := map[[2]string][]int64{} // (app, status) -> ids, newest first
	for i := len(res) - 1; i >= 0; i-- {
		r := res[i]
		if r.Err != nil {
			t.Fatal(r.Err)
		}
		st := statuses[i%len(statuses)]
		if st != alarm.StatusPending {
			finish(t, db, r.Clock.ID, st, now)
		}
		for _, a := range []string{"", r.Clock.Application} {
			for _, s := range []string{"", string(st)} {
				want[[2]string{a, s}] = append(want[[2]string{a, s}], r.Clock.ID)
			}
		}
	}
	for _, app := range []string{"", "a", "b"} {
		for _, st := range []alarm.Status{"", alarm.StatusPending, alarm.StatusRung, alarm.StatusDead, alarm.StatusFiring} {
			var got []int64
			q := alarm.ListQuery{Application: app, Status: st, Limit: 17}
			for {
				page, err := s.List(ctx, q)
				if err != nil {
					t.Fatal(err)
				}
				for _, c := range page {
					got = append(got, c.ID)
				}
				if len(page) < q.Limit {
					break
				}
				q.BeforeID = page[len(page)-1].ID
			}
			w := want[[2]string{app, string(st)}]
			if len(got) != len(w) || (len(w) > 0 && (got[0] != w[0] || got[len(got)-1] != w[len(w)-1])) {
				t.Errorf("list app=%q status=%q: %d clocks, want %d", app, st, len(got), len(w))
			}
			for i := 1; i < len(got); i++ {
				if got[i] >= got[i-1] {
					t.Fatalf("list app=%q status=%q not newest first: %v", app, st, got)
				}
			}
		}
	}
	// app and status: a backwards range of (application, status, id)
	plan := explain(t, db, "SELECT id FROM clock WHERE application = 'a' AND status = 'pending' AND id < 1000 ORDER BY id DESC LIMIT 10")
	if plan[0].Key.String != "idx_clock_application_status_id" || strings.Contains(strings.ToLower(plan[0].Extra.String), "filesort") {
		t.Errorf("list by application and status: key %q extra %q", plan[0].Key.String, plan[0].Extra.String)
	}
	// the janitor's scan: a range of (status, update_time)
	plan = explain(t, db, "SELECT id, update_time FROM clock WHERE status = 'rung' AND update_time < 5 AND (update_time > 1 OR (update_time = 1 AND id > 0)) ORDER BY update_time, id LIMIT 100")
	if plan[0].Key.String != "idx_clock_status_update" || strings.Contains(strings.ToLower(plan[0].Extra.String), "filesort") {
		t.Errorf("janitor scan: key %q extra %q", plan[0].Key.String, plan[0].Extra.String)
	}
}

func explain(t *testing.T, db *sqlx.DB, q string) []explainRow {
	t.Helper()
	rows, err := db.Queryx("EXPLAIN " + q)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var plan []explainRow
	for rows.Next() {
		var r explainRow
		if err := rows.StructScan(&r); err != nil {
			t.Fatalf("scan EXPLAIN: %v", err)
		}
		plan = append(plan, r)
	}
	if len(plan) == 0 {
		t.Fatalf("EXPLAIN %s: no plan", q)
	}
	return plan
}

// A database on the schema before retention (migrations 00001-00003)
// migrates with its clocks intact, and the new constraint holds.
func TestMigrateFromPreviousSchema(t *testing.T) {
	t.Parallel()
	db, _ := schemaDB(t, false)
	ctx := context.Background()
	p, err := goose.NewProvider(goose.DialectMySQL, db.DB, migrations.FS)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.UpTo(ctx, 3); err != nil {
		t.Fatalf("migrate to the previous schema: %v", err)
	}
	if _, err := mysql.SetupShards(ctx, db, 4); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`INSERT INTO clock (application, business_id, shard, status, payload, content_type, target_ring_at,
		latest_ring_at, max_attempts, attempts, next_try_time, last_error, rung_at, create_time, update_time, op_token)
		SELECT 'app', CONCAT('k-', seq), seq % 4, ELT(1 + seq % 6, 'pending', 'firing', 'rung', 'cancelled', 'expired', 'dead'),
		  CONCAT('{"n":', seq, '}'), 'application/json', 1000 + seq, IF(seq % 2 = 0, 5000 + seq, NULL), seq % 3, seq % 4,
		  2000 + seq, IF(seq % 5 = 0, 'boom', NULL), IF(seq % 6 = 2, 3000 + seq, NULL), seq, 4000 + seq, seq
		FROM seq_1_to_600`); err != nil {
		t.Fatal(err)
	}
	snapshot := func() string {
		var rows []string
		if err := db.Select(&rows, `SELECT CONCAT_WS('|', id, application, business_id, shard, status, payload, content_type,
			target_ring_at, IFNULL(latest_ring_at, '-'), max_attempts, attempts, next_try_time, IFNULL(last_error, '-'),
			IFNULL(rung_at, '-'), create_time, update_time, IFNULL(op_token, '-')) FROM clock ORDER BY id`); err != nil {
			t.Fatal(err)
		}
		return strings.Join(rows, "\n")
	}
	before := snapshot()
	if err := mysql.Migrate(ctx, db, slog.New(slog.DiscardHandler)); err != nil {
		t.Fatalf("Migrate from the previous schema: %v", err)
	}
	if after := snapshot(); after != before {
		t.Fatalf("clocks changed by the migration")
	}
	var idx []string
	if err := db.Select(&idx, `SELECT DISTINCT INDEX_NAME FROM information_schema.STATISTICS
		WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = 'clock' ORDER BY INDEX_NAME`); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(idx, ","); got != "idx_clock_application_status_id,idx_clock_shard_status_next_try,idx_clock_status_update,PRIMARY,uk_clock_application_business_id" {
		t.Errorf("indexes of clock: %s", got)
	}
	if _, err := db.Exec("UPDATE clock SET status = 'done' WHERE id = 1"); err == nil {
		t.Errorf("a status clockd does not know was accepted")
	}
	// The store reads the migrated clocks.
	s := mysql.NewStore(db, mysql.StoreConfig{Shards: 4})
	defer s.Close()
	c, err := s.Get(ctx, alarm.Key{Application: "app", BusinessID: "k-7"})
	if err != nil || c.Payload != `{"n":7}` || c.Status != alarm.StatusFiring {
		t.Errorf("migrated clock k-7: %+v %v", c, err)
	}
}

// Within the idempotency window, a create identical to the one that set a
// finished clock is its retry and answers with it: the 409 of a change of
// that clock says so (it said only "a create sets a new clock", and an
// identical create then set nothing), and what it says works.
func TestRefusalOfAFinishedClockTellsOfTheIdempotencyWindow(t *testing.T) {
	t.Parallel()
	s, _ := historyStore(t, mysql.StoreConfig{})
	ctx := context.Background()
	now := time.Now().Truncate(time.Millisecond)
	k := alarm.Key{Application: "order", BusinessID: "o-w"}
	n := alarm.NewClock{Application: k.Application, BusinessID: k.BusinessID, Payload: "p", ContentType: "text/plain", RingAt: now.Add(time.Hour)}
	first := createOne(t, s, n, now)
	if first.Err != nil {
		t.Fatal(first.Err)
	}
	if _, err := s.Cancel(ctx, k, now); err != nil {
		t.Fatal(err)
	}
	_, err := s.Cancel(ctx, k, now)
	var ce *alarm.ConflictError
	until := now.Add(mysql.DefaultIdempotencyWindow).UTC().Format("2006-01-02T15:04:05.000Z")
	if !errors.As(err, &ce) || !strings.Contains(ce.Message, "until "+until) || !strings.Contains(ce.Message, "change its ring time or payload") {
		t.Fatalf("second cancel: %v; want a 409 that tells of the window until %s", err, until)
	}
	if again := createOne(t, s, n, now.Add(time.Second)); again.Err != nil || again.Created || again.Clock.ID != first.Clock.ID {
		t.Errorf("an identical create within the window: %+v, want the cancelled clock (as the 409 says)", again)
	}
	n.RingAt = n.RingAt.Add(time.Minute)
	if moved := createOne(t, s, n, now.Add(time.Second)); moved.Err != nil || !moved.Created || moved.Clock.ID == first.Clock.ID {
		t.Errorf("a create with another ring time: %+v, want a new clock (as the 409 says)", moved)
	}
}

// clock_history has every column of clock (SPEC: "same columns plus when
// it finished"), and a move keeps their values: replayed_attempts and
// claim_time were added to clock only (found by review), so a DBA saw only
// the attempts of a replayed clock made after its replay.
func TestHistoryKeepsEveryColumnOfClock(t *testing.T) {
	t.Parallel()
	s, db := historyStore(t, mysql.StoreConfig{})
	var missing []string
	if err := db.Select(&missing, `SELECT c.column_name FROM information_schema.columns c
		WHERE c.table_schema = DATABASE() AND c.table_name = 'clock' AND c.column_name NOT IN (
		  SELECT h.column_name FROM information_schema.columns h WHERE h.table_schema = DATABASE() AND h.table_name = 'clock_history')`); err != nil {
		t.Fatal(err)
	}
	if len(missing) > 0 {
		t.Errorf("clock_history lacks columns of clock: %v", missing)
	}
	t0 := time.Date(2030, 1, 1, 10, 0, 0, 0, time.UTC)
	first := createOne(t, s, alarm.NewClock{Application: "order", BusinessID: "o-replayed", Payload: "p", ContentType: "text/plain",
		RingAt: t0.Add(time.Minute)}, t0)
	finish(t, db, first.Clock.ID, alarm.StatusRung, t0.Add(time.Minute))
	if _, err := db.Exec("UPDATE clock SET replayed_attempts = 4, claim_time = ? WHERE id = ?", t0.Add(time.Minute).UnixMilli(), first.Clock.ID); err != nil {
		t.Fatal(err)
	}
	if a, _, err := s.MoveFinished(context.Background(), alarm.StatusRung, []int64{first.Clock.ID}, t0.Add(time.Hour), time.Time{}, true); err != nil || a != 1 {
		t.Fatalf("MoveFinished = %d, %v", a, err)
	}
	var got struct {
		Replayed  int   `db:"replayed_attempts"`
		ClaimTime int64 `db:"claim_time"`
	}
	if err := db.Get(&got, "SELECT replayed_attempts, claim_time FROM clock_history WHERE id = ?", first.Clock.ID); err != nil {
		t.Fatal(err)
	}
	if got.Replayed != 4 || got.ClaimTime != t0.Add(time.Minute).UnixMilli() {
		t.Errorf("history row: replayed_attempts %d, claim_time %d; want 4, %d", got.Replayed, got.ClaimTime, t0.Add(time.Minute).UnixMilli())
	}
}

// The 409 of a change of a finished recurring clock, within the
// idempotency window, tells to change its schedule (or payload) to set it
// again: a recurring clock's create has no ring time, and its schedule is
// what tells a new create from a retry of the one that set it.
func TestRefusalOfAFinishedRecurringClockNamesItsSchedule(t *testing.T) {
	t.Parallel()
	s, _ := historyStore(t, mysql.StoreConfig{})
	ctx := context.Background()
	now := time.Now().Truncate(time.Millisecond)
	k := alarm.Key{Application: "order", BusinessID: "o-r"}
	every := time.Minute
	in := alarm.CreateInput{Application: k.Application, BusinessID: k.BusinessID,
		Schedule: &alarm.ScheduleInput{Every: &every}}
	n, err := in.Validate(now, alarm.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	if first := createOne(t, s, n, now); first.Err != nil {
		t.Fatal(first.Err)
	}
	if _, err := s.Cancel(ctx, k, now); err != nil {
		t.Fatal(err)
	}
	_, err = s.Cancel(ctx, k, now)
	var ce *alarm.ConflictError
	if !errors.As(err, &ce) || !strings.Contains(ce.Message, "change its schedule or payload") {
		t.Errorf("second cancel of a recurring clock: %v; want a 409 that says to change its schedule or payload", err)
	}
}
