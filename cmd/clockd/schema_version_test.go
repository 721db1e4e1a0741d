package main

// A schema whose version does not match the binary (newer
// after a rollback; older when migrate_on_start is off and migrate was not run).

import (
	"context"
	"database/sql"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/pressly/goose/v3"

	"github.com/clockd/clockd/internal/testenv"
	"github.com/clockd/clockd/migrations"
)

// gooseProvider is goose over the test database, as clockd runs it.
func gooseProvider(t *testing.T, db *sql.DB) *goose.Provider {
	t.Helper()
	p, err := goose.NewProvider(goose.DialectMySQL, db, migrations.FS)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func latestSchemaVersion(t *testing.T, db *sql.DB) int64 {
	t.Helper()
	src := gooseProvider(t, db).ListSources()
	return src[len(src)-1].Version
}

func mustExec(t *testing.T, db *sql.DB, q string, args ...any) {
	t.Helper()
	if _, err := db.Exec(q, args...); err != nil {
		t.Fatalf("%s: %v", strings.Fields(q)[0], err)
	}
}

// A binary rolled back after an upgrade finds a schema newer than any
// migration it knows. clockd neither refuses nor says so: `clockd migrate`
// answers "schema up to date", `migrate status` lists only what it knows,
// and `serve` starts and rings on a schema it was not written for, without
// a word in its log. Reproduce: migrate, then
//
//	INSERT INTO goose_db_version (version_id, is_applied) VALUES (<latest+1>, 1)
//
// and start clockd. It must refuse to start, or at least log a warning
// naming the database's version and its own.
func TestSchemaNewerThanBinary(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	db := e.openDB(t)
	if _, err := gooseProvider(t, db).Up(context.Background()); err != nil {
		t.Fatal(err)
	}
	future := latestSchemaVersion(t, db) + 1
	mustExec(t, db, "INSERT INTO goose_db_version (version_id, is_applied) VALUES (?, 1)", future)

	var stdout, stderr testenv.SyncBuffer
	err := run(context.Background(), []string{"migrate"}, runEnvOf(map[string]string{"CLOCKD_MYSQL_DSN": e.DSN, "CLOCKD_SHARDS": "4"}), &stdout, &stderr)
	if err == nil && !mentionsVersion(stdout.String()+stderr.String(), future) {
		t.Errorf("clockd migrate on a schema at version %d (newer than this binary): succeeded saying %q, nothing about version %d",
			future, strings.TrimSpace(stdout.String()), future)
	}

	// migrate status lists the binary's migrations, and says the schema is beyond them
	var status testenv.SyncBuffer
	if err := run(context.Background(), []string{"migrate", "status"}, runEnvOf(map[string]string{"CLOCKD_MYSQL_DSN": e.DSN}), &status, &stderr); err != nil ||
		!mentionsVersion(status.String(), future) {
		t.Errorf("clockd migrate status on a schema at version %d: %v, %q says nothing about it", future, err, status.String())
	}

	d := testenv.LaunchClockd(t, e.vars(map[string]string{"CLOCKD_SHARDS": "4"}))
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if l := d.Logs(); strings.Contains(l, "clockd serving") || strings.Contains(l, "clockd: ") {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	time.Sleep(time.Second)
	logs := d.Logs()
	if strings.Contains(logs, "clockd serving") && !mentionsVersion(logs, future) {
		t.Errorf("clockd serve on a schema at version %d, newer than any migration it knows: it serves and its log says nothing about it:\n%s",
			future, logs)
	}
}

// The README's least-privilege set-up runs the service with
// CLOCKD_MYSQL_MIGRATE_ON_START=false and has a DBA run `clockd migrate`.
// When an upgrade's migrate step is forgotten (or fails), the new clockd
// starts on the old schema without a word about it: it answers creates 201,
// but its lease round fails on every heartbeat ("Unknown column
// 'claim_room'"), it holds no shard, and no clock ever rings — /readyz only
// says "shard leases not renewed". Reproduce: `clockd migrate` with a
// binary of schema 11, then start this one with
// CLOCKD_MYSQL_MIGRATE_ON_START=false.
//
// clockd must refuse to start on a schema that lacks its migrations,
// saying which are pending and to run `clockd migrate`.
func TestOldSchemaWithoutMigrateOnStart(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	db := e.openDB(t)
	old := latestSchemaVersion(t, db) - 3
	if _, err := gooseProvider(t, db).UpTo(context.Background(), old); err != nil {
		t.Fatal(err)
	}
	cons := testenv.Consume(t, e.AMQP, e.Exchange, "nomig")
	d := testenv.LaunchClockd(t, e.vars(map[string]string{"CLOCKD_SHARDS": "4", "CLOCKD_MYSQL_MIGRATE_ON_START": "false"}))
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if l := d.Logs(); strings.Contains(l, "clockd serving") || strings.Contains(l, "clockd: ") {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if !strings.Contains(d.Logs(), "clockd serving") {
		if !strings.Contains(d.Logs(), "migrate") {
			t.Errorf("clockd stopped on a schema at version %d without saying to run clockd migrate:\n%s", old, d.Logs())
		}
		return // refused: fine
	}
	d.WaitHealthy(10 * time.Second)
	code, err := d.Do(context.Background(), "POST", "/v1/clocks",
		map[string]any{"application": "nomig", "business_id": "x", "payload": "{}", "delay": "1s"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if code == 201 && !cons.WaitDistinct(1, 15*time.Second) {
		code, body := d.Ready()
		t.Errorf("clockd serves on a schema at version %d (it needs %d) with mysql.migrate_on_start false: a create answered 201 "+
			"and its clock did not ring in 15 s; /readyz %d %s", old, old+3, code, body)
	}
}

// mentionsVersion reports whether a line of s speaks of a schema or
// migration version v (not a timestamp or a port that happens to hold it).
func mentionsVersion(s string, v int64) bool {
	word := regexp.MustCompile(`(^|[^0-9])0*` + fmt.Sprint(v) + `([^0-9]|$)`)
	for _, line := range strings.Split(s, "\n") {
		l := strings.ToLower(line)
		if (strings.Contains(l, "version") || strings.Contains(l, "schema") || strings.Contains(l, "migration")) &&
			word.MatchString(regexp.MustCompile(`time=\S+|addr=\S+|\d+ms|"time":"[^"]*"`).ReplaceAllString(line, "")) {
			return true
		}
	}
	return false
}
