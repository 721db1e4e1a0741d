package main

import (
	"database/sql"
	"strings"
	"testing"
)

// README, "Upgrading a database that never trimmed": on a large table the
// CHECK of migration 00005 (a table copy) is added ahead with gh-ost or
// pt-online-schema-change. The upgrade then goes: migrate up-to 4, add the
// constraint, mark 00005 applied, migrate. Before, the README had 00005
// marked on a database at version 3, and goose refused every later
// migration ("missing (out-of-order) migration ... version 4").
func TestMigrateUpToForAConstraintAddedAhead(t *testing.T) {
	t.Parallel()
	dsn, migrate := migrateCommand(t)
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	applied := func() (vs []int64) {
		t.Helper()
		rows, err := db.Query("SELECT version_id FROM goose_db_version WHERE is_applied AND version_id > 0 ORDER BY version_id")
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		for rows.Next() {
			var v int64
			if err := rows.Scan(&v); err != nil {
				t.Fatal(err)
			}
			vs = append(vs, v)
		}
		return vs
	}

	// a database of a clockd from before migration 00004, with a clock
	if out, err := migrate("up-to", "3"); err != nil || !strings.Contains(out, "schema now at version 3") {
		t.Fatalf("migrate up-to 3: %v, %q", err, out)
	}
	if _, err := db.Exec(`INSERT INTO clock (application, business_id, shard, status, payload, content_type, target_ring_at,
		latest_ring_at, max_attempts, next_try_time, create_time, update_time)
		VALUES ('order', 'o-1', 0, 'pending', '{}', 'application/json', 1, 0, 5, 1, 1, 1)`); err != nil {
		t.Fatal(err)
	}
	// the README's steps
	if out, err := migrate("up-to", "4"); err != nil || !strings.Contains(out, "schema now at version 4") {
		t.Fatalf("migrate up-to 4: %v, %q", err, out)
	}
	if _, err := db.Exec("ALTER TABLE clock ADD CONSTRAINT ck_clock_status CHECK " +
		"(status IN ('pending', 'firing', 'rung', 'cancelled', 'expired', 'dead'))"); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec("INSERT INTO goose_db_version (version_id, is_applied) VALUES (5, 1)"); err != nil {
		t.Fatal(err)
	}
	if out, err := migrate(); err != nil || !strings.Contains(out, "schema up to date") {
		t.Fatalf("migrate after marking 00005 applied: %v, %q", err, out)
	}
	got := applied()
	for i, v := range got {
		if v != int64(i+1) {
			t.Fatalf("applied %v, want every version from 1", got)
		}
	}
	if len(got) < 14 {
		t.Errorf("applied %v, want every migration", got)
	}
	var n int
	if err := db.QueryRow("SELECT COUNT(*) FROM clock WHERE business_id = 'o-1'").Scan(&n); err != nil || n != 1 {
		t.Errorf("the clock after the upgrade: %d, %v", n, err)
	}
	// the constraint holds (added ahead, not twice)
	if _, err := db.Exec("UPDATE clock SET status = 'bogus' WHERE business_id = 'o-1'"); err == nil {
		t.Error("a status outside the CHECK was written")
	}

	// up-to a version already passed changes nothing; a bad version is refused
	if out, err := migrate("up-to", "4"); err != nil || !strings.Contains(out, "nothing applied") {
		t.Errorf("migrate up-to 4 on a newer schema: %v, %q", err, out)
	}
	for _, bad := range []string{"0", "x", "04", "3.5"} {
		if _, err := migrate("up-to", bad); err == nil || !strings.Contains(err.Error(), "not a migration number") {
			t.Errorf("migrate up-to %s: %v", bad, err)
		}
	}
	if _, err := migrate("up-to"); err == nil || !strings.Contains(err.Error(), "which version") {
		t.Errorf("migrate up-to without a version: %v", err)
	}
}
