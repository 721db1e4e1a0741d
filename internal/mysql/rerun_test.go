package mysql

import (
	"errors"
	"fmt"
	"testing"

	"github.com/go-sql-driver/mysql"
)

// A statement of a migration run again after a cut is taken as done only
// when its error says its own change is there already.
func TestAppliedAlready(t *testing.T) {
	t.Parallel()
	e := func(n uint16) error { return fmt.Errorf("exec: %w", &mysql.MySQLError{Number: n, Message: "x"}) }
	for _, tt := range []struct {
		query string
		err   error
		want  bool
	}{
		{"CREATE TABLE clock_setting (\n  name VARCHAR(64))", e(1050), true},
		{"-- the table\ncreate table clock (id BIGINT)", e(1050), true},
		{"ALTER TABLE clock\n  ADD COLUMN claim_time BIGINT", e(1060), true},
		{"ALTER TABLE clock ADD INDEX ix (a)", e(1061), true},
		{"ALTER TABLE clock_history DROP INDEX ix_old, ADD INDEX ix_new (a)", e(1091), true},
		{"ALTER TABLE clock ADD CONSTRAINT ck CHECK (a > 0)", e(3822), true},
		{"ALTER TABLE clock ADD CONSTRAINT ck CHECK (a > 0)", e(1826), true},
		{"INSERT INTO clock_lease (name) VALUES ('janitor')", e(1062), true},
		{"DROP TABLE clock_token", e(1051), true},
		// other errors, or the same error of another kind of statement
		{"ALTER TABLE clock ADD COLUMN x INT", e(1146), false}, // no such table
		{"UPDATE clock SET a = 1", e(1062), false},
		{"CREATE TABLE t (a INT)", e(1060), false},
		{"CREATE TABLE t (a INT)", errors.New("invalid connection"), false},
	} {
		if got := appliedAlready(tt.query, tt.err); got != tt.want {
			t.Errorf("appliedAlready(%q, %v) = %v, want %v", tt.query, tt.err, got, tt.want)
		}
	}
}
