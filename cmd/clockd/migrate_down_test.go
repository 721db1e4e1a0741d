package main

import (
	"bytes"
	"context"
	"database/sql"
	"strings"
	"testing"

	"github.com/clockd/clockd/internal/testenv"
)

// A rollback is the one command that can drop every clock. An operator who
// types 'clockd migrate down' as goose's own CLI means it (one migration)
// must not lose the clock table, and nothing may be rolled back under
// running instances or without -confirm.
func TestMigrateDownIsOneStepConfirmedAndRefusedUnderLiveInstances(t *testing.T) {
	t.Parallel()
	dsn, migrate := migrateCommand(t)
	if _, err := migrate("up"); err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec(`INSERT INTO clock (application, business_id, shard, status, payload, content_type, target_ring_at,
		latest_ring_at, max_attempts, next_try_time, create_time, update_time)
		VALUES ('order', 'o-1', 0, 'pending', '{}', 'application/json', 1, 0, 5, 1, 1, 1)`); err != nil {
		t.Fatal(err)
	}
	version := func() (v int64) {
		t.Helper()
		if err := db.QueryRow("SELECT MAX(version_id) FROM goose_db_version WHERE is_applied").Scan(&v); err != nil {
			t.Fatal(err)
		}
		return v
	}
	clocks := func() (n int) {
		t.Helper()
		if err := db.QueryRow("SELECT COUNT(*) FROM clock").Scan(&n); err != nil {
			t.Fatalf("the clock table: %v", err)
		}
		return n
	}
	top := version()

	// Without -confirm: says what it would do, changes nothing, fails.
	out, err := migrate("down")
	if err == nil || !strings.Contains(err.Error(), "-confirm") || !strings.Contains(err.Error(), "nothing was changed") || out != "" {
		t.Fatalf("migrate down without -confirm: %v, stdout %q", err, out)
	}
	out, err = migrate("down-to", "0")
	if err == nil || !strings.Contains(err.Error(), "every clock") || !strings.Contains(err.Error(), "00001") {
		t.Fatalf("migrate down-to 0 without -confirm: %v, stdout %q", err, out)
	}
	if v := version(); v != top || clocks() != 1 {
		t.Fatalf("after refused rollbacks: version %d (want %d), %d clocks", v, top, clocks())
	}

	// With -confirm: one migration, not all of them; the clocks stay.
	out, err = migrate("down", "-confirm")
	if err != nil {
		t.Fatalf("migrate down -confirm: %v", err)
	}
	if v := version(); v >= top || v == 0 {
		t.Fatalf("migrate down -confirm left version %d (was %d); want one step back", v, top)
	}
	if !strings.Contains(out, "rolled back") || strings.Count(out, "rolled back") != 1 {
		t.Errorf("migrate down -confirm said %q", out)
	}
	if n := clocks(); n != 1 {
		t.Errorf("%d clocks after one step down, want 1", n)
	}
	if _, err := migrate("up"); err != nil { // and back up again
		t.Fatal(err)
	}

	// A live instance (its heartbeat has not expired): refused even with
	// -confirm.
	if _, err := db.Exec("INSERT INTO clock_instance (instance_id, http_addr, started_at, expires_at, rings, claim_room) " +
		"VALUES ('clockd-a', '', 0, CAST(UNIX_TIMESTAMP(NOW(3)) * 1000 AS SIGNED) + 60000, 1, 1)"); err != nil {
		t.Fatal(err)
	}
	out, err = migrate("down-to", "0", "-confirm")
	if err == nil || !strings.Contains(err.Error(), "clockd-a") || !strings.Contains(err.Error(), "live") {
		t.Fatalf("migrate down-to 0 -confirm with a live instance: %v, stdout %q", err, out)
	}
	if v := version(); v != top || clocks() != 1 {
		t.Fatalf("after a rollback refused for a live instance: version %d (want %d), %d clocks", v, top, clocks())
	}
	// An expired heartbeat (an instance killed long ago) does not hold it.
	if _, err := db.Exec("UPDATE clock_instance SET expires_at = 1"); err != nil {
		t.Fatal(err)
	}

	if _, err := migrate("down-to", "-1", "-confirm"); err == nil {
		t.Error("migrate down-to -1 succeeded")
	}
	for _, bad := range []string{"x", "+3", "03", "1e3"} {
		if _, err := migrate("down-to", bad, "-confirm"); err == nil || !strings.Contains(err.Error(), "not a migration number") {
			t.Errorf("migrate down-to %q: %v", bad, err)
		}
	}
	if out, err := migrate("down-to", "999", "-confirm"); err != nil || !strings.Contains(out, "nothing to roll back") {
		t.Errorf("migrate down-to 999: %v, %q", err, out)
	}
	if version() != top {
		t.Fatal("a refused down-to changed the schema")
	}
	out, err = migrate("down-to", "0", "-confirm")
	if err != nil || !strings.Contains(out, "schema now at version 0") {
		t.Fatalf("migrate down-to 0 -confirm: %v, %q", err, out)
	}
	if got := runTables(t, dsn); len(got) != 0 {
		t.Errorf("tables after down-to 0: %v", got)
	}
	if out, err := migrate("down", "-confirm"); err != nil || !strings.Contains(out, "nothing to roll back") {
		t.Errorf("migrate down on an empty schema: %v, %q", err, out)
	}
}

// migrateCommand returns a fresh database's DSN and a function that runs
// `clockd migrate ARGS...` on it, returning what it printed.
func migrateCommand(t *testing.T) (string, func(args ...string) (string, error)) {
	dsn := testenv.MySQLDSN(t)
	env := runEnvOf(map[string]string{"CLOCKD_MYSQL_DSN": dsn, "CLOCKD_SHARDS": "4", "CLOCKD_LOG_LEVEL": "warn"})
	return dsn, func(args ...string) (string, error) {
		var stdout, stderr bytes.Buffer
		err := run(context.Background(), append([]string{"migrate"}, args...), env, &stdout, &stderr)
		return stdout.String(), err
	}
}
