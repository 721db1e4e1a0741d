package mysql

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/clockd/clockd/internal/testenv"
)

// holdSchemaLock takes the schema lock of dsn's database on a connection
// of its own and returns that connection's id and a release func.
func holdSchemaLock(t *testing.T, ctx context.Context, dsn string) (*sqlx.DB, int64) {
	t.Helper()
	db, err := Open(ctx, dsn, 2)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { db.Close() })
	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	if err := (&schemaLock{log: slog.New(slog.DiscardHandler), wait: time.Second}).SessionLock(ctx, conn); err != nil {
		t.Fatalf("take the lock: %v", err)
	}
	var id int64
	if err := conn.QueryRowContext(ctx, "SELECT CONNECTION_ID()").Scan(&id); err != nil {
		t.Fatal(err)
	}
	return db, id
}

func TestSchemaLockTimeoutNamesTheHolder(t *testing.T) {
	t.Parallel()
	dsn := testenv.MySQLDSN(t)
	ctx := context.Background()
	_, holder := holdSchemaLock(t, ctx, dsn)
	db, err := Open(ctx, dsn, 4)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	start := time.Now()
	err = migrate(ctx, db, slog.New(slog.DiscardHandler), 2*time.Second)
	took := time.Since(start)
	if err == nil {
		t.Fatal("migrate succeeded while another connection held the schema lock")
	}
	want := fmt.Sprintf("still held after 2s by connection %d (", holder)
	if !strings.Contains(err.Error(), want) {
		t.Errorf("error %q does not contain %q", err, want)
	}
	if took < 2*time.Second || took > 6*time.Second {
		t.Errorf("gave up after %s, want about 2s", took)
	}
	t.Logf("error: %v", err)
	// SetupShards waits for the same lock (until its context ends here).
	sctx, cancel := context.WithTimeout(ctx, 1500*time.Millisecond)
	defer cancel()
	if _, err := SetupShards(sctx, db, 4); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("SetupShards while the schema lock is held = %v, want it to wait until its context ends", err)
	}
}

func TestSchemaLockWaitEndsWithContext(t *testing.T) {
	t.Parallel()
	dsn := testenv.MySQLDSN(t)
	holdSchemaLock(t, context.Background(), dsn)
	db, err := Open(context.Background(), dsn, 4)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	err = migrate(ctx, db, slog.New(slog.DiscardHandler), time.Minute)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("migrate = %v, want a context deadline error", err)
	}
	if took := time.Since(start); took > 3*time.Second {
		t.Errorf("migrate returned %s after its context ended", took)
	}
}

// A killed holder's lock dies with its connection: the waiter goes on.
func TestSchemaLockFreedWhenHolderDies(t *testing.T) {
	t.Parallel()
	dsn := testenv.MySQLDSN(t)
	ctx := context.Background()
	holderDB, holder := holdSchemaLock(t, ctx, dsn)
	db, err := Open(ctx, dsn, 4)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	done := make(chan error, 1)
	go func() { done <- migrate(ctx, db, slog.New(slog.DiscardHandler), time.Minute) }()
	select {
	case err := <-done:
		t.Fatalf("migrate returned while the lock was held: %v", err)
	case <-time.After(1500 * time.Millisecond):
	}
	if _, err := holderDB.ExecContext(ctx, fmt.Sprintf("KILL %d", holder)); err != nil {
		t.Fatalf("kill the holder: %v", err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("migrate after the holder died: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("migrate still waiting 10s after the holder died")
	}
}

func TestSchemaLockName(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cfg, err := PrepareDSN(testenv.MySQLDSN(t))
	if err != nil {
		t.Fatal(err)
	}
	cfg.DBName = strings.Repeat("x", 64) // the longest database name
	db, err := Open(ctx, cfg.FormatDSN(), 2)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	defer db.ExecContext(ctx, "DROP DATABASE "+quoteIdent(cfg.DBName))
	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	name, err := schemaLockName(ctx, conn)
	if err != nil || len(name) != 64 || !strings.HasPrefix(name, "clockd.migrate.") {
		t.Fatalf("schemaLockName = %q, %v", name, err)
	}
	l := &schemaLock{log: slog.New(slog.DiscardHandler), wait: time.Second}
	if err := l.SessionLock(ctx, conn); err != nil {
		t.Fatalf("lock: %v", err)
	}
	if err := l.SessionUnlock(ctx, conn); err != nil {
		t.Fatalf("unlock: %v", err)
	}
}
