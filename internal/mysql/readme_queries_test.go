package mysql_test

import (
	"context"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/clockd/clockd/internal/mysql"
)

// readmeSelects returns the SELECT statements of README.md's sql blocks:
// the queries it hands a DBA.
func readmeSelects(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, m := range regexp.MustCompile("(?s)```sql\n(.*?)```").FindAllStringSubmatch(string(b), -1) {
		var lines []string
		for _, l := range strings.Split(m[1], "\n") {
			if !strings.HasPrefix(strings.TrimSpace(l), "--") {
				lines = append(lines, l)
			}
		}
		for _, st := range strings.Split(strings.Join(lines, "\n"), ";") {
			if st = strings.TrimSpace(st); strings.HasPrefix(st, "SELECT") {
				out = append(out, st)
			}
		}
	}
	return out
}

// Every query README gives a DBA reads little of a table of 100,000
// clocks (20,000 pending): none reads the whole table or every pending
// clock, but the one README says reads an application's clocks. "What is due in the next minute", "clocks that keep failing" and
// "clocks firing now" read every pending clock, or the whole table, and the
// recurring clocks' query read the whole table (found by review). Index
// entries tested by index condition pushdown count too: the three queries
// through clock_shard (STRAIGHT_JOIN) tested every pending clock's entry
// for its time (found by a later review).
func TestREADMEQueriesReadLittle(t *testing.T) {
	t.Parallel()
	_, db := historyStore(t, mysql.StoreConfig{})
	fillMixed(t, db, 100_000)
	ctx := context.Background()
	conn, err := db.Connx(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	qs := readmeSelects(t)
	if len(qs) < 10 {
		t.Fatalf("found %d SELECTs in README.md's sql blocks; the extraction broke", len(qs))
	}
	for _, q := range qs {
		if strings.Contains(q, "information_schema") || strings.Contains(q, "PARTITION (") {
			continue // no table of clocks; a day's partition that does not exist here
		}
		// README says this one reads the application's clocks (no index
		// covers the schedule), the whole table when it has most of them
		allowed := int64(10_000)
		if strings.Contains(q, "schedule_cron IS NOT NULL") {
			allowed = 100_001
		}
		if _, err := conn.ExecContext(ctx, "FLUSH STATUS"); err != nil {
			t.Fatal(err)
		}
		rows, err := conn.QueryContext(ctx, q)
		if err != nil {
			t.Errorf("%s\n: %v", q, err)
			continue
		}
		for rows.Next() {
		}
		rows.Close()
		var read int64
		hs, err := conn.QueryxContext(ctx, "SHOW SESSION STATUS WHERE Variable_name IN ('Handler_read_next', 'Handler_read_prev', 'Handler_read_rnd_next', 'Handler_icp_attempts')")
		if err != nil {
			t.Fatal(err)
		}
		for hs.Next() {
			var name string
			var n int64
			if err := hs.Scan(&name, &n); err != nil {
				t.Fatal(err)
			}
			read += n
		}
		hs.Close()
		t.Logf("%d rows read: %.80s", read, strings.Join(strings.Fields(q), " "))
		if read > allowed {
			t.Errorf("%d index entries or rows read of a table of 100,000 clocks (20,000 pending):\n%s", read, q)
		}
	}
}
