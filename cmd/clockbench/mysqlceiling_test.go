package main

import (
	"context"
	"database/sql"
	"testing"

	"github.com/go-sql-driver/mysql"

	"github.com/clockd/clockd/internal/testenv"
)

// serverDSN returns the DSN of the test MySQL server with no database
// selected. It fails the test under CI=true (skips elsewhere) when the
// server is unreachable: testenv.MySQLDSN checks it.
func serverDSN(t *testing.T) string {
	t.Helper()
	cfg, err := mysql.ParseDSN(testenv.MySQLDSN(t))
	if err != nil {
		t.Fatal(err)
	}
	cfg.DBName = ""
	return cfg.FormatDSN()
}

func TestMySQLCeilings(t *testing.T) {
	dsn := serverDSN(t)
	cfg := testConfig(t, "-mysql", dsn, "-scenario", "mysql", "-ceiling-warmup", "100ms", "-ceiling-duration", "300ms",
		"-ceiling-insert-clients", "8", "-ceiling-batch-clients", "2", "-batch-size", "50")
	runID := testenv.Name("t")
	res, err := runMySQLCeilings(context.Background(), cfg, runID, t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	if res.Version == "" || res.Database != "clockbench_ceiling_"+runID || !res.Dropped {
		t.Errorf("version %q database %q dropped %v", res.Version, res.Database, res.Dropped)
	}
	for _, c := range []struct {
		run           *CeilingRun
		clients, rows int
	}{{res.InsertOne, 8, 1}, {res.InsertBatch, 2, 50}, {res.Update, 2, 50}} {
		r := c.run
		if r == nil {
			t.Fatal("a ceiling is missing")
		}
		if r.Clients != c.clients || r.RowsPerStmt != c.rows || r.Statements == 0 || r.Rate <= 0 || r.Errors != 0 {
			t.Errorf("%s: %+v", r.What, r)
		}
		// every statement wrote all its rows: the UPDATE batches never overlap
		if r.Rows != r.Statements*c.rows {
			t.Errorf("%s: %d rows from %d statements of %d", r.What, r.Rows, r.Statements, c.rows)
		}
		if r.MeasuredS != 0.3 || r.Latency.Count != r.Statements {
			t.Errorf("%s: measured %.2fs, %d latencies for %d statements", r.What, r.MeasuredS, r.Latency.Count, r.Statements)
		}
	}

	db, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var name string
	switch err := db.QueryRow("SHOW DATABASES LIKE '" + res.Database + "'").Scan(&name); err {
	case sql.ErrNoRows:
	case nil:
		t.Errorf("scratch database %s still exists", name)
	default:
		t.Fatal(err)
	}
}

func TestMySQLCeilingsUnreachable(t *testing.T) {
	cfg := testConfig(t, "-mysql", "root:@tcp(127.0.0.1:1)/?timeout=1s", "-ceiling-duration", "100ms")
	if _, err := runMySQLCeilings(context.Background(), cfg, "x", t.Logf); err == nil {
		t.Error("no error from an unreachable server")
	}
}
