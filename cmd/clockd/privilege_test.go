package main

// A least-privilege deployment: a DBA's account runs `clockd migrate`, the
// service runs with migrations off and an account holding SELECT, INSERT,
// UPDATE, DELETE, ALTER and DROP on its database only. clockd ran CREATE
// DATABASE IF NOT EXISTS at every start, which needs CREATE even when the
// database exists, and would not start.

import (
	"bytes"
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/clockd/clockd/internal/testenv"
)

func TestServeWithoutCreateDatabasePrivilege(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	// the DBA applies the schema
	var stdout, stderr bytes.Buffer
	if err := run(context.Background(), []string{"migrate"}, runEnvOf(map[string]string{
		"CLOCKD_MYSQL_DSN": e.DSN, "CLOCKD_SHARDS": "8", "CLOCKD_LOG_LEVEL": "warn"}), &stdout, &stderr); err != nil {
		t.Fatalf("clockd migrate: %v\n%s", err, stderr.String())
	}

	cfg, err := mysql.ParseDSN(e.DSN)
	if err != nil {
		t.Fatal(err)
	}
	admin, err := sql.Open("mysql", testenv.ServerDSN())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { admin.Close() }) // after the account is dropped (cleanups run last-in first-out)
	user := testenv.Name("rvu_")        // an account of this test only
	for _, q := range []string{
		"CREATE USER '" + user + "'@'%' IDENTIFIED BY 'service-secret'",
		"GRANT SELECT, INSERT, UPDATE, DELETE, ALTER, DROP ON `" + cfg.DBName + "`.* TO '" + user + "'@'%'",
	} {
		if _, err := admin.Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	t.Cleanup(func() { _, _ = admin.Exec("DROP USER IF EXISTS '" + user + "'@'%'") })
	cfg.User, cfg.Passwd = user, "service-secret"

	d := testenv.LaunchClockd(t, e.vars(map[string]string{
		"CLOCKD_MYSQL_DSN": cfg.FormatDSN(), "CLOCKD_MYSQL_MIGRATE_ON_START": "false",
	}))
	d.WaitReady(30 * time.Second) // fails the test with clockd's log when it exits
	var out map[string]any
	if code, err := d.Do(context.Background(), "POST", "/v1/clocks", map[string]any{
		"application": "lp", "business_id": "b", "payload": "{}", "delay": "1h"}, &out); err != nil || code != 201 {
		t.Errorf("create under the service account: %d %v %v", code, err, out)
	}
}
