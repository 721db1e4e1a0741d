package main

// MySQL answers, but refuses: a primary demoted to read-only in a
// failover, a rotated password, a KILL QUERY. Nothing was changed, and the
// dependency is what is unavailable: 503 (which clients retry), not 500;
// and /readyz does not reveal the MySQL account to callers without a token.

import (
	"context"
	"database/sql"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/clockd/clockd/internal/testenv"
)

// A MariaDB primary set read-only (what a failover does to the old
// primary, or to a replica behind a write endpoint that moved late): every
// write answers 500 "internal" instead of 503 "unavailable", so clients
// (the Go client among them) do not retry. (/readyz follows a lease round
// later through its "shards" check; its "mysql" check stays "ok".)
func TestReadOnlyPrimaryAnswers503(t *testing.T) {
	t.Parallel()
	m := testenv.StartMariaDB(t) // private: read_only is global
	admin, err := sql.Open("mysql", m.DSN())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { admin.Close() }) // after the account is dropped (cleanups run last-in first-out)
	for _, q := range []string{
		"CREATE USER 'clockd'@'%' IDENTIFIED BY 'pw'",
		"GRANT ALL ON *.* TO 'clockd'@'%'",
		"REVOKE READ ONLY ADMIN ON *.* FROM 'clockd'@'%'", // an application account is no admin
	} {
		if _, err := admin.Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	e := newEnv(t)
	d := testenv.StartClockd(t, e.vars(map[string]string{
		"CLOCKD_MYSQL_DSN": "clockd:pw@tcp(" + m.Addr() + ")/clock",
	}))
	ctx := context.Background()
	create := func(bid string) (int, map[string]any) {
		var out map[string]any
		code, err := d.Do(ctx, "POST", "/v1/clocks", map[string]any{
			"application": "ro", "business_id": bid, "payload": "{}", "delay": "1h"}, &out)
		if err != nil {
			t.Fatalf("create %s: %v", bid, err)
		}
		return code, out
	}
	if code, out := create("before"); code != http.StatusCreated {
		t.Fatalf("create before read-only: %d %v", code, out)
	}

	if _, err := admin.Exec("SET GLOBAL read_only = 1"); err != nil {
		t.Fatal(err)
	}
	if code, out := create("during"); code != http.StatusServiceUnavailable {
		t.Errorf("create while MySQL is read-only: %d %v; want 503 unavailable (the change was not made; clients retry 503)", code, out)
	}
	var out map[string]any
	if code, _ := d.Do(ctx, "DELETE", clockPath("ro", "before"), nil, &out); code != http.StatusServiceUnavailable {
		t.Errorf("cancel while MySQL is read-only: %d %v; want 503 unavailable", code, out)
	}

	// and once MySQL takes writes again, so does clockd
	if _, err := admin.Exec("SET GLOBAL read_only = 0"); err != nil {
		t.Fatal(err)
	}
	d.WaitReady(30 * time.Second)
	if code, out := create("after"); code != http.StatusCreated {
		t.Errorf("create after read-only ended: %d %v", code, out)
	}
}

// The password of clockd's MySQL account is rotated (or the account
// locked) while clockd runs: new connections are refused with "Access
// denied for user 'NAME'@'HOST'". Requests answer 500 "internal" instead
// of 503, and the unauthenticated /readyz publishes the account name and
// the client address MySQL saw, which the DSN-hiding elsewhere
// (hideAddrs, publicDetail) is meant to keep private.
func TestMySQLLoginRefused(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	cfg, err := mysql.ParseDSN(e.DSN)
	if err != nil {
		t.Fatal(err)
	}
	admin, err := sql.Open("mysql", testenv.ServerDSN())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { admin.Close() }) // after the account is dropped (cleanups run last-in first-out)
	user := testenv.Name("rvu_")        // an account of this test only, on the shared server
	exec := func(q string) {
		t.Helper()
		if _, err := admin.Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	exec("CREATE USER '" + user + "'@'%' IDENTIFIED BY 'first-secret'")
	t.Cleanup(func() { _, _ = admin.Exec("DROP USER IF EXISTS '" + user + "'@'%'") })
	exec("GRANT ALL ON `" + cfg.DBName + "`.* TO '" + user + "'@'%'")
	cfg.User, cfg.Passwd = user, "first-secret"
	d := testenv.StartClockd(t, e.vars(map[string]string{"CLOCKD_MYSQL_DSN": cfg.FormatDSN()}))

	exec("ALTER USER '" + user + "'@'%' IDENTIFIED BY 'second-secret'")
	testenv.KillMySQLConnections(t, testenv.ServerDSN(), cfg.DBName) // clockd must log in again

	var code int
	var body string
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if code, body = d.Ready(); code == http.StatusServiceUnavailable {
			break
		}
	}
	if code != http.StatusServiceUnavailable {
		t.Fatalf("/readyz with the MySQL login refused: %d %s, want 503", code, body)
	}
	if strings.Contains(body, user) || strings.Contains(body, "127.0.0.1") {
		t.Errorf("/readyz (open to anyone) reveals the MySQL account: %s", body)
	}
	var out map[string]any
	if code, _ := d.Do(context.Background(), "GET", clockPath("x", "y"), nil, &out); code != http.StatusServiceUnavailable {
		t.Errorf("GET with the MySQL login refused: %d %v; want 503 unavailable", code, out)
	}
	if code, _ := d.Do(context.Background(), "POST", "/v1/clocks", map[string]any{
		"application": "x", "business_id": "y", "payload": "{}", "delay": "1h"}, &out); code != http.StatusServiceUnavailable {
		t.Errorf("create with the MySQL login refused: %d %v; want 503 unavailable", code, out)
	}
}

// A DBA (or pt-kill) runs KILL QUERY on clockd's statement that waits on a
// row lock: MySQL answers 1317 "Query execution was interrupted", the
// statement and so the cancel are not applied — and clockd answers 500
// "internal" instead of 503 (or running the change again, as it does for a
// killed connection). The client does not retry a 500.
func TestKilledQueryAnswers503(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	d := testenv.StartClockd(t, e.vars(nil))
	ctx := context.Background()
	if code, err := d.Do(ctx, "POST", "/v1/clocks", map[string]any{
		"application": "kq", "business_id": "b", "payload": "{}", "delay": "1h"}, nil); err != nil || code != http.StatusCreated {
		t.Fatalf("create: %d %v", code, err)
	}
	db := clusterDB(t, e)
	// a DBA's transaction holds the clock's row
	lock, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Rollback()
	var id int64
	if err := lock.QueryRow("SELECT id FROM clock WHERE application = 'kq' AND business_id = 'b' FOR UPDATE").Scan(&id); err != nil {
		t.Fatal(err)
	}
	type answer struct {
		code int
		body map[string]any
	}
	done := make(chan answer, 1)
	go func() {
		var out map[string]any
		code, _ := d.Do(ctx, "DELETE", clockPath("kq", "b"), nil, &out)
		done <- answer{code, out}
	}()
	// find clockd's UPDATE waiting on the lock, and KILL QUERY it
	killed := false
	for deadline := time.Now().Add(3 * time.Second); !killed && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		var qid int64
		err := db.QueryRow(`SELECT ID FROM information_schema.PROCESSLIST WHERE DB = DATABASE() AND ID <> CONNECTION_ID()
			AND INFO LIKE 'UPDATE clock SET status = %' LIMIT 1`).Scan(&qid)
		if err == nil {
			if _, err := db.Exec("KILL QUERY " + strconv.FormatInt(qid, 10)); err != nil {
				t.Fatal(err)
			}
			killed = true
		}
	}
	if !killed {
		t.Fatal("clockd's cancel never waited on the lock")
	}
	a := <-done
	_ = lock.Rollback()
	var status string
	if err := db.QueryRow("SELECT status FROM clock WHERE id = ?", id).Scan(&status); err != nil {
		t.Fatal(err)
	}
	switch {
	case a.code == http.StatusOK && status == "cancelled":
		// ran again after the kill: fine
	case a.code == http.StatusServiceUnavailable && status == "pending":
		// refused as unavailable, nothing changed: fine
	default:
		t.Errorf("cancel whose UPDATE was killed (KILL QUERY): %d %v, clock now %s; want 503 with the clock pending (or 200 after running it again)",
			a.code, a.body, status)
	}
}
