package mysql_test

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	gomysql "github.com/go-sql-driver/mysql"
	"github.com/jmoiron/sqlx"
	"github.com/pressly/goose/v3"

	"github.com/clockd/clockd/internal/mysql"
	"github.com/clockd/clockd/internal/testenv"
	"github.com/clockd/clockd/migrations"
)

var schemaTables = []string{"clock", "clock_console_session", "clock_history", "clock_instance", "clock_lease", "clock_quota", "clock_setting", "clock_shard", "clock_token"}

// schemaDB opens the test's own database; migrated says whether to apply the schema.
func schemaDB(t *testing.T, migrated bool) (*sqlx.DB, string) {
	t.Helper()
	dsn := testenv.MySQLDSN(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	db, err := mysql.Open(ctx, dsn, 8)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { db.Close() })
	if migrated {
		if err := mysql.Migrate(ctx, db, slog.New(slog.DiscardHandler)); err != nil {
			t.Fatalf("Migrate: %v", err)
		}
	}
	return db, testenv.DatabaseName(t, dsn)
}

// ourTables lists the tables of the database, without goose's own.
func ourTables(t *testing.T, db *sqlx.DB, schema string) []string {
	t.Helper()
	var names []string
	if err := db.Select(&names, `SELECT TABLE_NAME FROM information_schema.TABLES
		WHERE TABLE_SCHEMA = ? AND TABLE_NAME <> 'goose_db_version' ORDER BY TABLE_NAME`, schema); err != nil {
		t.Fatal(err)
	}
	return names
}

func TestMigrateUpDownUp(t *testing.T) {
	t.Parallel()
	db, schema := schemaDB(t, false)
	ctx := context.Background()
	log := slog.New(slog.DiscardHandler)
	if got := ourTables(t, db, schema); len(got) != 0 {
		t.Fatalf("fresh database has tables %v", got)
	}
	for round := 1; round <= 2; round++ {
		if err := mysql.Migrate(ctx, db, log); err != nil {
			t.Fatalf("round %d: Migrate: %v", round, err)
		}
		if err := mysql.Migrate(ctx, db, log); err != nil { // nothing pending: a no-op
			t.Fatalf("round %d: second Migrate: %v", round, err)
		}
		if got := ourTables(t, db, schema); strings.Join(got, ",") != strings.Join(schemaTables, ",") {
			t.Fatalf("round %d: tables after up %v, want %v", round, got, schemaTables)
		}
		// goose can read its version table back (`clockd migrate status`).
		p, err := goose.NewProvider(goose.DialectMySQL, db.DB, migrations.FS)
		if err != nil {
			t.Fatal(err)
		}
		st, err := p.Status(ctx)
		if err != nil || len(st) == 0 || st[0].State != goose.StateApplied {
			t.Fatalf("round %d: goose status %+v, %v", round, st, err)
		}
		if n, err := mysql.SetupShards(ctx, db, 4); err != nil || n != 4 {
			t.Fatalf("round %d: SetupShards = %d, %v", round, n, err)
		}
		if _, err := db.Exec(`INSERT INTO clock (application, business_id, shard, status, payload, content_type,
			target_ring_at, next_try_time, create_time, update_time) VALUES ('a', 'b', 0, 'pending', '', 'x', 1, 1, 1, 1)`); err != nil {
			t.Fatalf("round %d: insert: %v", round, err)
		}
		if err := mysql.MigrateDown(ctx, db); err != nil {
			t.Fatalf("round %d: MigrateDown: %v", round, err)
		}
		if got := ourTables(t, db, schema); len(got) != 0 {
			t.Fatalf("round %d: tables after down %v", round, got)
		}
	}
}

func TestEveryColumnHasAComment(t *testing.T) {
	t.Parallel()
	db, schema := schemaDB(t, true)
	var cols []struct {
		Table   string `db:"TABLE_NAME"`
		Column  string `db:"COLUMN_NAME"`
		Comment string `db:"COLUMN_COMMENT"`
	}
	if err := db.Select(&cols, `SELECT TABLE_NAME, COLUMN_NAME, COLUMN_COMMENT FROM information_schema.COLUMNS
		WHERE TABLE_SCHEMA = ? AND TABLE_NAME <> 'goose_db_version' ORDER BY TABLE_NAME, ORDINAL_POSITION`, schema); err != nil {
		t.Fatal(err)
	}
	tables := map[string]int{}
	for _, c := range cols {
		tables[c.Table]++
		if strings.TrimSpace(c.Comment) == "" {
			t.Errorf("column %s.%s has no COMMENT", c.Table, c.Column)
		}
	}
	if len(tables) != len(schemaTables) || tables["clock"] < 16 {
		t.Errorf("columns per table %v", tables)
	}
	var tcomments []struct {
		Table   string `db:"TABLE_NAME"`
		Comment string `db:"TABLE_COMMENT"`
	}
	if err := db.Select(&tcomments, `SELECT TABLE_NAME, TABLE_COMMENT FROM information_schema.TABLES
		WHERE TABLE_SCHEMA = ? AND TABLE_NAME <> 'goose_db_version'`, schema); err != nil {
		t.Fatal(err)
	}
	for _, c := range tcomments {
		if strings.TrimSpace(c.Comment) == "" {
			t.Errorf("table %s has no COMMENT", c.Table)
		}
	}
	// The columns the issue names, with times as integer milliseconds.
	want := map[string]string{
		"id": "bigint", "application": "varchar", "business_id": "varchar", "payload": "mediumtext",
		"content_type": "varchar", "target_ring_at": "bigint", "latest_ring_at": "bigint", "max_attempts": "int",
		"next_try_time": "bigint", "attempts": "int", "status": "varchar", "shard": "smallint",
		"last_error": "varchar", "rung_at": "bigint", "create_time": "bigint", "update_time": "bigint",
	}
	var types []struct {
		Column string `db:"COLUMN_NAME"`
		Type   string `db:"DATA_TYPE"`
	}
	if err := db.Select(&types, `SELECT COLUMN_NAME, DATA_TYPE FROM information_schema.COLUMNS
		WHERE TABLE_SCHEMA = ? AND TABLE_NAME = 'clock'`, schema); err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, c := range types {
		got[c.Column] = c.Type
	}
	for col, typ := range want {
		if got[col] != typ {
			t.Errorf("clock.%s is %q, want %q", col, got[col], typ)
		}
	}
	// UNIQUE (application, business_id).
	var uniq []string
	if err := db.Select(&uniq, `SELECT COLUMN_NAME FROM information_schema.STATISTICS
		WHERE TABLE_SCHEMA = ? AND TABLE_NAME = 'clock' AND NON_UNIQUE = 0 AND INDEX_NAME <> 'PRIMARY'
		ORDER BY INDEX_NAME, SEQ_IN_INDEX`, schema); err != nil {
		t.Fatal(err)
	}
	if strings.Join(uniq, ",") != "application,business_id" {
		t.Errorf("unique key columns %v, want application,business_id", uniq)
	}
}

type explainRow struct {
	ID           sql.NullInt64  `db:"id"`
	SelectType   sql.NullString `db:"select_type"`
	Table        sql.NullString `db:"table"`
	Partitions   sql.NullString `db:"partitions"`
	Type         sql.NullString `db:"type"`
	PossibleKeys sql.NullString `db:"possible_keys"`
	Key          sql.NullString `db:"key"`
	KeyLen       sql.NullString `db:"key_len"`
	Ref          sql.NullString `db:"ref"`
	Rows         sql.NullString `db:"rows"`
	Filtered     sql.NullString `db:"filtered"`
	Extra        sql.NullString `db:"Extra"`
}

func TestPreloadQueryIsAnIndexRangeScan(t *testing.T) {
	t.Parallel()
	db, _ := schemaDB(t, true)
	// Enough rows, spread over shards and statuses, that the optimizer's
	// choice is a real one.
	statuses := []string{"pending", "rung", "rung", "cancelled", "pending", "dead", "firing", "rung"}
	for chunk := 0; chunk < 4; chunk++ {
		var b strings.Builder
		b.WriteString(`INSERT INTO clock (application, business_id, shard, status, payload, content_type,
			target_ring_at, next_try_time, create_time, update_time) VALUES `)
		for i := 0; i < 1000; i++ {
			k := chunk*1000 + i
			if i > 0 {
				b.WriteByte(',')
			}
			fmt.Fprintf(&b, "('app', 'k-%d', %d, '%s', '', 'application/json', %d, %d, 0, 0)",
				k, k%16, statuses[k%len(statuses)], 1_700_000_000_000+int64(k)*1000, 1_700_000_000_000+int64(k)*1000)
		}
		if _, err := db.Exec(b.String()); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := db.Exec("ANALYZE TABLE clock"); err != nil {
		t.Fatal(err)
	}
	const q = `SELECT id, next_try_time FROM clock WHERE shard=? AND status='pending' AND next_try_time <= ? ORDER BY next_try_time, id LIMIT 100`
	for _, upTo := range []int64{1_700_000_100_000, 1_700_002_000_000, 1_800_000_000_000} {
		rows, err := db.Queryx("EXPLAIN "+q, 4, upTo) // shard 4 has pending rows
		if err != nil {
			t.Fatal(err)
		}
		var plan []explainRow
		for rows.Next() {
			var r explainRow
			if err := rows.StructScan(&r); err != nil {
				// Column sets differ between MySQL and MariaDB; scan what is there.
				t.Fatalf("scan EXPLAIN: %v", err)
			}
			plan = append(plan, r)
		}
		rows.Close()
		if len(plan) != 1 {
			t.Fatalf("EXPLAIN has %d rows: %+v", len(plan), plan)
		}
		p := plan[0]
		t.Logf("next_try_time <= %d: type=%s key=%s rows=%s extra=%q", upTo, p.Type.String, p.Key.String, p.Rows.String, p.Extra.String)
		if p.Key.String != "idx_clock_shard_status_next_try" {
			t.Errorf("uses key %q, want idx_clock_shard_status_next_try", p.Key.String)
		}
		if p.Type.String != "range" && p.Type.String != "ref" {
			t.Errorf("access type %q, want range or ref", p.Type.String)
		}
		if strings.Contains(strings.ToLower(p.Extra.String), "filesort") {
			t.Errorf("Extra %q: the scan sorts instead of reading the index in order", p.Extra.String)
		}
	}
}

func TestSetupShards(t *testing.T) {
	t.Parallel()
	db, _ := schemaDB(t, true)
	ctx := context.Background()
	n, err := mysql.SetupShards(ctx, db, 8)
	if err != nil || n != 8 {
		t.Fatalf("first SetupShards(8) = %d, %v", n, err)
	}
	for _, other := range []int{16, 1, 8} {
		n, err := mysql.SetupShards(ctx, db, other)
		if err != nil || n != 8 {
			t.Fatalf("SetupShards(%d) = %d, %v; want the recorded 8", other, n, err)
		}
	}
	var shards []int
	if err := db.Select(&shards, "SELECT shard FROM clock_shard ORDER BY shard"); err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(shards) != "[0 1 2 3 4 5 6 7]" {
		t.Errorf("clock_shard rows %v, want 0..7", shards)
	}
	var v string
	if err := db.Get(&v, "SELECT value FROM clock_setting WHERE name = 'shard_count'"); err != nil || v != "8" {
		t.Errorf("clock_setting shard_count = %q, %v", v, err)
	}
	var owners int
	if err := db.Get(&owners, "SELECT COUNT(*) FROM clock_shard WHERE owner IS NOT NULL OR epoch <> 0 OR lease_until <> 0"); err != nil || owners != 0 {
		t.Errorf("new shard rows are not free: %d, %v", owners, err)
	}
}

func TestOpenCreatesTheDatabase(t *testing.T) {
	t.Parallel()
	cfg, err := gomysql.ParseDSN(testenv.ServerDSN())
	if err != nil {
		t.Fatal(err)
	}
	cfg.DBName = testenv.Name("clockd-open-") // a name that needs quoting
	// Make sure the database server answers before counting on Open.
	_ = testenv.MySQLDSN(t)
	admin, err := sql.Open("mysql", testenv.ServerDSN())
	if err != nil {
		t.Fatal(err)
	}
	name := cfg.DBName
	t.Cleanup(func() {
		defer admin.Close()
		if _, err := admin.Exec("DROP DATABASE IF EXISTS `" + name + "`"); err != nil {
			t.Logf("drop %s: %v", name, err)
		}
	})
	exists := func() (charset, collation string, ok bool) {
		err := admin.QueryRow(`SELECT DEFAULT_CHARACTER_SET_NAME, DEFAULT_COLLATION_NAME FROM information_schema.SCHEMATA
			WHERE SCHEMA_NAME = ?`, cfg.DBName).Scan(&charset, &collation)
		if err == sql.ErrNoRows {
			return "", "", false
		}
		if err != nil {
			t.Fatal(err)
		}
		return charset, collation, true
	}
	if _, _, ok := exists(); ok {
		t.Fatalf("database %s exists before Open", cfg.DBName)
	}
	ctx := context.Background()
	for i := 0; i < 2; i++ { // the second Open finds it there
		db, err := mysql.Open(ctx, cfg.FormatDSN(), 4)
		if err != nil {
			t.Fatalf("Open #%d: %v", i+1, err)
		}
		var cur string
		if err := db.Get(&cur, "SELECT DATABASE()"); err != nil || cur != cfg.DBName {
			t.Errorf("connected to %q, %v; want %q", cur, err, cfg.DBName)
		}
		db.Close()
	}
	charset, collation, ok := exists()
	if !ok || charset != "utf8mb4" || collation != "utf8mb4_bin" {
		t.Errorf("database %s: exists %v, charset %q, collation %q", cfg.DBName, ok, charset, collation)
	}

	// A DSN without a database is refused.
	cfg.DBName = ""
	if db, err := mysql.Open(ctx, cfg.FormatDSN(), 4); err == nil {
		db.Close()
		t.Errorf("Open of a DSN without a database succeeded")
	}
}

func TestPrepareDSN(t *testing.T) {
	t.Parallel()
	cfg, err := mysql.PrepareDSN("u:p@tcp(db:3306)/clock?timeout=2s")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.DBName != "clock" || cfg.Timeout != 2*time.Second || !cfg.InterpolateParams || !cfg.ParseTime || cfg.Params["time_zone"] != "'+00:00'" {
		t.Errorf("prepared %+v", cfg)
	}
	for _, bad := range []string{"u:p@tcp(db:3306)/", "not a dsn"} {
		if _, err := mysql.PrepareDSN(bad); err == nil {
			t.Errorf("PrepareDSN(%q) accepted", bad)
		}
	}
}
