package testenv

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
)

func openPrivate(t *testing.T, dsn string) *sql.DB {
	t.Helper()
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Timeout, cfg.ReadTimeout = 2*time.Second, 2*time.Second
	db, err := sql.Open("mysql", cfg.FormatDSN())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

func TestMariaDBKillRestartKeepsData(t *testing.T) {
	t.Parallel()
	start := time.Now()
	m := StartMariaDB(t)
	t.Logf("StartMariaDB took %s", time.Since(start).Round(time.Millisecond))
	db := openPrivate(t, m.DSN())
	for _, q := range []string{
		"CREATE DATABASE fault",
		"CREATE TABLE fault.t (id INT PRIMARY KEY, v VARCHAR(20)) ENGINE=InnoDB",
		"INSERT INTO fault.t VALUES (1, 'committed')",
	} {
		if _, err := db.Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}

	m.Kill()
	if m.Running() {
		t.Fatal("running after Kill")
	}
	if err := db.Ping(); err == nil {
		t.Fatal("a killed server answers")
	}
	start = time.Now()
	m.Start()
	t.Logf("restart after kill -9 took %s", time.Since(start).Round(time.Millisecond))
	var v string
	if err := db.QueryRow("SELECT v FROM fault.t WHERE id = 1").Scan(&v); err != nil || v != "committed" {
		t.Fatalf("after kill and start: %q, %v", v, err)
	}

	m.Stop()
	start = time.Now()
	m.Start()
	t.Logf("restart after a clean stop took %s", time.Since(start).Round(time.Millisecond))
	if err := db.QueryRow("SELECT v FROM fault.t WHERE id = 1").Scan(&v); err != nil || v != "committed" {
		t.Fatalf("after stop and start: %q, %v", v, err)
	}
}

func TestMariaDBPauseContinue(t *testing.T) {
	t.Parallel()
	m := StartMariaDB(t)
	db := openPrivate(t, m.DSN())
	if err := db.Ping(); err != nil {
		t.Fatal(err)
	}
	m.Pause()
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	err := db.PingContext(ctx)
	cancel()
	if err == nil {
		t.Fatal("a paused server answered")
	}
	if !m.Running() {
		t.Fatal("a paused server counts as not running")
	}
	m.Continue()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if err = db.Ping(); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no answer 10s after Continue: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestKillMySQLConnections(t *testing.T) {
	t.Parallel()
	victimDSN := MySQLDSN(t)
	otherDSN := MySQLDSN(t)
	ctx := context.Background()
	victim, other := openPrivate(t, victimDSN), openPrivate(t, otherDSN)
	var conns []*sql.Conn
	for range 3 {
		c, err := victim.Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		conns = append(conns, c)
	}
	bystander, err := other.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer bystander.Close()

	if n := KillMySQLConnections(t, ServerDSN(), DatabaseName(t, victimDSN)); n != 3 {
		t.Errorf("killed %d connections, want 3", n)
	}
	for i, c := range conns {
		if err := c.PingContext(ctx); err == nil {
			t.Errorf("connection %d still answers after the kill", i)
		}
	}
	if err := bystander.PingContext(ctx); err != nil {
		t.Errorf("a connection to another database was hit: %v", err)
	}
	if err := victim.Ping(); err != nil { // the pool opens new ones
		t.Errorf("new connection after the kill: %v", err)
	}
	if n := KillMySQLConnections(t, ServerDSN(), DatabaseName(t, victimDSN)); n < 1 {
		t.Errorf("second kill found %d connections, want the new one", n)
	}
}
