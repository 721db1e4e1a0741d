package preload

import (
	"context"
	"testing"
	"time"
)

// A round that acquires while a hand-over is still draining (the instance
// that joined left again, or stopped ringing) gets back from AcquireLeases
// every lease this instance holds in MySQL, the shards being handed over
// included: it takes those up as gained (RecoverFiring, a new loader), so
// they can be claimed here while they are drained, and the hand-over then
// releases them in MySQL under the running loader: this instance goes on
// treating a shard it released as held (Leases, ValidUntil).
func TestShardHandedOverIsNotReadoptedMidHandover(t *testing.T) {
	store, m, release := handingOver(t)
	store.mu.Lock()
	store.live = []string{"a"} // b leaves again while 2 and 3 drain
	store.log = nil
	store.mu.Unlock()
	if err := m.round(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, sh := range []int{2, 3} {
		if len(m.Leases([]int{sh})) != 0 {
			t.Errorf("shard %d can be claimed here while it is drained for its hand-over (store calls %q)", sh, store.entries())
		}
	}
	close(release)
	m.handovers.Wait()
	store.mu.Lock()
	owner2, owner3 := store.owner[2], store.owner[3]
	store.mu.Unlock()
	if owner2 != "" || owner3 != "" {
		t.Fatalf("shards 2, 3 owned by %q, %q after the hand-over; want released", owner2, owner3)
	}
	for _, sh := range []int{2, 3} {
		if len(m.Leases([]int{sh})) != 0 || m.ValidUntil(sh, 1).After(time.Now()) {
			t.Errorf("shard %d was released in MySQL, yet this instance still holds it (Leases %v, ValidUntil %v from now): "+
				"its loader runs and the ring loop publishes its clocks", sh, m.Leases([]int{sh}), time.Until(m.ValidUntil(sh, 1)).Round(time.Millisecond))
		}
	}
}

// A hand-over whose release failed leaves its shards leased here (the next
// round would take them up again); a shutdown before that round releases
// only the shards with a loader, so the shards handed over stay leased to
// an instance that is gone, rung by nobody until the lease runs out.
func TestShutdownReleasesShardsOfAFailedHandover(t *testing.T) {
	store := &failingRelease{leaseStore: newLeaseStore(4, "a"), fail: 1}
	m := leaseManagerOn(t, store, 4, Config{})
	if err := m.round(context.Background()); err != nil {
		t.Fatal(err)
	}
	store.mu.Lock()
	store.live = []string{"a", "b"}
	store.mu.Unlock()
	if err := m.round(context.Background()); err != nil { // hands 2 and 3 over; the release fails
		t.Fatal(err)
	}
	m.handovers.Wait()
	m.stop(true) // SIGTERM before the next round
	store.mu.Lock()
	held := store.held("a")
	store.mu.Unlock()
	if len(held) != 0 {
		t.Errorf("after the shutdown a still holds %v in MySQL: nobody rings them until the lease expires", held)
	}
}

// The release at the end of a hand-over is by owner and shard, not by
// epoch: a shard handed over whose lease was lost meanwhile (rounds failed
// for a TTL while the drain waited for slow confirms, up to
// amqp.confirm_timeout + 2 s) and then acquired again by this instance,
// under a new epoch and with a new loader, is released by the old
// hand-over: the new lease is dropped in MySQL under its running loader.
func TestOldHandoverDoesNotReleaseANewLease(t *testing.T) {
	store, m, release := handingOver(t)
	store.mu.Lock()
	store.owner[2], store.epoch[2] = "b", store.epoch[2]+1 // lost to b (a's rounds failed)
	store.mu.Unlock()
	store.mu.Lock()
	delete(store.owner, 2) // b gives it up again, and leaves
	store.live = []string{"a"}
	store.mu.Unlock()
	if err := m.round(context.Background()); err != nil { // a acquires shard 2 anew
		t.Fatal(err)
	}
	store.mu.Lock()
	newEpoch := store.epoch[2]
	store.mu.Unlock()
	if m.ValidUntil(2, newEpoch).IsZero() {
		t.Fatalf("shard 2 not acquired anew under epoch %d", newEpoch)
	}
	close(release)
	m.handovers.Wait()
	store.mu.Lock()
	owner := store.owner[2]
	store.mu.Unlock()
	if owner != "a" {
		t.Errorf("shard 2, acquired anew under epoch %d with its loader running here, owned by %q after the old hand-over (epoch 1) ended: "+
			"the release dropped the new lease", newEpoch, owner)
	}
}
