package janitor_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pressly/goose/v3"

	"github.com/clockd/clockd/internal/alarm"
	"github.com/clockd/clockd/internal/janitor"
	"github.com/clockd/clockd/internal/mysql"
	"github.com/clockd/clockd/internal/testenv"
	"github.com/clockd/clockd/migrations"
)

// BenchmarkJanitorDrain measures, on a private MariaDB, a table of the
// previous schema with CLOCKD_BENCH_JANITOR_ROWS finished clocks past
// their retention (default 200,000) and a tenth as many pending ones: how
// long each new migration takes on it (00004 online, 00005 a copy), how
// long each statement clockd issues on a timer takes on it, and the
// janitor's move rate draining it to history (rows/s) with the default
// largest batch and movers (CLOCKD_BENCH_JANITOR_BATCH and
// CLOCKD_BENCH_JANITOR_MOVERS change them), with what the slow log (long_query_time 0.1 s) caught
// meanwhile. Ten million rows:
//
//	CLOCKD_BENCH_JANITOR_ROWS=10000000 go test -run '^$' -bench JanitorDrain -benchtime 1x -timeout 2h ./internal/janitor
func BenchmarkJanitorDrain(b *testing.B) {
	rows := 200_000
	if v := os.Getenv("CLOCKD_BENCH_JANITOR_ROWS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1000 {
			b.Fatalf("CLOCKD_BENCH_JANITOR_ROWS=%q: want a number >= 1000", v)
		}
		rows = n
	}
	pending := rows / 10
	m := testenv.StartMariaDB(b)
	admin, err := sql.Open("mysql", m.DSN())
	if err != nil {
		b.Fatal(err)
	}
	defer admin.Close()
	// A private server: its globals are ours to set.
	for _, q := range []string{
		"SET GLOBAL innodb_buffer_pool_size = 2147483648",
		"SET GLOBAL innodb_log_file_size = 1073741824", // the template's 8 MiB redo log would make this a test of checkpoints
		"SET GLOBAL slow_query_log = 0",
		"SET GLOBAL long_query_time = 0.1",
		"SET GLOBAL log_output = 'FILE'",
		"SET GLOBAL slow_query_log_file = '" + filepath.Join(m.Dir, "slow.log") + "'",
	} {
		if _, err := admin.Exec(q); err != nil {
			b.Fatalf("%s: %v", q, err)
		}
	}
	ctx := context.Background()
	db, err := mysql.Open(ctx, m.DSNFor("clock"), 16)
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	// The migrations run as clockd runs them (mysql.MigrateDSN): on
	// connections without a read timeout.
	mdb, err := sql.Open("mysql", m.DSNFor("clock")+"?parseTime=true")
	if err != nil {
		b.Fatal(err)
	}
	defer mdb.Close()
	p, err := goose.NewProvider(goose.DialectMySQL, mdb, migrations.FS)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := p.UpTo(ctx, 3); err != nil {
		b.Fatal(err)
	}
	shards, err := mysql.SetupShards(ctx, db, 32)
	if err != nil {
		b.Fatal(err)
	}
	now := time.Now()
	t0 := time.Now()
	// Finished clocks spread over the three days before their retention,
	// rung (8 in 10) or cancelled; pending ones due in the coming week.
	const chunk = 500_000
	fill := func(n int, status string, base, spread int64) {
		for done := 0; done < n; done += chunk {
			c := min(chunk, n-done)
			q := fmt.Sprintf(`INSERT INTO clock (application, business_id, shard, status, payload, content_type,
				target_ring_at, next_try_time, attempts, rung_at, create_time, update_time)
				SELECT CONCAT('app-', seq %% 20), CONCAT('%s-', %d + seq), seq %% %d, %s, REPEAT('x', 100), 'application/json',
				  %s, %s, %s, %s, %d, %s
				FROM seq_1_to_%d`,
				status, done, shards, statusExpr(status), at(done, n, base, spread), at(done, n, base, spread), attemptsExpr(status),
				rungExpr(status, at(done, n, base, spread)), now.Add(-10*24*time.Hour).UnixMilli(), at(done, n, base, spread), c)
			if _, err := db.ExecContext(ctx, q); err != nil {
				b.Fatal(err)
			}
		}
	}
	fill(rows, "finished", now.Add(-4*24*time.Hour-2*time.Hour).UnixMilli(), 3*24*3600*1000) // all past the 24 h retention, jitter included
	fill(pending, "pending", now.Add(time.Minute).UnixMilli(), 7*24*3600*1000)
	if _, err := db.ExecContext(ctx, "ANALYZE TABLE clock"); err != nil {
		b.Fatal(err)
	}
	size := tableSize(b, db)
	logf(b, "filled %d finished + %d pending clocks (previous schema) in %v; clock is %s", rows, pending, time.Since(t0).Round(time.Second), size)

	// The migrations, one by one, timed; writes go on during 00004.
	for {
		start := time.Now()
		res, err := p.UpByOne(ctx)
		if err != nil {
			if errors.Is(err, goose.ErrNoNextVersion) {
				break
			}
			b.Fatalf("migrate: %v", err)
		}
		logf(b, "migration %s took %v on %d rows", res.Source.Path, time.Since(start).Round(10*time.Millisecond), rows+pending)
	}
	if _, err := db.ExecContext(ctx, "ANALYZE TABLE clock"); err != nil {
		b.Fatal(err)
	}
	logf(b, "after the migrations clock is %s", tableSize(b, db))

	store := mysql.NewStore(db, mysql.StoreConfig{Shards: shards})
	defer store.Close()
	if _, err := admin.Exec("SET GLOBAL slow_query_log = 1"); err != nil {
		b.Fatal(err)
	}
	// The statements clockd issues on a timer, each on the full table.
	timed := []struct {
		name string
		run  func() error
	}{
		{"count clocks per status (clockd_clocks)", func() error { _, err := store.CountClocks(ctx); return err }},
		{"janitor: next batch of finished clocks", func() error {
			_, _, err := store.FinishedBefore(ctx, alarm.StatusRung, now.Add(-24*time.Hour), time.Time{}, 0, 1000)
			return err
		}},
		{"preloader: load a shard's due clocks", func() error {
			_, err := store.LoadDue(ctx, 3, now, 0, now.Add(time.Hour), 2000)
			return err
		}},
		{"janitor lease", func() error { _, err := store.HoldLease(ctx, janitor.LeaseName, "bench", 10*time.Second); return err }},
		{"history partitions", func() error { _, err := store.HistoryDays(ctx); return err }},
		{"list by application and status", func() error {
			_, err := store.List(ctx, alarm.ListQuery{Application: "app-3", Status: alarm.StatusPending, Limit: 100})
			return err
		}},
		{"list by application", func() error {
			_, err := store.List(ctx, alarm.ListQuery{Application: "app-3", Limit: 100})
			return err
		}},
		{"list dead clocks (status alone)", func() error {
			_, err := store.List(ctx, alarm.ListQuery{Status: alarm.StatusDead, Limit: 100})
			return err
		}},
		{"list pending clocks (status alone)", func() error {
			_, err := store.List(ctx, alarm.ListQuery{Status: alarm.StatusPending, Limit: 100})
			return err
		}},
	}
	for _, tt := range timed {
		best := time.Hour
		for i := 0; i < 3; i++ {
			start := time.Now()
			if err := tt.run(); err != nil {
				b.Fatalf("%s: %v", tt.name, err)
			}
			best = min(best, time.Since(start))
		}
		logf(b, "%-45s %v (best of 3)", tt.name, best.Round(100*time.Microsecond))
	}

	// The drain, with the defaults a clockd runs with unless
	// CLOCKD_BENCH_JANITOR_BATCH / CLOCKD_BENCH_JANITOR_MOVERS say
	// otherwise. Nothing rings, so the movers do not rest.
	jcfg := janitor.Config{InstanceID: "bench", Now: time.Now, Logger: slog.New(slog.DiscardHandler), Batch: 1000, Movers: 2}
	if v := os.Getenv("CLOCKD_BENCH_JANITOR_BATCH"); v != "" {
		if jcfg.Batch, err = strconv.Atoi(v); err != nil {
			b.Fatal(err)
		}
	}
	if v := os.Getenv("CLOCKD_BENCH_JANITOR_MOVERS"); v != "" {
		if jcfg.Movers, err = strconv.Atoi(v); err != nil {
			b.Fatal(err)
		}
	}
	j := janitor.New(jcfg, store)
	b.ResetTimer()
	start := time.Now()
	if err := j.RunOnce(ctx); err != nil {
		b.Fatal(err)
	}
	took := time.Since(start)
	b.StopTimer()
	var left, hist int64
	if err := db.GetContext(ctx, &left, "SELECT COUNT(*) FROM clock WHERE status <> 'pending'"); err != nil {
		b.Fatal(err)
	}
	if err := db.GetContext(ctx, &hist, "SELECT COUNT(*) FROM clock_history"); err != nil {
		b.Fatal(err)
	}
	if left != 0 || hist != int64(rows) {
		b.Errorf("after the drain: %d finished left in clock, %d in history; want 0 and %d", left, hist, rows)
	}
	if _, err := db.ExecContext(ctx, "ANALYZE TABLE clock_history"); err != nil {
		b.Fatal(err)
	}
	var hdata, hindex int64
	if err := db.QueryRowContext(ctx, `SELECT SUM(DATA_LENGTH), SUM(INDEX_LENGTH) FROM information_schema.PARTITIONS
		WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = 'clock_history'`).Scan(&hdata, &hindex); err != nil {
		b.Fatal(err)
	}
	logf(b, "clock_history holds %d clocks: data %d MiB + indexes %d MiB (%d + %d bytes a clock)", hist, hdata>>20, hindex>>20, hdata/hist, hindex/hist)
	logf(b, "after the drain clock is %s", tableSize(b, db))
	b.ReportMetric(float64(rows)/took.Seconds(), "rows/s")
	logf(b, "janitor moved %d clocks to history in %v: %.0f rows/s (batches up to %d, movers %d)", rows, took.Round(time.Millisecond), float64(rows)/took.Seconds(), jcfg.Batch, jcfg.Movers)
	if _, err := admin.Exec("SET GLOBAL slow_query_log = 0"); err != nil {
		b.Fatal(err)
	}
	slow, _ := os.ReadFile(filepath.Join(m.Dir, "slow.log"))
	var caught []string
	for _, blk := range strings.Split(string(slow), "# Time:") {
		if strings.Contains(blk, "Query_time") {
			caught = append(caught, strings.TrimSpace(blk))
		}
	}
	logf(b, "slow log (long_query_time 0.1 s) during the timed statements and the drain: %d statements", len(caught))
	for i, c := range caught {
		if i == 10 {
			break
		}
		logf(b, "slow: %s", c[:min(len(c), 600)])
	}
}

// logf prints at once: a benchmark's log is cut short and shown at its end.
func logf(b *testing.B, format string, args ...any) {
	b.Helper()
	fmt.Fprintf(os.Stderr, "    "+format+"\n", args...)
}

func statusExpr(kind string) string {
	if kind == "pending" {
		return "'pending'"
	}
	return "IF(seq % 10 < 8, 'rung', 'cancelled')"
}

func attemptsExpr(kind string) string {
	if kind == "pending" {
		return "0"
	}
	return "IF(seq % 10 < 8, 1, 0)"
}

func rungExpr(kind, at string) string {
	if kind == "pending" {
		return "NULL"
	}
	return "IF(seq % 10 < 8, " + at + ", NULL)"
}

// at is the time of the clock seq of a chunk starting at done, of n over
// [base, base+spread): in id order, as clocks set with similar delays
// finish, give or take an hour (a pseudo-random jitter).
func at(done, n int, base, spread int64) string {
	return fmt.Sprintf("%d + (%d + seq) * %d DIV %d + (seq * 7919) %% 3600000", base, done, spread, n)
}

func tableSize(b *testing.B, db interface {
	QueryRow(string, ...any) *sql.Row
}) string {
	var rows, data, index int64
	if err := db.QueryRow(`SELECT TABLE_ROWS, DATA_LENGTH, INDEX_LENGTH FROM information_schema.TABLES
		WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = 'clock'`).Scan(&rows, &data, &index); err != nil {
		b.Fatal(err)
	}
	return fmt.Sprintf("~%d rows, data %d MiB + indexes %d MiB", rows, data>>20, index>>20)
}
