package mysql_test

import (
	"context"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/clockd/clockd/internal/alarm"
	"github.com/clockd/clockd/internal/mysql"
	"github.com/clockd/clockd/internal/schedule"
)

// A recurring clock's occurrence rows in clock_history are keyed (id,
// finish_time = occurrence time) and its own row, when it leaves clock,
// (id, finish_time = update_time). A cancel whose `now` (the API
// instance's clock, a few ms behind, or within the occurrence's
// millisecond) equals the time of an occurrence that rang gave the same
// key: the janitor's move failed with a duplicate key on every run, and
// so did any create that re-armed the key, with every clock of its batch.
// API writes now keep update_time increasing.
func TestCancelAtAnOccurrenceTimeStillLeavesForHistory(t *testing.T) {
	s, c := recurringClock(t, schedule.Spec{Every: 2 * time.Second})
	ctx := context.Background()
	key := alarm.Key{Application: "app", BusinessID: "r-1"}
	first := c.RingAt
	at := first.Add(3 * time.Millisecond)
	a := alarm.AdvanceOf(c, alarm.StatusRung, at, at, "")
	if err := s.Advance(ctx, []alarm.Advance{a}, []int64{7}, at); err != nil {
		t.Fatal(err)
	}
	// a cancel whose clock reads the occurrence's millisecond
	got, err := s.Cancel(ctx, key, first)
	if err != nil || got.Status != alarm.StatusCancelled {
		t.Fatalf("cancel: %+v %v", got, err)
	}

	// The janitor's move of the cancelled clock.
	now := time.Now()
	if _, _, err := s.MoveFinished(ctx, alarm.StatusCancelled, []int64{c.ID}, now.Add(time.Hour), first.Add(-time.Hour), true); err != nil {
		t.Errorf("janitor cannot move the cancelled recurring clock: %v", err)
	}

	// A re-arm of the key, in one batch with an unrelated clock.
	res := s.Create(ctx, []alarm.NewClock{
		{Application: "app", BusinessID: "r-1", Payload: "{}", ContentType: "application/json", RingAt: now.Add(time.Hour)},
		{Application: "app", BusinessID: "unrelated", Payload: "{}", ContentType: "application/json", RingAt: now.Add(time.Hour)},
	}, now)
	for i, r := range res {
		if r.Err != nil {
			t.Errorf("create %d of the batch failed: %v", i, r.Err)
		}
	}
}

// GET of a key whose clock left clock reads clock_history by its
// (application, business_id, occurrence_of) index. With some rows for the
// key (a recurring clock's occurrences, a key re-armed often) MariaDB chose
// a backward scan of the primary key for the ORDER BY ... LIMIT 1 and read
// the history of every clock created after it: here 1,000 occurrence rows
// among 100,000 newer clocks made one GET read the 100,000. By (application,
// business_id) alone it read the key's 1,001 rows and sorted them; now the
// key's one clock row.
func TestGetFromHistoryReadsOnlyTheKeysRows(t *testing.T) {
	t.Parallel()
	s, db := historyStore(t, mysql.StoreConfig{})
	ctx := context.Background()
	base := time.Date(2030, 1, 10, 0, 0, 0, 0, time.UTC).UnixMilli()
	// a recurring clock (id 5) that rang 1,000 times, then was cancelled and archived
	if _, err := db.Exec(`INSERT INTO clock_history (id, application, business_id, shard, status, payload, content_type,
		target_ring_at, next_try_time, create_time, update_time, finish_time, occurrence_of, schedule_every_ms)
		SELECT 5, 'app', 'every-minute', 0, 'rung', '{}', 'application/json', ? + seq*60000, ? + seq*60000, ?, ? + seq*60000, ? + seq*60000, 5, 60000
		FROM seq_1_to_1000`, base, base, base, base, base); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`INSERT INTO clock_history (id, application, business_id, shard, status, payload, content_type,
		target_ring_at, next_try_time, create_time, update_time, finish_time, schedule_every_ms)
		VALUES (5, 'app', 'every-minute', 0, 'cancelled', '{}', 'application/json', ?, ?, ?, ?, ?, 60000)`,
		base+1001*60000, base+1001*60000, base, base+1000*60000+1, base+1000*60000+1); err != nil {
		t.Fatal(err)
	}
	// 100,000 one-shot clocks created after it, archived
	if _, err := db.Exec(`INSERT INTO clock_history (id, application, business_id, shard, status, payload, content_type,
		target_ring_at, next_try_time, create_time, update_time, finish_time)
		SELECT 100 + seq, 'app', CONCAT('o-', seq), 0, 'rung', '{}', 'application/json', ? + seq, ? + seq, ? + seq, ? + seq, ? + seq
		FROM seq_1_to_100000`, base, base, base, base, base); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec("ANALYZE TABLE clock_history"); err != nil {
		t.Fatal(err)
	}
	// one connection: the store's GET and the session counters share it
	db.SetMaxOpenConns(1)
	reads := func() int64 { return indexReads(t, db) }
	before := reads()
	start := time.Now()
	c, err := s.Get(ctx, alarm.Key{Application: "app", BusinessID: "every-minute"})
	took := time.Since(start)
	read := reads() - before
	if err != nil || c.ID != 5 || c.Status != alarm.StatusCancelled || !c.Archived {
		t.Fatalf("get: %+v %v", c, err)
	}
	t.Logf("GET of the archived recurring clock read %d index entries in %s", read, took)
	if read > 10 {
		t.Errorf("GET of one archived clock read %d index entries of clock_history (the key has 1 clock row and 1,000 occurrence rows; 100,000 are other clocks')", read)
	}
}

// A partition change waits for clock_history's metadata lock, and while it
// waits every other statement on clock_history queues behind it: the
// re-arming create (its archive INSERT) and Advance's occurrence rows (the
// ring path of recurring clocks). Any session that holds the lock (a long
// report, an open transaction that read clock_history) makes the DDL wait.
// It waited 3 s (MariaDB 10.11 took 6: it waits twice), longer than a
// create's write timeout (5 s): the create failed. Now the wait is 1 s, and
// the janitor tries again only after partitionRetry.
func TestPartitionChangeStallsHistoryWritersBriefly(t *testing.T) {
	t.Parallel()
	s, db := historyStore(t, mysql.StoreConfig{IdempotencyWindow: -1})
	ctx := context.Background()
	now := time.Now()
	n := alarm.NewClock{Application: "app", BusinessID: "k", Payload: "{}", ContentType: "application/json", RingAt: now.Add(time.Minute)}
	first := createOne(t, s, n, now)
	if first.Err != nil {
		t.Fatal(first.Err)
	}
	finish(t, db, first.Clock.ID, alarm.StatusRung, now)

	// a session with an open transaction that read clock_history
	holder, err := db.Connx(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close()
	if _, err := holder.ExecContext(ctx, "BEGIN"); err != nil {
		t.Fatal(err)
	}
	var cnt int
	if err := holder.GetContext(ctx, &cnt, "SELECT COUNT(*) FROM clock_history"); err != nil {
		t.Fatal(err)
	}
	defer holder.ExecContext(ctx, "ROLLBACK")

	// the janitor's next day
	ddl := make(chan error, 1)
	ddlStart := time.Now()
	var ddlTook time.Duration
	go func() {
		err := s.AddHistoryDays(ctx, []time.Time{now.UTC().Truncate(24*time.Hour).AddDate(0, 0, 5)})
		ddlTook = time.Since(ddlStart)
		ddl <- err
	}()
	time.Sleep(300 * time.Millisecond)

	// a create that re-arms the key
	start := time.Now()
	n.Payload = `{"again":1}`
	res := createOne(t, s, n, time.Now())
	took := time.Since(start)
	ddlErr := <-ddl
	t.Logf("re-arming create: %s (err %v); partition change: %v after %s", took.Round(time.Millisecond), res.Err, ddlErr, ddlTook.Round(time.Millisecond))
	if ddlErr == nil {
		t.Error("the partition change went through while another session held the table's metadata lock")
	}
	if res.Err != nil || took > 3*time.Second {
		t.Errorf("a re-arming create took %s (err %v) while the janitor's partition change waited for a reader of clock_history", took.Round(time.Millisecond), res.Err)
	}
}

// indexReads is the index entries read so far in db's session (next and
// previous, and rows of full scans): db must hold one connection, shared
// by the statements measured.
func indexReads(t *testing.T, db *sqlx.DB) int64 {
	t.Helper()
	var rows []struct {
		Name  string `db:"Variable_name"`
		Value int64  `db:"Value"`
	}
	if err := db.Select(&rows, "SHOW SESSION STATUS WHERE Variable_name IN ('Handler_read_prev', 'Handler_read_next', 'Handler_read_rnd_next')"); err != nil {
		t.Fatal(err)
	}
	var n int64
	for _, r := range rows {
		n += r.Value
	}
	return n
}
