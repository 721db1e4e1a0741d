package mysql_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/clockd/clockd/internal/alarm"
	"github.com/clockd/clockd/internal/mysql"
	"github.com/jmoiron/sqlx"
)

// fillMixed fills clock with n rows in a mix (20 % pending, 50 % rung, 20 %
// cancelled, 5 % dead, 5 % expired), interleaved by id as a real table is,
// analyzes it, and returns the exact count per status.
func fillMixed(t *testing.T, db *sqlx.DB, n int) map[alarm.Status]int64 {
	t.Helper()
	now := time.Now().UnixMilli()
	if _, err := db.Exec(`INSERT INTO clock (application, business_id, shard, status, payload, content_type,
		target_ring_at, max_attempts, attempts, next_try_time, claim_epoch, claim_token, claim_time,
		create_time, update_time)
		SELECT ELT(1 + seq % 5, 'order','delivery','member','cart','billing'), CONCAT('b-', seq), seq % 4,
		  CASE WHEN seq % 20 < 4 THEN 'pending' WHEN seq % 20 < 14 THEN 'rung' WHEN seq % 20 < 18 THEN 'cancelled'
		       WHEN seq % 20 = 18 THEN 'dead' ELSE 'expired' END,
		  REPEAT('x', 100), 'application/json', ? + 3600000 + (seq % 7200) * 1000, 0, 1, ? + 3600000 + (seq % 7200) * 1000,
		  0, 0, 0, ? - 90000000 + seq, ? - (seq % 86400) * 1000
		FROM seq_1_to_`+fmt.Sprint(n), now, now, now, now); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec("ANALYZE TABLE clock"); err != nil {
		t.Fatal(err)
	}
	exact := map[alarm.Status]int64{}
	rows, err := db.Query("SELECT status, COUNT(*) FROM clock GROUP BY status")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var s string
		var c int64
		if err := rows.Scan(&s, &c); err != nil {
			t.Fatal(err)
		}
		exact[alarm.Status(s)] = c
	}
	return exact
}

// clockd_clocks{status} is exact at any size. Past 10,000 clocks a status
// was InnoDB's row estimate, which on MariaDB 10.11 was about twice the
// real count (46,220 pending of 20,000 on this table; found by review).
func TestCountClocksExactOnALargerTable(t *testing.T) {
	t.Parallel()
	s, db := historyStore(t, mysql.StoreConfig{})
	exact := fillMixed(t, db, 100_000)
	counts, err := s.CountClocks(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, st := range []alarm.Status{alarm.StatusPending, alarm.StatusFiring, alarm.StatusRung, alarm.StatusCancelled, alarm.StatusExpired, alarm.StatusDead} {
		if counts[st] != exact[st] {
			t.Errorf("%s: counted %d, exactly %d", st, counts[st], exact[st])
		}
	}
}

// A status larger than a call's budget is counted over several calls, from
// where the last one stopped; meanwhile its last complete count stands
// (before the first, the clocks counted so far), and each complete pass
// gives the count of its time.
func TestCountClocksAcrossCalls(t *testing.T) {
	t.Parallel()
	s, db := historyStore(t, mysql.StoreConfig{})
	exact := fillMixed(t, db, 20_000) // 4,000 pending, 10,000 rung
	mysql.SetCountChunk(t, 1000, 3)   // 3,000 per status and call
	count := func() map[alarm.Status]int64 {
		t.Helper()
		c, err := s.CountClocks(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	want := func(what string, c map[alarm.Status]int64, st alarm.Status, n int64) {
		t.Helper()
		if c[st] != n {
			t.Errorf("%s: %s %d, want %d", what, st, c[st], n)
		}
	}
	c := count()
	want("first call", c, alarm.StatusPending, 3000)                 // counted so far
	want("first call", c, alarm.StatusDead, exact[alarm.StatusDead]) // 1,000: complete
	c = count()
	want("second call", c, alarm.StatusPending, exact[alarm.StatusPending])
	want("second call", c, alarm.StatusRung, 6000)
	if _, err := db.Exec("UPDATE clock SET status = 'dead' WHERE status = 'pending' AND business_id LIKE 'b-1%'"); err != nil {
		t.Fatal(err)
	}
	var moved int64
	if err := db.Get(&moved, "SELECT COUNT(*) FROM clock WHERE status = 'dead'"); err != nil {
		t.Fatal(err)
	}
	c = count()
	want("third call", c, alarm.StatusRung, 9000)                                                          // counted so far
	want("third call", c, alarm.StatusPending, exact[alarm.StatusPending]-(moved-exact[alarm.StatusDead])) // a new pass, complete
	want("third call", c, alarm.StatusDead, exact[alarm.StatusDead])                                       // its pass under way: the last count stands
	c = count()
	want("fourth call", c, alarm.StatusRung, exact[alarm.StatusRung])
	want("fourth call", c, alarm.StatusDead, moved)
}
