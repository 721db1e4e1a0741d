package mysql

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/clockd/clockd/internal/testenv"
)

// When a transaction's COMMIT outcome is unknown, its connection is closed,
// not given back to the pool, before resolve ends its MySQL thread (found
// by review: with the deadline passed just before the COMMIT was sent,
// database/sql gave the live connection back, and resolve then KILLed
// another request's transaction).
func TestResolveEndsNoOneElsesConnection(t *testing.T) {
	t.Parallel()
	ctx0, cancel0 := context.WithTimeout(context.Background(), time.Minute)
	defer cancel0()
	db, err := Open(ctx0, testenv.MySQLDSN(t), 1) // one connection: the pool hands it on if given back
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	if err := Migrate(ctx0, db, slog.New(slog.DiscardHandler)); err != nil {
		t.Fatal(err)
	}
	s := NewStore(db, StoreConfig{Shards: 4, ResolveTimeout: 5 * time.Second})
	t.Cleanup(s.Close)

	ctx, cancel := context.WithCancel(context.Background())
	err = s.runTx(ctx, func(tx *sqlx.Tx) error {
		if _, err := tx.ExecContext(ctx, "SELECT 1"); err != nil {
			return err
		}
		cancel() // the request's deadline passes here, before the COMMIT
		return nil
	}, false)
	var unknown *unknownError
	if !errors.As(err, &unknown) || unknown.thread == 0 {
		t.Fatalf("runTx answered %v, want an unknown outcome naming its thread", err)
	}
	time.Sleep(50 * time.Millisecond)

	bg := context.Background()
	other, err := db.Connx(bg)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	var otherThread int64
	if err := other.QueryRowContext(bg, "SELECT CONNECTION_ID()").Scan(&otherThread); err != nil {
		t.Fatal(err)
	}
	if _, err := other.ExecContext(bg, "BEGIN"); err != nil {
		t.Fatal(err)
	}
	// resolve needs a connection of its own for the KILL and its read
	db.SetMaxOpenConns(2)
	if err := s.resolve(bg, unknown.thread, func(ctx context.Context) error {
		return db.QueryRowContext(ctx, "SELECT 1").Scan(new(int))
	}); err != nil {
		t.Fatalf("resolve: %v", err)
	}
	if _, err := other.ExecContext(bg, "SELECT 1"); err != nil {
		t.Errorf("the change ran on thread %d; resolve ended thread %d's transaction, which the pool had handed to another request: %v",
			unknown.thread, otherThread, err)
	}
}
