package mysql_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/clockd/clockd/internal/alarm"
	"github.com/clockd/clockd/internal/mysql"
)

// The writers commit on connections of their own with autocommit off
// (create.go, writerConn). These tests hold them to what that promises:
// nothing else ever gets such a connection from the pool, a failed INSERT
// leaves no transaction (and no lock) behind, and a connection the server
// closed under a writer costs a retry, not a failed create.

func newClockFor(k alarm.Key, now time.Time) alarm.NewClock {
	return alarm.NewClock{Application: k.Application, BusinessID: k.BusinessID, Payload: "{}",
		ContentType: "application/json", RingAt: now.Add(time.Hour)}
}

// autocommitOfAll takes n connections of db at once (every one the pool
// may hand out, when n is its size) and returns @@autocommit of each.
func autocommitOfAll(t *testing.T, db *sqlx.DB, n int) []int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var out []int
	for range n {
		c, err := db.Connx(ctx)
		if err != nil {
			t.Fatalf("take connection %d of %d: %v", len(out)+1, n, err)
		}
		defer c.Close()
		var v int
		if err := c.GetContext(ctx, &v, "SELECT @@autocommit"); err != nil {
			t.Fatal(err)
		}
		out = append(out, v)
	}
	return out
}

func TestWriterConnectionsStayOutOfThePool(t *testing.T) {
	s, _, _ := proxiedStore(t, mysql.StoreConfig{Writers: 4})
	now := time.Now().Truncate(time.Millisecond)
	// Many creates side by side (every writer takes its connection), some
	// of them for keys that exist (the fast path fails and rolls back).
	var wg sync.WaitGroup
	for i := range 200 {
		wg.Go(func() {
			k := alarm.Key{Application: "pool", BusinessID: fmt.Sprintf("k-%d", i%150)}
			if r := s.Create(context.Background(), []alarm.NewClock{newClockFor(k, now)}, now); r[0].Err != nil {
				t.Errorf("create %s: %v", k, r[0].Err)
			}
		})
	}
	wg.Wait()
	// The pool holds 8; the writers hold at most 4 of them. What the rest
	// of clockd gets is in autocommit, as MySQL's default.
	for i, v := range autocommitOfAll(t, s.DB(), 4) {
		if v != 1 {
			t.Fatalf("pool connection %d has autocommit=%d while the writers run", i, v)
		}
	}
	// Stopped writers close their connections instead of giving them back.
	s.Close()
	for i, v := range autocommitOfAll(t, s.DB(), 8) {
		if v != 1 {
			t.Fatalf("pool connection %d has autocommit=%d after the writers stopped", i, v)
		}
	}
}

// A create for a key that exists fails the writer's INSERT with a
// duplicate key, which leaves a shared lock on that key until the
// transaction ends. The writer rolls back at once: the key can be locked
// by others right after the create answered.
func TestWriterFailedInsertLeavesNoLock(t *testing.T) {
	s, _, direct := proxiedStore(t, mysql.StoreConfig{Writers: 1})
	now := time.Now().Truncate(time.Millisecond)
	k := alarm.Key{Application: "lock", BusinessID: "dup"}
	for i := range 2 { // the second is an identical retry: 200, same clock
		r := s.Create(context.Background(), []alarm.NewClock{newClockFor(k, now)}, now)
		if r[0].Err != nil {
			t.Fatalf("create %d: %v", i+1, r[0].Err)
		}
		if i == 1 && r[0].Created {
			t.Fatal("the identical retry made a second clock")
		}
	}
	tx, err := direct.Beginx()
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	if _, err := tx.Exec("SET SESSION innodb_lock_wait_timeout = 1"); err != nil {
		t.Fatal(err)
	}
	var id int64
	if err := tx.Get(&id, "SELECT id FROM clock WHERE application = ? AND business_id = ? FOR UPDATE", k.Application, k.BusinessID); err != nil {
		t.Fatalf("lock the key after the duplicate create: %v (the writer's failed INSERT still holds it)", err)
	}
}

// The server closes the writers' idle connections (a KILL, wait_timeout,
// a restart): the next creates still succeed, and nothing is doubled.
func TestWriterConnectionKilled(t *testing.T) {
	s, proxy, direct := proxiedStore(t, mysql.StoreConfig{Writers: 2})
	now := time.Now().Truncate(time.Millisecond)
	create := func(id string) {
		t.Helper()
		k := alarm.Key{Application: "killed", BusinessID: id}
		if r := s.Create(context.Background(), []alarm.NewClock{newClockFor(k, now)}, now); r[0].Err != nil || !r[0].Created {
			t.Fatalf("create %s: %+v", id, r[0])
		}
	}
	for i := range 5 {
		create(fmt.Sprintf("before-%d", i))
	}
	for round := range 3 {
		if n := proxy.KillConns(); n < 1 {
			t.Fatalf("round %d: no connection to kill", round)
		}
		for i := range 5 {
			create(fmt.Sprintf("after-%d-%d", round, i))
		}
	}
	var n int
	if err := direct.Get(&n, "SELECT COUNT(*) FROM clock WHERE application = 'killed'"); err != nil {
		t.Fatal(err)
	}
	if n != 20 {
		t.Fatalf("%d clocks, want 20", n)
	}
}
