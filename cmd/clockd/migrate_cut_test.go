package main

import (
	"strings"
	"testing"
	"time"

	"github.com/clockd/clockd/internal/testenv"
)

// A first start on an empty database whose MySQL connection dies in the
// middle of a migration (MySQL restarted or failed over, a KILL, clockd's
// pod killed by a startup probe while it migrates). goose runs each
// migration in a transaction, but MySQL commits every DDL statement on its
// own: 00001's first two CREATE TABLEs stay, its version is not recorded.
// The start fails, as it must; but every later start runs 00001 again from
// its first statement and fails on "Table 'clock_setting' already exists":
// clockd never comes up again without a DBA dropping tables by hand.
// README: "clockd serve applies pending goose migrations at start"; the
// operator expects the next start (Kubernetes restarts the pod) to finish
// the job, and no half-applied schema to be left behind.
//
// Found by review; the next start now takes each statement of the cut
// migration that was applied already as done (rerunConn) and finishes it.
func TestMigrationCutMidwayNextStartComesUp(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	dsn, proxy := proxiedDSN(t, e)
	// the connection dies as 00001 sends its third table (clock_setting
	// and clock are created by then)
	fired := proxy.CutOn("CREATE TABLE clock_shard", false)
	d := testenv.LaunchClockd(t, e.vars(map[string]string{"CLOCKD_MYSQL_DSN": dsn, "CLOCKD_LOG_LEVEL": "info"}))
	select {
	case <-fired:
	case <-time.After(60 * time.Second):
		t.Fatalf("the migration never sent CREATE TABLE clock_shard:\n%s", d.Logs())
	}
	err := d.Wait(60 * time.Second)
	if err == nil {
		t.Fatalf("clockd started although its migration was cut:\n%s", d.Logs())
	}
	first := d.Logs()
	t.Logf("first start, migration cut: exit %v", err)

	// MySQL is fine again; the operator (or Kubernetes) starts clockd again
	d.Start()
	deadline := time.Now().Add(60 * time.Second)
	for {
		if code, _ := d.Ready(); code == 200 {
			break
		}
		if logs := strings.TrimPrefix(d.Logs(), first); strings.Contains(logs, `msg="clockd stopped"`) {
			t.Fatalf("the start after a migration cut midway exits again, and every later start will: the schema "+
				"is half-applied (00001's first tables exist, its version is not recorded):\n%s", tailOf(logs, 3000))
		}
		if time.Now().After(deadline) {
			t.Fatalf("clockd not ready 60s after its second start:\n%s", tailOf(d.Logs(), 3000))
		}
		time.Sleep(100 * time.Millisecond)
	}
	if logs := strings.TrimPrefix(d.Logs(), first); !strings.Contains(logs, "applied already") {
		t.Errorf("the second start did not say it found a statement of the cut migration applied:\n%s", tailOf(logs, 3000))
	}
	// and the schema is whole
	db := e.openDB(t)
	for _, table := range []string{"clock_setting", "clock", "clock_shard", "clock_instance", "clock_history"} {
		var n int
		if err := db.QueryRow("SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ?", table).Scan(&n); err != nil || n != 1 {
			t.Errorf("table %s missing after the second start (%d, %v)", table, n, err)
		}
	}
}

func tailOf(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "…" + s[len(s)-n:]
}
