package mysql_test

import (
	"context"
	"testing"
	"time"

	"github.com/clockd/clockd/internal/alarm"
	"github.com/clockd/clockd/internal/mysql"
)

// The janitor's batches (FinishedBefore) and the status counts
// (CountClocks) walk idx_clock_status_update from a cursor (update_time,
// id). When many clocks share the cursor's millisecond (a batch of
// creates or of rung marks; the 10 M drain bench's fill), MariaDB chose a
// ref access on (status) or (status, update_time) and read every entry of
// that millisecond before the cursor's id: 800,000 index entries for one
// counting statement of 50,000 (0.13 s in the slow log), and a janitor
// batch read all the entries it had moved already. The index is forced, so
// that the range starts at the cursor (the index's primary-key suffix).
// MariaDB's choice follows its sampled statistics: on this test's table it
// took the range even without the forced index, so this test bounds the
// reads rather than shows the old plan (a table of 300,000 such clocks made
// by hand read 300,000 entries for one statement without it, 50,000 with).
func TestStatusCursorsStartAtTheCursor(t *testing.T) {
	t.Parallel()
	s, db := historyStore(t, mysql.StoreConfig{})
	ctx := context.Background()
	// as many as it takes for MariaDB to choose the ref access without the
	// forced index (it did at 300,000, not at 20,000 or 200,000)
	const n = 300000
	at := time.Date(2030, 1, 10, 0, 0, 0, 0, time.UTC).UnixMilli()
	for _, st := range []string{"rung", "pending"} {
		if _, err := db.Exec(`INSERT INTO clock (application, business_id, shard, status, payload, content_type,
			target_ring_at, next_try_time, create_time, update_time)
			SELECT 'app', CONCAT(?, seq), seq % 4, ?, '', 'application/json', ? + seq, ? + seq, ?, ? FROM seq_1_to_300000`,
			st+"-", st, at, at, at, at); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := db.Exec("ANALYZE TABLE clock"); err != nil {
		t.Fatal(err)
	}
	var ids []int64
	if err := db.Select(&ids, "SELECT id FROM clock WHERE status = 'rung' ORDER BY id"); err != nil || len(ids) != n {
		t.Fatalf("%d rung clocks, %v", len(ids), err)
	}
	db.SetMaxOpenConns(1) // the store's statements and the session counters share it
	reads := func() int64 { return indexReads(t, db) }

	// a janitor batch of 100 after 250,000 clocks of the same millisecond
	before := reads()
	got, _, err := s.FinishedBefore(ctx, alarm.StatusRung, time.UnixMilli(at+1), time.UnixMilli(at), ids[250000-1], 100)
	read := reads() - before
	if err != nil || len(got) != 100 || got[0] != ids[250000] {
		t.Fatalf("FinishedBefore: %d ids from %v, %v; want 100 from %d", len(got), got[:min(1, len(got))], err, ids[250000])
	}
	if read > 1000 {
		t.Errorf("a janitor batch of 100 read %d index entries (250,000 clocks of its millisecond before its cursor)", read)
	}

	// the counts: 200,000 clocks a status in chunks of 50,000
	mysql.SetCountChunk(t, 50000, 10)
	before = reads()
	counts, err := s.CountClocks(ctx)
	read = reads() - before
	if err != nil || counts[alarm.StatusRung] != n || counts[alarm.StatusPending] != n {
		t.Fatalf("counts %v, %v", counts, err)
	}
	t.Logf("counting 2 × 300,000 clocks in chunks of 50,000 read %d index entries", read)
	if read > 3*n {
		t.Errorf("counting 2 × 300,000 clocks in chunks of 50,000 read %d index entries; each chunk read its millisecond's entries from the start", read)
	}
}
