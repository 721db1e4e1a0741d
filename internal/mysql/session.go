package mysql

import (
	"context"
	"database/sql/driver"
	"fmt"
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

// sessionConnector runs sessionInit on each connection it opens.
type sessionConnector struct {
	driver.Connector
	init []string
}

func (c sessionConnector) Connect(ctx context.Context) (driver.Conn, error) {
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
	return conn, nil
}
