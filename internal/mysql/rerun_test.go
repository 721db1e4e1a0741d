package mysql

import (
	"bytes"
	"context"
	"io/fs"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/pressly/goose/v3"

	"github.com/clockd/clockd/internal/testenv"
	"github.com/clockd/clockd/migrations"
)

// The migrations' pool takes a statement of a migration run again after a
// cut as done only when every change it makes is in the schema: a clause
// made by other means (an index built ahead with gh-ost, a column added by
// hand) must not pass for the rest of its statement (found by the review of
// the first version, which judged by the error code alone).
func TestRerunTakesAsDoneOnlyWhatIsWhollyApplied(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cfg, err := PrepareDSN(testenv.MySQLDSN(t))
	if err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	db, err := openConnector(ctx, cfg, 1, slog.New(slog.NewTextHandler(&logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	exec := func(q string) error { _, err := db.ExecContext(ctx, q); return err }
	must := func(q string) {
		t.Helper()
		if err := exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	count := func(q string, args ...any) int {
		t.Helper()
		var n int
		if err := db.GetContext(ctx, &n, q, args...); err != nil {
			t.Fatal(err)
		}
		return n
	}
	hasIndex := func(name string) bool {
		return count("SELECT COUNT(*) FROM information_schema.STATISTICS WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = 't' AND INDEX_NAME = ?", name) > 0
	}
	hasColumn := func(name string) bool {
		return count("SELECT COUNT(*) FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = 't' AND COLUMN_NAME = ?", name) > 0
	}

	create := "CREATE TABLE t (\n  a INT NOT NULL COMMENT 'a, b',\n  b INT NULL,\n  PRIMARY KEY (a),\n  INDEX ix_old (b)\n)"
	must(create)
	must(create) // the same table again: done
	if err := exec("CREATE TABLE t (a INT, z INT)"); err == nil {
		t.Error("CREATE TABLE t (a, z) over a table t (a, b) was taken as done")
	}

	// a partitioned table with parentheses in its options, as clock_history
	part := "CREATE TABLE h (\n  id BIGINT NOT NULL COMMENT 'id (of the clock)',\n  fin BIGINT NOT NULL,\n  PRIMARY KEY (id, fin)\n) ENGINE=InnoDB\n  COMMENT='finished (moved)'\n  PARTITION BY RANGE (fin) (PARTITION pmax VALUES LESS THAN MAXVALUE)"
	must(part)
	must(part)

	// as 00013 run again: wholly applied, then partly
	must("ALTER TABLE t ADD INDEX ix_new (a, b), DROP INDEX ix_old, ALGORITHM=INPLACE, LOCK=NONE")
	must("ALTER TABLE t ADD INDEX ix_new (a, b), DROP INDEX ix_old, ALGORITHM=INPLACE, LOCK=NONE")
	must("ALTER TABLE t ADD INDEX ix_old (b)")
	if err := exec("ALTER TABLE t ADD INDEX ix_new (a, b), DROP INDEX ix_old"); err == nil || !hasIndex("ix_old") {
		t.Errorf("ADD INDEX ix_new, DROP INDEX ix_old with ix_new there and ix_old too: %v, ix_old there %v; want the error and ix_old kept", err, hasIndex("ix_old"))
	}
	// as 00006: a column made by hand does not pass for the others
	must("ALTER TABLE t ADD COLUMN c INT")
	if err := exec("ALTER TABLE t ADD COLUMN c INT, ADD COLUMN d INT"); err == nil || hasColumn("d") {
		t.Errorf("ADD COLUMN c, ADD COLUMN d with only c there: %v; want the error", err)
	}
	// wholly applied, with a MODIFY run again on its own
	must("ALTER TABLE t ADD COLUMN d INT")
	must("ALTER TABLE t MODIFY b BIGINT NULL COMMENT 'x, y', ADD COLUMN c INT, ADD COLUMN d INT")
	if n := count("SELECT COUNT(*) FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = 't' AND COLUMN_NAME = 'b' AND DATA_TYPE = 'bigint'"); n != 1 {
		t.Error("the MODIFY of a statement taken as done was not run again")
	}
	// a seed row; an INSERT ... SELECT keeps its duplicate
	must("INSERT INTO t (a) VALUES (1)")
	must("INSERT INTO t (a) VALUES (1)")
	if err := exec("INSERT INTO t (a) SELECT a FROM t"); err == nil {
		t.Error("an INSERT ... SELECT hitting a duplicate was taken as done")
	}
	if got := strings.Count(logs.String(), "applied already"); got != 5 {
		t.Errorf("%d WARNs of a statement applied already, want 5:\n%s", got, logs.String())
	}
}

// Every migration's statements, run again right after the migration was
// applied (a run cut after its last statement, before goose recorded its
// version), are each taken as done: the next start finishes any migration
// cut between two of its statements.
func TestEveryMigrationCanBeRunAgainStatementByStatement(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	dsn := testenv.MySQLDSN(t)
	cfg, err := PrepareDSN(dsn)
	if err != nil {
		t.Fatal(err)
	}
	db, err := openConnector(ctx, cfg, 1, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	entries, err := fs.ReadDir(migrations.FS, ".")
	if err != nil {
		t.Fatal(err)
	}
	var n int
	defer func() {
		if n < 25 {
			t.Errorf("only %d statements run again", n)
		}
	}()
	for _, e := range entries {
		v, err := goose.NumericComponent(e.Name())
		if err != nil {
			continue
		}
		if err := MigrateDSNUpTo(ctx, dsn, slog.New(slog.DiscardHandler), v); err != nil {
			t.Fatalf("migrate up-to %d: %v", v, err)
		}
		data, err := fs.ReadFile(migrations.FS, e.Name())
		if err != nil {
			t.Fatal(err)
		}
		up, _, _ := strings.Cut(string(data), "-- +goose Down")
		_, up, _ = strings.Cut(up, "-- +goose Up")
		for _, stmt := range splitStatements(up) {
			n++
			if _, err := db.ExecContext(ctx, stmt); err != nil {
				t.Errorf("%s, run again: %s: %v", e.Name(), statementHead(stmt), err)
			}
		}
	}
}

// splitStatements splits SQL at the semicolons outside quotes and comments.
func splitStatements(sql string) []string {
	var out []string
	for _, s := range splitAt(sql, ';') {
		if statementBody(s) != "" { // not a comment alone
			out = append(out, s)
		}
	}
	return out
}
