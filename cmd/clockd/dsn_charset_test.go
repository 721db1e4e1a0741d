package main

// Found by a review against SPEC.md; the test failed on the code before its fix.

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/clockd/clockd/internal/testenv"
)

// SPEC: CLOCKD_MYSQL_DSN is a go-sql-driver DSN, "the service adds the
// parameters it needs", and "a bad value is refused at start with a
// message that names the key". A DSN copied from another Go service often
// carries charset=utf8 (the go-sql-driver README's own example). clockd
// forces the collation utf8mb4_bin but keeps the DSN's charset, so the
// driver sends "SET NAMES utf8 COLLATE utf8mb4_bin" on every connection,
// which MySQL refuses (Error 1253: COLLATION 'utf8mb4_bin' is not valid for
// CHARACTER SET 'utf8mb3'): clockd cannot start, and the error names
// neither mysql.dsn nor its charset. It should either use the utf8mb4 it
// needs, or refuse the DSN naming mysql.dsn.
func TestDSNWithCharsetUTF8(t *testing.T) {
	t.Parallel()
	dsn := testenv.MySQLDSN(t)
	sep := "?"
	if strings.Contains(dsn, "?") {
		sep = "&"
	}
	dsn += sep + "charset=utf8"
	env := runEnvOf(map[string]string{"CLOCKD_MYSQL_DSN": dsn, "CLOCKD_SHARDS": "4", "CLOCKD_LOG_LEVEL": "warn"})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var stdout, stderr bytes.Buffer
	err := run(ctx, []string{"migrate"}, env, &stdout, &stderr)
	if err != nil && !strings.Contains(err.Error(), "mysql.dsn") {
		t.Errorf("clockd migrate with a DSN carrying charset=utf8: %v\n"+
			"want it to run (clockd needs utf8mb4 and sets it) or an error naming mysql.dsn", err)
	}
}
