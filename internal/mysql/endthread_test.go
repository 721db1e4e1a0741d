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
	err = s.runTx(ctx, func(tx *sqlx.Conn) error {
		if _, err := tx.ExecContext(ctx, "SELECT 1"); err != nil {
			return err
		}
		cancel() // the request's deadline passes here, before the COMMIT
		return nil
	}, false)
	var unknown *unknownError
	if !errors.As(err, &unknown) || unknown.sess.thread == 0 {
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
	if err := s.resolve(bg, unknown.sess, func(ctx context.Context) error {
		return db.QueryRowContext(ctx, "SELECT 1").Scan(new(int))
	}); err != nil {
		t.Fatalf("resolve: %v", err)
	}
	if _, err := other.ExecContext(bg, "SELECT 1"); err != nil {
		t.Errorf("the change ran on thread %d; resolve ended thread %d's transaction, which the pool had handed to another request: %v",
			unknown.sess.thread, otherThread, err)
	}
}

// A session learned before its server restarted is not killed: a restarted
// server hands thread ids out again from 1, and the old id may by then be
// another connection's (left alone in an earlier stop, fixed here).
func TestResolveKillsNoThreadOfARestartedServer(t *testing.T) {
	t.Parallel()
	m := testenv.StartMariaDB(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	db, err := Open(ctx, m.DSNFor("mysql"), 8)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	c, err := db.Connx(ctx)
	if err != nil {
		t.Fatal(err)
	}
	old, err := learnSession(ctx, c)
	c.Close()
	if err != nil {
		t.Fatal(err)
	}
	// restarts within a second of learning are not told apart; the
	// margin allows for a slow answer to the uptime query on a loaded machine
	time.Sleep(2100 * time.Millisecond)
	m.Kill()
	m.Start()

	// after the restart, a connection that has the old session's thread id
	db.SetMaxIdleConns(0)
	db2, err := Open(ctx, m.DSNFor("mysql"), 64)
	if err != nil {
		t.Fatal(err)
	}
	defer db2.Close()
	var victim *sqlx.Conn
	for range 60 {
		c, err := db2.Connx(ctx)
		if err != nil {
			t.Fatal(err)
		}
		sess, err := learnSession(ctx, c)
		if err != nil {
			t.Fatal(err)
		}
		if sess.thread == old.thread {
			victim = c
			break
		}
		defer c.Close() // held, so that the next one gets a new id
		if sess.thread > old.thread {
			t.Fatalf("thread ids after the restart went past %d without it", old.thread)
		}
	}
	if victim == nil {
		t.Fatalf("no connection got thread id %d again", old.thread)
	}
	defer victim.Close()
	if _, err := victim.ExecContext(ctx, "BEGIN"); err != nil {
		t.Fatal(err)
	}
	if err := resolveOn(ctx, db2, 5*time.Second, slog.New(slog.DiscardHandler), "clock", old, func(ctx context.Context) error {
		return db2.QueryRowContext(ctx, "SELECT 1").Scan(new(int))
	}); err != nil {
		t.Fatalf("resolve: %v", err)
	}
	if _, err := victim.ExecContext(ctx, "SELECT 1"); err != nil {
		t.Errorf("resolve of a session from before the restart killed thread %d, now another connection's: %v", old.thread, err)
	}

	// and a session of the server as it runs now is still ended
	now, err := learnSession(ctx, victim)
	if err != nil {
		t.Fatal(err)
	}
	if err := endSession(ctx, db2, now); err != nil {
		t.Fatal(err)
	}
	if _, err := victim.ExecContext(ctx, "SELECT 1"); err == nil {
		t.Errorf("endSession left the live session %d running", now.thread)
	}
}
