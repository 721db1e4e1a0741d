package mysql

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"

	"github.com/go-sql-driver/mysql"
)

// rerunConn is a connection of the migrations' pool. MySQL commits each
// DDL statement on its own, so a migration cut between two of its
// statements (the connection lost, MySQL restarted, clockd killed) keeps
// what its first statements made while goose does not record its version,
// and the next run starts it again from its first statement. Found by
// review: that run failed on "Table 'clock_setting' already exists", and
// so did every later start, until a DBA dropped tables by hand.
//
// A statement whose error says a change of it is there already is taken as
// done, with a WARN, only when every change it makes is found in the
// schema (see applied): a CREATE TABLE whose table has exactly its
// columns, an ALTER TABLE each of whose clauses is in effect (its MODIFY
// and CHANGE clauses, which cannot be told apart from before, are run again
// on their own: they change nothing the second time), a seed row's INSERT
// ... VALUES. Anything else keeps its error: a column or index made by
// other means (gh-ost, by hand) must not pass for the rest of a statement.
type rerunConn struct {
	driverConn
	log *slog.Logger
}

func (c rerunConn) ExecContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Result, error) {
	res, err := c.driverConn.ExecContext(ctx, query, args)
	if err == nil || !mayBeApplied(query, err) {
		return res, err
	}
	ok, verr := c.applied(ctx, query)
	if verr != nil || !ok {
		return res, err
	}
	c.log.Warn("a statement of a migration cut short by an earlier run was applied already; going on",
		"statement", statementHead(query), "err", err)
	return driver.RowsAffected(0), nil
}

// mayBeApplied reports whether err, the answer to migration statement
// query, can mean that the statement was applied already.
func mayBeApplied(query string, err error) bool {
	var me *mysql.MySQLError
	if !errors.As(err, &me) {
		return false
	}
	q := strings.ToUpper(statementHead(query))
	if strings.Contains(q, "GOOSE_DB_VERSION") {
		// goose's own version table: created with its version-0 row by
		// goose, which retries when another instance created it at the
		// same moment. Taken as applied, its creation went on to insert a
		// second version-0 row (seen in CI: four instances started at once)
		return false
	}
	switch me.Number {
	case 1050: // table exists
		return strings.HasPrefix(q, "CREATE TABLE ")
	case 1051: // unknown table
		return strings.HasPrefix(q, "DROP TABLE ")
	case 1060, 1061, 1091, 1826, 3822:
		// duplicate column, duplicate key name, cannot drop (no such
		// column or key), duplicate constraint name (MariaDB, MySQL)
		return strings.HasPrefix(q, "ALTER TABLE ")
	case 1062: // duplicate entry: a seed row
		return strings.HasPrefix(q, "INSERT INTO ") && !strings.Contains(q, " SELECT ")
	}
	return false
}

// applied reports whether every change statement query makes is in the
// schema (see rerunConn), running an ALTER's MODIFY and CHANGE clauses
// again.
func (c rerunConn) applied(ctx context.Context, query string) (bool, error) {
	body := statementBody(query)
	f := strings.Fields(body)
	if len(f) < 3 {
		return false, nil
	}
	table := unquote(f[2])
	switch strings.ToUpper(f[0] + " " + f[1]) {
	case "DROP TABLE":
		return len(f) == 3, nil
	case "INSERT INTO":
		return true, nil // a seed row, VALUES only (mayBeApplied)
	case "CREATE TABLE":
		open := strings.Index(body, "(")
		end := closing(body, open)
		if end < 0 {
			return false, nil
		}
		var cols []string
		for _, def := range splitAt(body[open+1:end], ',') {
			d := strings.Fields(def)
			switch strings.ToUpper(d[0]) {
			case "PRIMARY", "KEY", "INDEX", "UNIQUE", "CONSTRAINT", "CHECK", "FOREIGN", "FULLTEXT", "SPATIAL":
				continue
			}
			cols = append(cols, unquote(d[0]))
		}
		if len(cols) == 0 {
			return false, nil
		}
		// the table has exactly these columns: as many, each of them
		n, err := c.count(ctx, "SELECT COUNT(*) FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ?", table)
		if err != nil || n != int64(len(cols)) {
			return false, err
		}
		args := []any{table}
		for _, col := range cols {
			args = append(args, col)
		}
		n, err = c.count(ctx, "SELECT COUNT(*) FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ? AND COLUMN_NAME IN (?"+
			strings.Repeat(", ?", len(cols)-1)+")", args...)
		return err == nil && n == int64(len(cols)), err
	case "ALTER TABLE":
		rest := strings.TrimSpace(body[strings.Index(body, f[2])+len(f[2]):])
		var again []string
		for _, clause := range splitAt(rest, ',') {
			ok, redo, err := c.inEffect(ctx, table, clause)
			if err != nil || !ok {
				return false, err
			}
			if redo {
				again = append(again, clause)
			}
		}
		if len(again) > 0 {
			if _, err := c.driverConn.ExecContext(ctx, "ALTER TABLE "+f[2]+" "+strings.Join(again, ", "), nil); err != nil {
				return false, err
			}
		}
		return true, nil
	}
	return false, nil
}

// alterObjects: what an ALTER TABLE clause beginning with words makes
// (present) or removes, and the information_schema view and column that
// list it by name (the word after words). The longer words come first.
var alterObjects = []struct {
	words        []string
	view, column string
	present      bool
}{
	{[]string{"ADD", "UNIQUE", "INDEX"}, "STATISTICS", "INDEX_NAME", true},
	{[]string{"ADD", "UNIQUE", "KEY"}, "STATISTICS", "INDEX_NAME", true},
	{[]string{"ADD", "UNIQUE"}, "STATISTICS", "INDEX_NAME", true},
	{[]string{"ADD", "INDEX"}, "STATISTICS", "INDEX_NAME", true},
	{[]string{"ADD", "KEY"}, "STATISTICS", "INDEX_NAME", true},
	{[]string{"ADD", "CONSTRAINT"}, "TABLE_CONSTRAINTS", "CONSTRAINT_NAME", true},
	{[]string{"ADD", "COLUMN"}, "COLUMNS", "COLUMN_NAME", true},
	{[]string{"DROP", "INDEX"}, "STATISTICS", "INDEX_NAME", false},
	{[]string{"DROP", "KEY"}, "STATISTICS", "INDEX_NAME", false},
	{[]string{"DROP", "CONSTRAINT"}, "TABLE_CONSTRAINTS", "CONSTRAINT_NAME", false},
	{[]string{"DROP", "CHECK"}, "TABLE_CONSTRAINTS", "CONSTRAINT_NAME", false},
	{[]string{"DROP", "COLUMN"}, "COLUMNS", "COLUMN_NAME", false},
}

// inEffect reports whether ALTER TABLE clause of table is in effect, or
// (redo) is a MODIFY or CHANGE to run again.
func (c rerunConn) inEffect(ctx context.Context, table, clause string) (ok, redo bool, err error) {
	f := strings.Fields(strings.ToUpper(clause))
	switch {
	case len(f) == 0:
		return false, false, nil
	case strings.HasPrefix(f[0], "ALGORITHM") || strings.HasPrefix(f[0], "LOCK"):
		return true, false, nil
	case f[0] == "MODIFY" || f[0] == "CHANGE":
		return true, true, nil
	}
	for _, o := range alterObjects {
		if len(f) <= len(o.words) || !slices.Equal(f[:len(o.words)], o.words) {
			continue
		}
		// the name as written (its case), up to a parenthesis
		name := strings.Fields(clause)[len(o.words)]
		name = unquote(strings.TrimSuffix(strings.SplitN(name, "(", 2)[0], ","))
		has, err := c.has(ctx, o.view, o.column, table, name)
		return has == o.present, false, err
	}
	return false, false, nil // not told apart: the error stands
}

// has reports whether information_schema view lists obj (in column) for
// table of the current database.
func (c rerunConn) has(ctx context.Context, view, column, table, obj string) (bool, error) {
	n, err := c.count(ctx, "SELECT COUNT(*) FROM information_schema."+view+
		" WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ? AND "+column+" = ?", table, obj)
	return n > 0, err
}

func (c rerunConn) count(ctx context.Context, q string, args ...any) (int64, error) {
	nv := make([]driver.NamedValue, len(args))
	for i, a := range args {
		nv[i] = driver.NamedValue{Ordinal: i + 1, Value: a}
	}
	rows, err := c.driverConn.QueryContext(ctx, q, nv)
	if err != nil {
		return 0, err
	}
	defer rows.Close()
	vals := make([]driver.Value, 1)
	if err := rows.Next(vals); err != nil {
		if errors.Is(err, io.EOF) {
			return 0, nil
		}
		return 0, err
	}
	n, err := asInt(vals[0])
	if err != nil {
		return 0, fmt.Errorf("count: %w", err)
	}
	return n, nil
}

// statementBody is a statement without its comment lines, on one line,
// without a final semicolon.
func statementBody(query string) string {
	var parts []string
	for _, line := range strings.Split(query, "\n") {
		if t := strings.TrimSpace(line); t != "" && !strings.HasPrefix(t, "--") {
			parts = append(parts, strings.Join(strings.Fields(t), " "))
		}
	}
	return strings.TrimSuffix(strings.Join(parts, " "), ";")
}

// statementHead is statementBody cut to 120 bytes, for logs and for
// telling a statement's kind.
func statementHead(query string) string {
	h := statementBody(query)
	if len(h) > 120 {
		h = h[:120]
	}
	return h
}

// scanSQL calls visit with each byte of s from from on that is outside
// quotes, backticks and "--" comments, with the parenthesis depth before
// it; visit returns false to stop.
func scanSQL(s string, from int, visit func(i int, ch byte, depth int) bool) {
	depth := 0
	var quote byte
	for i := from; i < len(s); i++ {
		ch := s[i]
		switch {
		case quote != 0:
			if ch == quote {
				quote = 0 // a doubled quote closes and opens again: the same
			}
			continue
		case ch == '\'' || ch == '"' || ch == '`':
			quote = ch
			continue
		case ch == '-' && strings.HasPrefix(s[i:], "--"):
			// a comment, to the end of its line: its apostrophes open no quote
			if nl := strings.IndexByte(s[i:], '\n'); nl >= 0 {
				i += nl
			} else {
				i = len(s)
			}
			continue
		}
		if !visit(i, ch, depth) {
			return
		}
		switch ch {
		case '(':
			depth++
		case ')':
			depth--
		}
	}
}

// splitAt splits s at the bytes sep outside parentheses, quotes, backticks
// and comments, trimming each part and leaving out empty ones.
func splitAt(s string, sep byte) []string {
	var parts []string
	start := 0
	add := func(part string) {
		if t := strings.TrimSpace(part); t != "" {
			parts = append(parts, t)
		}
	}
	scanSQL(s, 0, func(i int, ch byte, depth int) bool {
		if ch == sep && depth == 0 {
			add(s[start:i])
			start = i + 1
		}
		return true
	})
	add(s[start:])
	return parts
}

// closing is the index of the parenthesis that closes the one at open in
// s (-1: none). A table's options after its columns hold more: a COMMENT
// with parentheses, PARTITION BY RANGE (...).
func closing(s string, open int) int {
	end := -1
	if open >= 0 {
		scanSQL(s, open, func(i int, ch byte, depth int) bool {
			if ch == ')' && depth == 1 {
				end = i
				return false
			}
			return true
		})
	}
	return end
}

func unquote(name string) string { return strings.Trim(name, "`") }
