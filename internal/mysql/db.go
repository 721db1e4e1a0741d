// Package mysql is the MySQL/MariaDB adapter of clockd: connection set-up,
// goose migrations, the clock store with group-committed creates, and the
// queries of the preloader, the ring loop and the shard leases. All SQL of
// clockd lives here.
package mysql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/jmoiron/sqlx"

	"github.com/clockd/clockd/internal/alarm"
)

// dbNowMS is the database clock in milliseconds; leases use it so that
// instances with skewed clocks agree on expiry.
const dbNowMS = "CAST(UNIX_TIMESTAMP(NOW(3)) * 1000 AS SIGNED)"

// PrepareDSN adds the parameters clockd needs to a go-sql-driver DSN.
func PrepareDSN(dsn string) (*mysql.Config, error) {
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		return nil, fmt.Errorf("parse mysql dsn: %w", err)
	}
	if cfg.DBName == "" {
		return nil, errors.New("mysql dsn names no database")
	}
	// One round trip per statement instead of prepare/execute/close.
	cfg.InterpolateParams = true
	cfg.MultiStatements = false
	if cfg.Params == nil {
		cfg.Params = map[string]string{}
	}
	cfg.Params["time_zone"] = "'+00:00'"
	// utf8mb4 whatever the DSN's charset: SET NAMES utf8 COLLATE
	// utf8mb4_bin is refused by the server (Error 1253), so a DSN with
	// charset=utf8, common in other Go services' DSNs, kept clockd from
	// starting with an error naming neither (found by review)
	if err := cfg.Apply(mysql.Charset("utf8mb4", "utf8mb4_bin")); err != nil {
		return nil, fmt.Errorf("mysql dsn: %w", err)
	}
	// goose reads goose_db_version.tstamp (a TIMESTAMP) into a time.Time;
	// clockd's own times are integers and unaffected.
	cfg.ParseTime = true
	if cfg.Timeout == 0 {
		cfg.Timeout = 5 * time.Second
	}
	if cfg.ReadTimeout == 0 {
		cfg.ReadTimeout = 30 * time.Second
	}
	if cfg.WriteTimeout == 0 {
		cfg.WriteTimeout = 30 * time.Second
	}
	cfg.MaxAllowedPacket = 0 // read the server's max_allowed_packet
	return cfg, nil
}

// Open connects to the database named in dsn, creating it when missing.
func Open(ctx context.Context, dsn string, maxConns int) (*sqlx.DB, error) {
	cfg, err := PrepareDSN(dsn)
	if err != nil {
		return nil, err
	}
	return open(ctx, cfg, maxConns)
}

func open(ctx context.Context, cfg *mysql.Config, maxConns int) (*sqlx.DB, error) {
	return openConnector(ctx, cfg, maxConns, nil)
}

// openConnector is open; rerun set makes it the migrations' pool (see
// rerunConn).
func openConnector(ctx context.Context, cfg *mysql.Config, maxConns int, rerun *slog.Logger) (*sqlx.DB, error) {
	if err := createDatabase(ctx, cfg); err != nil {
		return nil, err
	}
	connector, err := mysql.NewConnector(cfg)
	if err != nil {
		return nil, fmt.Errorf("mysql connector: %w", err)
	}
	db := sqlx.NewDb(sql.OpenDB(sessionConnector{Connector: connector, init: sessionInit, rerun: rerun, timeout: cfg.Timeout}), "mysql")
	if maxConns <= 0 {
		maxConns = 32
	}
	db.SetMaxOpenConns(maxConns)
	db.SetMaxIdleConns(maxConns)
	db.SetConnMaxIdleTime(5 * time.Minute)
	db.SetConnMaxLifetime(time.Hour)
	if err := db.PingContext(ctx); err != nil {
		db.Close()
		return nil, fmt.Errorf("ping mysql %s: %w", cfg.Addr, err)
	}
	return db, nil
}

func createDatabase(ctx context.Context, cfg *mysql.Config) error {
	server := cfg.Clone()
	server.DBName = ""
	db, err := sql.Open("mysql", server.FormatDSN())
	if err != nil {
		return fmt.Errorf("open mysql server: %w", err)
	}
	defer db.Close()
	// Only when it is missing: a service account may hold the privileges
	// on its database and none to create databases (a DBA's account runs
	// `clockd migrate`), and CREATE DATABASE IF NOT EXISTS needs CREATE
	// even when the database exists.
	var one int
	err = db.QueryRowContext(ctx, "SELECT 1 FROM information_schema.SCHEMATA WHERE SCHEMA_NAME = ?", cfg.DBName).Scan(&one)
	switch {
	case err == nil:
		return nil
	case !errors.Is(err, sql.ErrNoRows):
		return fmt.Errorf("look for database %s at %s: %w", cfg.DBName, cfg.Addr, err)
	}
	q := "CREATE DATABASE IF NOT EXISTS " + quoteIdent(cfg.DBName) + " CHARACTER SET utf8mb4 COLLATE utf8mb4_bin"
	if _, err := db.ExecContext(ctx, q); err != nil {
		return fmt.Errorf("create database %s at %s: %w", cfg.DBName, cfg.Addr, err)
	}
	return nil
}

func quoteIdent(s string) string {
	out := []byte{'`'}
	for i := 0; i < len(s); i++ {
		if s[i] == '`' {
			out = append(out, '`')
		}
		out = append(out, s[i])
	}
	return string(append(out, '`'))
}

// mapErr turns driver errors into domain errors.
func mapErr(err error) error {
	if err == nil {
		return nil
	}
	for _, domain := range []error{alarm.ErrNotFound, alarm.ErrConflict, alarm.ErrInvalid, alarm.ErrTooLarge, alarm.ErrUnavailable} {
		if errors.Is(err, domain) {
			return err // already said
		}
	}
	if errors.Is(err, context.DeadlineExceeded) {
		// the request's deadline for MySQL passed: 503, nothing changed
		return fmt.Errorf("%w: mysql did not answer in time: %w", alarm.ErrUnavailable, err)
	}
	if errors.Is(err, context.Canceled) {
		return err
	}
	var me *mysql.MySQLError
	if errors.As(err, &me) {
		if refusedForNow(me.Number) {
			return fmt.Errorf("%w: mysql refused: %w", alarm.ErrUnavailable, err)
		}
		return err
	}
	// Connection-level failures: the database is unreachable.
	return fmt.Errorf("%w: mysql: %v", alarm.ErrUnavailable, err)
}

// refusedForNow: MySQL answered but would not do the statement, for a
// reason of the server's state, not of the request: nothing was changed,
// and the same request may work later. A 503 (the Go client retries it),
// not a 500.
func refusedForNow(code uint16) bool {
	switch code {
	case 1040, // too many connections
		1044, 1045, // access denied (a rotated password, a revoked grant)
		1205, 1213, // lock wait timeout, deadlock (after the retries)
		1226,             // a user resource limit
		1290, 1836, 1792, // read-only (a demoted primary), read-only transaction
		1969, 3024, // statement time limits (MariaDB max_statement_time, MySQL max_execution_time)
		4031: // disconnected by the server (idle timeout, MySQL 8)
		return true
	}
	return interrupted(code)
}

// interrupted: the statement was cut off by the server (KILL QUERY,
// KILL, shutdown). Before a COMMIT that means not done; during a COMMIT
// the commit may have been made first (commitErr).
func interrupted(code uint16) bool {
	return code == 1317 || // query interrupted
		code == 1927 || // connection killed (MariaDB)
		code == 1053 // server shutdown in progress
}

// isRetryable: a deadlock victim, a lock wait timeout, or a duplicate key
// (a create that lost a race): the batch can run again.
func isRetryable(err error) bool { return isLockConflict(err) || isDuplicate(err) }

// session names a MySQL session: its thread id, the server it runs on
// (host, port and server id) and a time before it was learned. A thread id
// alone is not enough to KILL by: a restarted server hands its ids out
// again from 1, and a failover puts another server behind the same
// address.
type session struct {
	thread int64
	server string
	before time.Time
}

// learnSession returns the session of connection c: as learned when it
// was opened (sessionConnector), else asked now.
func learnSession(ctx context.Context, c *sqlx.Conn) (session, error) {
	var sess session
	_ = c.Raw(func(dc any) error {
		if sc, ok := dc.(*sessionConn); ok {
			sess = sc.sess
		}
		return nil
	})
	if sess.thread != 0 {
		return sess, nil
	}
	sess.before = time.Now()
	err := c.QueryRowContext(ctx, sessionQuery).Scan(&sess.thread, &sess.server)
	return sess, err
}

// endSession makes sure MySQL session sess has ended. A change whose
// COMMIT answer was lost may still be open there, holding its row locks,
// with its COMMIT on the way (a packet retransmitted after a network blip,
// while fresh connections already get through): a read of its rows before
// that session ends cannot tell whether it will commit. KILL ends it (what
// it has not committed is rolled back); it is gone from the process list
// once its transaction is over either way. A thread already gone, or not
// ours to kill (a proxy in between), is waited for only.
//
// A session on a server that restarted since it was learned, or on
// another server than the one answering now, is not killed: it ended with
// that server's restart (or is out of reach), and its thread id may now
// name someone else's connection.
func endSession(ctx context.Context, db *sqlx.DB, sess session) error {
	c, err := db.Connx(ctx)
	if err != nil {
		return fmt.Errorf("end thread %d: %w", sess.thread, err)
	}
	defer c.Close()
	var server string
	if err := c.QueryRowContext(ctx, "SELECT "+sessionServer).Scan(&server); err != nil {
		return fmt.Errorf("end thread %d: %w", sess.thread, err)
	}
	// asked right before the uptime: time spent on the query above would
	// count as uptime and hide a restart (seen under a loaded test run)
	asked := time.Now()
	var name string
	var uptime int64 // whole seconds, rounded down
	if err := c.QueryRowContext(ctx, "SHOW GLOBAL STATUS LIKE 'Uptime'").Scan(&name, &uptime); err != nil {
		return fmt.Errorf("end thread %d: %w", sess.thread, err)
	}
	// Up since before the session was learned, the server's uptime is at
	// least asked - before; one second under it means a restart since.
	if server != sess.server || time.Duration(uptime+1)*time.Second <= asked.Sub(sess.before) {
		return nil
	}
	if _, err := c.ExecContext(ctx, "KILL CONNECTION "+strconv.FormatInt(sess.thread, 10)); err != nil {
		var me *mysql.MySQLError
		if !errors.As(err, &me) || (me.Number != 1094 && me.Number != 1095) { // unknown thread, not its owner
			return fmt.Errorf("end thread %d: %w", sess.thread, err)
		}
	}
	for {
		var n int
		if err := c.QueryRowContext(ctx, "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE ID = ?", sess.thread).Scan(&n); err != nil {
			return fmt.Errorf("wait for thread %d to end: %w", sess.thread, err)
		}
		if n == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("wait for thread %d to end: %w", sess.thread, ctx.Err())
		case <-time.After(5 * time.Millisecond):
		}
	}
}
