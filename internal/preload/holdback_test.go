package preload

import (
	"context"
	"testing"
	"time"
)

// After its own lease rounds failed for over half a TTL, an instance takes
// no lease for one TTL (lease.go, holdBack), so as not to take over the
// expired leases of instances that were cut off as long and still live. But
// the hold-back skipped AcquireLeases altogether (found by review), so it
// also left alone shards that no one holds at all: those another instance
// released on a graceful stop or handed over in a rebalance (drained first,
// so nothing of them is in flight anywhere). Such a shard used to be taken at the next
// round ("the others take them over at once"); it stayed unowned, its
// clocks unrung, for up to a lease TTL (10 s by default) whenever the
// taker had a blip of its own just before (a MySQL restart under a cluster
// is exactly when instances stop and start).
func TestReleasedShardsAreTakenDuringTheHoldBack(t *testing.T) {
	store := newLeaseStore(4, "a", "b")
	m := leaseManager(t, store, Config{})
	ttl := m.cfg.LeaseTTL
	ctx := context.Background()
	if err := m.round(ctx); err != nil {
		t.Fatal(err)
	}
	if got := len(store.held("a")); got != 2 {
		t.Fatalf("a holds %d shards, want 2 of 4 beside b", got)
	}
	// a's rounds failed for 3/4 of a TTL (a MySQL blip), then one succeeds:
	// a holds back for a TTL
	m.mu.Lock()
	m.lastOK = time.Now().Add(-3 * ttl / 4)
	m.mu.Unlock()
	if err := m.round(ctx); err != nil {
		t.Fatal(err)
	}
	// b stops gracefully: it released its shards (2 and 3 are no one's)
	// and left
	store.mu.Lock()
	store.live = []string{"a"}
	store.mu.Unlock()
	if err := m.round(ctx); err != nil {
		t.Fatal(err)
	}
	store.mu.Lock()
	held := store.held("a")
	var free []int
	for sh := 0; sh < store.shards; sh++ {
		if store.owner[sh] == "" {
			free = append(free, sh)
		}
	}
	store.mu.Unlock()
	if len(held) != 4 {
		t.Errorf("a, the only live instance, holds %d shards after its round; shards %v are owned by no one (released, not expired) and stay so for up to %v: the hold-back should keep a from taking expired leases of others, not released shards",
			len(held), free, ttl)
	}
}
