package mysql_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/clockd/clockd/internal/mysql"
	"github.com/clockd/clockd/internal/testenv"
)

// Migration 00013 drops the clock_history index that releases before it
// force in their reads of history, so those releases answer 500 on the
// migrated schema; the instance that applies it while instances of an
// earlier release are live says so in one WARN naming them, since stopping
// them is the only remedy.
func TestHistoryKeyMigrationWarnsOfLiveOlderInstances(t *testing.T) {
	t.Parallel()
	dsn := testenv.MySQLDSN(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := mysql.MigrateDSNUpTo(ctx, dsn, slog.New(slog.DiscardHandler), 12); err != nil {
		t.Fatal(err)
	}
	db, err := mysql.Open(ctx, dsn, 2)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec(`INSERT INTO clock_instance (instance_id, http_addr, started_at, expires_at, rings)
		VALUES ('old-1', '', 0, CAST(UNIX_TIMESTAMP(NOW(3)) * 1000 AS SIGNED) + 60000, 1)`); err != nil {
		t.Fatal(err)
	}
	var logs testenv.SyncBuffer
	if err := mysql.MigrateDSN(ctx, dsn, slog.New(slog.NewJSONHandler(&logs, nil))); err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(logs.String(), `"level":"WARN","msg":"migration 00013 applied while instances of an earlier release are live`); n != 1 ||
		!strings.Contains(logs.String(), `"instances":["old-1"]`) {
		t.Errorf("00013 applied with an older instance live: %d warnings naming it in %s", n, logs.String())
	}
}
