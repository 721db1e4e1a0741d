package testenv

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
)

// KillMySQLConnections kills (KILL CONNECTION) every connection of the
// server at serverDSN whose current database is database, except its own,
// and returns how many it killed: the "the database drops our connections"
// fault, safe on the shared server because each test has its own database.
// A connection that ended meanwhile is not an error.
func KillMySQLConnections(t testing.TB, serverDSN, database string) int {
	t.Helper()
	n, err := killMySQLConnections(context.Background(), serverDSN, database)
	if err != nil {
		t.Fatalf("kill the connections of %s: %v", database, err)
	}
	return n
}

func killMySQLConnections(ctx context.Context, serverDSN, database string) (int, error) {
	if database == "" {
		return 0, errors.New("no database named: that would kill every connection of the server")
	}
	cfg, err := mysql.ParseDSN(serverDSN)
	if err != nil {
		return 0, fmt.Errorf("parse dsn: %w", err)
	}
	cfg.DBName = ""
	cfg.Timeout = 5 * time.Second
	db, err := sql.Open("mysql", cfg.FormatDSN())
	if err != nil {
		return 0, err
	}
	defer db.Close()
	conn, err := db.Conn(ctx)
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	rows, err := conn.QueryContext(ctx, `SELECT ID FROM information_schema.PROCESSLIST
		WHERE DB = ? AND ID <> CONNECTION_ID()`, database)
	if err != nil {
		return 0, fmt.Errorf("list connections: %w", err)
	}
	var ids []int64
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			rows.Close()
			return 0, err
		}
		ids = append(ids, id)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return 0, err
	}
	killed := 0
	for _, id := range ids {
		_, err := conn.ExecContext(ctx, fmt.Sprintf("KILL CONNECTION %d", id))
		var me *mysql.MySQLError
		switch {
		case err == nil:
			killed++
		case errors.As(err, &me) && me.Number == 1094: // unknown thread id: it ended meanwhile
		default:
			return killed, fmt.Errorf("kill connection %d: %w", id, err)
		}
	}
	return killed, nil
}
