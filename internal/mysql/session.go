package mysql

import (
	"context"
	"database/sql/driver"
	"fmt"
	"log/slog"
	"strconv"
	"time"
)

// sessionInit is run on every new connection, before it is used.
//
// READ COMMITTED: every change clockd makes is a conditional UPDATE or an
// INSERT by key, which needs no gap locks. Under REPEATABLE READ a range
// scan that locks (recovery of firing clocks, a check for existing keys)
// takes next-key locks, and a cancel whose index change falls into such a
// gap deadlocked with a claim. SET SESSION TRANSACTION is the one spelling
// that MySQL 8 and MariaDB both accept. (Statement-based binary logging
// refuses writes under READ COMMITTED: binlog_format must be ROW or MIXED,
// the defaults of MySQL 8 and MariaDB.)
//
// innodb_lock_wait_timeout: a request waits a few seconds for a row lock,
// not the server's default 50 s; a statement that times out is rolled back
// and retried like a deadlock victim.
var sessionInit = []string{
	"SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED",
	"SET SESSION innodb_lock_wait_timeout = 5",
}

// sessionConnector runs sessionInit on each connection it opens, and
// learns its MySQL session (see learnSession) for a change whose COMMIT
// answer is lost: so no change pays a round trip for it.
type sessionConnector struct {
	driver.Connector
	init []string
	// rerun, when set, makes the connections rerunConns that log to it:
	// the migrations' pool.
	rerun *slog.Logger
	// timeout bounds the whole of opening a connection: the dial, the
	// handshake and the session's set-up (the DSN's timeout, 5 s by
	// default). database/sql opens the connections its waiting callers
	// need one at a time, in one goroutine, under a context without a
	// deadline: bounded by the driver's read timeout only (30 s), one
	// connection whose answers a network fault swallowed held up every
	// other open, so a change whose COMMIT answer was lost could not learn
	// its outcome for as long and answered 503 "outcome unknown" though it
	// was committed and MySQL answered new connections (found by review).
	timeout time.Duration
}

// driverConn is what database/sql uses of a go-sql-driver connection: a
// connection wrapped with its session keeps every one of these.
type driverConn interface {
	driver.Conn
	driver.ConnBeginTx
	driver.ConnPrepareContext
	driver.ExecerContext
	driver.QueryerContext
	driver.Pinger
	driver.SessionResetter
	driver.Validator
	driver.NamedValueChecker
}

// sessionConn is a connection and its MySQL session, learned when it was
// opened.
type sessionConn struct {
	driverConn
	sess session
}

func (c sessionConnector) Connect(ctx context.Context) (driver.Conn, error) {
	if c.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.timeout)
		defer cancel()
	}
	conn, err := c.Connector.Connect(ctx)
	if err != nil {
		return nil, err
	}
	ex, ok := conn.(driver.ExecerContext)
	if !ok {
		_ = conn.Close()
		return nil, fmt.Errorf("mysql driver connection cannot execute statements")
	}
	for _, q := range c.init {
		if _, err := ex.ExecContext(ctx, q, nil); err != nil {
			_ = conn.Close()
			return nil, fmt.Errorf("set up mysql session (%s): %w", q, err)
		}
	}
	dc, ok := conn.(driverConn)
	if !ok {
		return conn, nil // learnSession asks on each use instead
	}
	sess := session{before: time.Now()}
	rows, err := dc.QueryContext(ctx, sessionQuery, nil)
	if err != nil {
		_ = conn.Close()
		return nil, fmt.Errorf("set up mysql session (%s): %w", sessionQuery, err)
	}
	vals := make([]driver.Value, 2)
	err = rows.Next(vals)
	_ = rows.Close()
	if err == nil {
		sess.thread, err = asInt(vals[0])
	}
	if err != nil {
		_ = conn.Close()
		return nil, fmt.Errorf("set up mysql session (%s): %w", sessionQuery, err)
	}
	sess.server = asString(vals[1])
	if c.rerun != nil {
		return rerunConn{driverConn: &sessionConn{driverConn: dc, sess: sess}, log: c.rerun}, nil
	}
	return &sessionConn{driverConn: dc, sess: sess}, nil
}

// sessionServer names the server a session runs on; sessionQuery reads a
// session's thread id and that name.
const (
	sessionServer = "CONCAT(@@hostname, ':', @@port, '/', @@server_id)"
	sessionQuery  = "SELECT CONNECTION_ID(), " + sessionServer
)

func asInt(v driver.Value) (int64, error) {
	switch v := v.(type) {
	case int64:
		return v, nil
	case []byte:
		return strconv.ParseInt(string(v), 10, 64)
	case string:
		return strconv.ParseInt(v, 10, 64)
	}
	return 0, fmt.Errorf("unexpected %T", v)
}

func asString(v driver.Value) string {
	switch v := v.(type) {
	case []byte:
		return string(v)
	case string:
		return v
	}
	return fmt.Sprint(v)
}
