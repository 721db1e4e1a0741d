package janitor_test

import (
	"context"
	"testing"
	"time"

	"github.com/clockd/clockd/internal/janitor"
)

// The janitor's lease row is made by a migration. Deleted by hand, nobody
// could ever hold the lease again and no janitor would run, without a word:
// the next try makes the row again and the one after takes the lease.
func TestJanitorLeaseRowDeletedIsMadeAgain(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	ctx := context.Background()
	if _, err := w.db.Exec("DELETE FROM clock_lease WHERE name = ?", janitor.LeaseName); err != nil {
		t.Fatal(err)
	}
	held := false
	for try := 0; try < 2 && !held; try++ {
		var err error
		if held, err = w.store.HoldLease(ctx, janitor.LeaseName, "a", 10*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	if !held {
		t.Fatal("the janitor lease, its row deleted, is not held after two tries")
	}
	var owner string
	if err := w.db.Get(&owner, "SELECT owner FROM clock_lease WHERE name = ?", janitor.LeaseName); err != nil || owner != "a" {
		t.Fatalf("lease row: owner %q, %v", owner, err)
	}
}
