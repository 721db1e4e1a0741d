package mysql_test

import (
	"context"
	"testing"
	"time"

	"github.com/clockd/clockd/internal/mysql"
)

// Each AskRescan gives the shard a stamp newer than the last, even within
// one millisecond or when the database clock stepped back: its owner acts
// on a changed stamp only.
func TestAskRescanStampsAlwaysMoveOn(t *testing.T) {
	s, db := oneShardStore(t, mysql.StoreConfig{})
	ctx := context.Background()
	leases, err := s.AcquireLeases(ctx, "a", 1, time.Minute)
	if err != nil || len(leases) != 1 {
		t.Fatalf("acquire: %v %v", leases, err)
	}
	stamp := func() int64 {
		t.Helper()
		ls, err := s.RenewLeases(ctx, "a", time.Minute)
		if err != nil || len(ls) != 1 {
			t.Fatalf("renew: %v %v", ls, err)
		}
		return ls[0].RescanAt
	}
	if got := stamp(); got != 0 {
		t.Fatalf("rescan_at %d before any ask, want 0", got)
	}
	before := time.Now().Add(-time.Second).UnixMilli()
	if err := s.AskRescan(ctx, []int{0}); err != nil {
		t.Fatal(err)
	}
	first := stamp()
	if first < before {
		t.Fatalf("rescan_at %d, want the database's time (about %d)", first, before+1000)
	}
	// a stamp an hour ahead (as after the database clock stepped back):
	// the next ask still moves it on, as do asks in a tight loop
	ahead := first + time.Hour.Milliseconds()
	if _, err := db.Exec("UPDATE clock_shard SET rescan_at = ? WHERE shard = 0", ahead); err != nil {
		t.Fatal(err)
	}
	last := ahead
	for range 5 {
		if err := s.AskRescan(ctx, []int{0}); err != nil {
			t.Fatal(err)
		}
		if got := stamp(); got <= last {
			t.Fatalf("rescan_at %d after an ask, not newer than %d: the owner would not rescan", got, last)
		}
		last = stamp()
	}
}
