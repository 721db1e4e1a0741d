package testenv

import (
	"context"
	"database/sql"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
)

// semiSyncTimeout is rpl_semi_sync_master_timeout: an hour, longer than any
// test, so that the primary never falls back to asynchronous replication
// silently (it waits for the replica's acknowledgement instead).
const semiSyncTimeout = time.Hour

// ReplicatedMariaDB is a private MariaDB primary with a semi-synchronous
// replica (MariaDB's built-in semi-sync, wait point AFTER_SYNC: a
// transaction is committed, and visible, only once the replica has it in
// its relay log), both behind Endpoint, a TCP proxy clients connect to.
// Promote makes the replica the primary and moves the endpoint: what a
// failover tool (MaxScale, Orchestrator, a VIP) does in production.
type ReplicatedMariaDB struct {
	t        testing.TB
	Primary  *MariaDB
	Replica  *MariaDB
	Endpoint *Proxy
}

// StartReplicatedMariaDB starts the primary, the replica and the endpoint,
// and waits until the replica replicates semi-synchronously. Everything
// is removed when the test ends.
func StartReplicatedMariaDB(t testing.TB) *ReplicatedMariaDB {
	t.Helper()
	primary := StartMariaDBWith(t, MariaDBOptions{ServerID: 1, LogBin: true, Extra: []string{
		"rpl_semi_sync_master_enabled=ON",
		"rpl_semi_sync_master_wait_point=AFTER_SYNC",
		"rpl_semi_sync_master_wait_no_slave=ON",
		"rpl_semi_sync_master_timeout=" + strconv.FormatInt(semiSyncTimeout.Milliseconds(), 10),
		// Commits reach the OS, not the disk: a kill -9 of the server
		// loses none of them, and the shared two-core test machine is
		// spared two fsyncs per commit. Production keeps the defaults
		// (innodb_flush_log_at_trx_commit=1, sync_binlog=1).
		"innodb_flush_log_at_trx_commit=2",
	}})
	replica := StartMariaDBWith(t, MariaDBOptions{ServerID: 2, LogBin: true, Extra: []string{
		"rpl_semi_sync_slave_enabled=ON",
		"read_only=ON",
		"relay_log=relay",
		"innodb_flush_log_at_trx_commit=2",
	}})
	r := &ReplicatedMariaDB{t: t, Primary: primary, Replica: replica, Endpoint: StartProxy(t, primary.Addr())}
	r.exec(replica, fmt.Sprintf("CHANGE MASTER TO MASTER_HOST='127.0.0.1', MASTER_PORT=%d, MASTER_USER='root', MASTER_PASSWORD='', MASTER_USE_GTID=slave_pos, MASTER_CONNECT_RETRY=1", primary.Port))
	r.exec(replica, "START SLAVE")
	deadline := time.Now().Add(30 * time.Second)
	for {
		on, clients := r.status(primary, "Rpl_semi_sync_master_status"), r.status(primary, "Rpl_semi_sync_master_clients")
		if on == "ON" && clients == "1" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("replica %s not replicating semi-synchronously from %s after 30s (status %s, clients %s): %v",
				replica.Addr(), primary.Addr(), on, clients, r.slaveStatus(replica))
		}
		time.Sleep(50 * time.Millisecond)
	}
	// A write on the primary answers only once the replica has it.
	probe := Name("clockd_probe_")
	r.exec(primary, "CREATE DATABASE "+probe)
	r.exec(primary, "DROP DATABASE "+probe)
	if n := r.status(primary, "Rpl_semi_sync_master_yes_tx"); n == "0" || n == "" {
		t.Fatalf("primary %s: no semi-synchronous transaction after a write (Rpl_semi_sync_master_yes_tx %q)", primary.Addr(), n)
	}
	return r
}

// DSN is a go-sql-driver DSN of the endpoint, no database selected.
func (r *ReplicatedMariaDB) DSN() string { return "root:@tcp(" + r.Endpoint.Addr + ")/" }

// SemiSync reports the primary's semi-synchronous state: whether it is on
// (not fallen back to asynchronous), and the transactions acknowledged by
// the replica (yes) and not (no).
func (r *ReplicatedMariaDB) SemiSync() (on bool, yes, no int64) {
	r.t.Helper()
	yes, _ = strconv.ParseInt(r.status(r.Primary, "Rpl_semi_sync_master_yes_tx"), 10, 64)
	no, _ = strconv.ParseInt(r.status(r.Primary, "Rpl_semi_sync_master_no_tx"), 10, 64)
	return r.status(r.Primary, "Rpl_semi_sync_master_status") == "ON", yes, no
}

// Promote makes the replica the primary after the primary died: it waits
// until the replica has applied every event it received (its relay log),
// then STOP SLAVE; RESET SLAVE ALL; SET GLOBAL read_only=OFF, points the
// endpoint at it and closes the connections still proxied to the old
// primary. It returns how long the promotion itself took.
func (r *ReplicatedMariaDB) Promote() time.Duration {
	r.t.Helper()
	begin := time.Now()
	deadline := begin.Add(60 * time.Second)
	for {
		st := r.slaveStatus(r.Replica)
		if st["Master_Log_File"] == st["Relay_Master_Log_File"] && st["Read_Master_Log_Pos"] == st["Exec_Master_Log_Pos"] {
			break
		}
		if st["Slave_SQL_Running"] != "Yes" {
			r.t.Fatalf("replica %s: SQL thread stopped before it applied what it received: %v", r.Replica.Addr(), st)
		}
		if time.Now().After(deadline) {
			r.t.Fatalf("replica %s: relay log not applied after 60s: %v", r.Replica.Addr(), st)
		}
		time.Sleep(20 * time.Millisecond)
	}
	r.exec(r.Replica, "STOP SLAVE")
	r.exec(r.Replica, "RESET SLAVE ALL")
	r.exec(r.Replica, "SET GLOBAL read_only=OFF")
	r.Endpoint.SetTarget(r.Replica.Addr())
	r.Endpoint.KillConns()
	r.Primary, r.Replica = r.Replica, nil
	return time.Since(begin)
}

func (r *ReplicatedMariaDB) open(m *MariaDB) *sql.DB {
	r.t.Helper()
	cfg := mysql.NewConfig()
	cfg.User, cfg.Net, cfg.Addr = "root", "tcp", m.Addr()
	cfg.Timeout, cfg.ReadTimeout, cfg.WriteTimeout = 5*time.Second, 30*time.Second, 30*time.Second
	db, err := sql.Open("mysql", cfg.FormatDSN())
	if err != nil {
		r.t.Fatal(err)
	}
	db.SetMaxOpenConns(1)
	return db
}

func (r *ReplicatedMariaDB) exec(m *MariaDB, q string) {
	r.t.Helper()
	db := r.open(m)
	defer db.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := db.ExecContext(ctx, q); err != nil {
		r.t.Fatalf("MariaDB %s: %s: %v", m.Addr(), q, err)
	}
}

// status reads a global status variable ("" when it does not exist).
func (r *ReplicatedMariaDB) status(m *MariaDB, name string) string {
	r.t.Helper()
	db := r.open(m)
	defer db.Close()
	var v string
	err := db.QueryRow("SELECT VARIABLE_VALUE FROM information_schema.GLOBAL_STATUS WHERE VARIABLE_NAME = ?", strings.ToUpper(name)).Scan(&v)
	if err == sql.ErrNoRows {
		return ""
	}
	if err != nil {
		r.t.Fatalf("MariaDB %s: status %s: %v", m.Addr(), name, err)
	}
	return v
}

// slaveStatus is SHOW SLAVE STATUS as a map of column to value.
func (r *ReplicatedMariaDB) slaveStatus(m *MariaDB) map[string]string {
	r.t.Helper()
	db := r.open(m)
	defer db.Close()
	rows, err := db.Query("SHOW SLAVE STATUS")
	if err != nil {
		r.t.Fatalf("MariaDB %s: SHOW SLAVE STATUS: %v", m.Addr(), err)
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		r.t.Fatal(err)
	}
	out := map[string]string{}
	if !rows.Next() {
		return out
	}
	vals := make([]sql.NullString, len(cols))
	ptrs := make([]any, len(cols))
	for i := range vals {
		ptrs[i] = &vals[i]
	}
	if err := rows.Scan(ptrs...); err != nil {
		r.t.Fatal(err)
	}
	for i, c := range cols {
		out[c] = vals[i].String
	}
	return out
}
