package mysql_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/clockd/clockd/internal/alarm"
	"github.com/clockd/clockd/internal/mysql"
)

// An instance id's heartbeat is one process's (its start time and address)
// while it lives: another process's heartbeat or claim of it answers
// alarm.ErrInstanceTaken and changes nothing, unless the heartbeat expired,
// or is the stale one the claiming process watched go unrenewed (found by
// review: two processes started together under one id both ran).
func TestInstanceHeartbeatIsOneProcesss(t *testing.T) {
	t.Parallel()
	s, db := historyStore(t, mysql.StoreConfig{})
	ctx := context.Background()
	ttl := time.Minute
	a, b, c := time.Now().Add(-time.Hour).Truncate(time.Millisecond), time.Now().Add(-time.Minute).Truncate(time.Millisecond), time.Now().Truncate(time.Millisecond)
	if err := s.ClaimInstance(ctx, "host-1", "10.0.0.1:8080", a, ttl, time.Second, mysql.StaleHeartbeat{}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Heartbeat(ctx, "host-1", "10.0.0.1:8080", a, ttl, true, time.Second); err != nil {
		t.Fatalf("the process's own heartbeat: %v", err)
	}
	if err := s.ClaimInstance(ctx, "host-1", "10.0.0.1:8081", b, ttl, time.Second, mysql.StaleHeartbeat{}); !errors.Is(err, alarm.ErrInstanceTaken) {
		t.Fatalf("a second process's claim of a live id: %v, want alarm.ErrInstanceTaken", err)
	}
	if _, err := s.Heartbeat(ctx, "host-1", "10.0.0.1:8081", b, ttl, true, time.Second); !errors.Is(err, alarm.ErrInstanceTaken) {
		t.Fatalf("a second process's heartbeat on a live id: %v, want alarm.ErrInstanceTaken", err)
	}
	// the stale heartbeat it watched: taken over before it expires
	expires, started, ok, err := s.InstanceHeartbeat(ctx, "host-1")
	if err != nil || !ok || started != a.UnixMilli() {
		t.Fatalf("heartbeat: %d %d %v %v", expires, started, ok, err)
	}
	if err := s.ClaimInstance(ctx, "host-1", "10.0.0.1:8081", b, ttl, time.Second, mysql.StaleHeartbeat{Expires: expires, Started: started}); err != nil {
		t.Fatalf("the claim of a heartbeat seen not renewed: %v", err)
	}
	if _, err := s.Heartbeat(ctx, "host-1", "10.0.0.1:8080", a, ttl, true, time.Second); !errors.Is(err, alarm.ErrInstanceTaken) {
		t.Fatalf("the first process's heartbeat after the id was taken over: %v, want alarm.ErrInstanceTaken", err)
	}
	// expired: anyone's
	if _, err := db.Exec("UPDATE clock_instance SET expires_at = 1 WHERE instance_id = 'host-1'"); err != nil {
		t.Fatal(err)
	}
	if err := s.ClaimInstance(ctx, "host-1", "10.0.0.1:8082", c, ttl, time.Second, mysql.StaleHeartbeat{}); err != nil {
		t.Fatalf("the claim of an expired heartbeat: %v", err)
	}
	if _, started, _, _ := s.InstanceHeartbeat(ctx, "host-1"); started != c.UnixMilli() {
		t.Errorf("the heartbeat's process started %d, want %d", started, c.UnixMilli())
	}
}

// The exchange a cluster rings to is recorded once (SetupExchange); an
// instance given another is refused while another instance is live, and
// recorded when none is (the whole cluster moved). A heartbeat of an
// instance whose exchange is no longer the recorded one (two instances
// started together, each finding none live) answers
// alarm.ErrExchangeChanged.
func TestRingExchangeIsTheClusters(t *testing.T) {
	t.Parallel()
	_, db := historyStore(t, mysql.StoreConfig{})
	ctx := context.Background()
	x := mysql.NewStore(db, mysql.StoreConfig{Shards: 4, RingExchange: "clock.ring"})
	t.Cleanup(x.Close)
	started := time.Now().Truncate(time.Millisecond)
	if prev, err := mysql.SetupExchange(ctx, db, "clock.ring", "a"); err != nil || prev != "" {
		t.Fatalf("first exchange: %q %v", prev, err)
	}
	if _, err := x.Heartbeat(ctx, "a", "10.0.0.1:8080", started, time.Minute, true, time.Second); err != nil {
		t.Fatal(err)
	}
	if _, err := mysql.SetupExchange(ctx, db, "clock.other", "c"); !errors.Is(err, alarm.ErrExchangeChanged) {
		t.Fatalf("another exchange beside a live instance: %v, want alarm.ErrExchangeChanged", err)
	}
	// a's own stale heartbeat does not count for a, restarted with another
	prev, err := mysql.SetupExchange(ctx, db, "clock.other", "a")
	if err != nil || prev != "clock.ring" {
		t.Fatalf("the cluster's only instance restarted with another exchange: %q %v, want clock.ring recorded before", prev, err)
	}
	if _, err := x.Heartbeat(ctx, "a", "10.0.0.1:8080", started, time.Minute, true, time.Second); !errors.Is(err, alarm.ErrExchangeChanged) {
		t.Fatalf("a heartbeat under the exchange no longer recorded: %v, want alarm.ErrExchangeChanged", err)
	}
	// a heartbeat expired a minute ago (an instance cut off from MySQL past
	// its TTL) still counts; one expired ten minutes ago does not (found by
	// a review of the fix)
	if _, err := db.Exec(`UPDATE clock_instance SET expires_at = CAST(UNIX_TIMESTAMP(NOW(3)) * 1000 AS SIGNED) - 60000 WHERE instance_id = 'a'`); err != nil {
		t.Fatal(err)
	}
	if _, err := mysql.SetupExchange(ctx, db, "clock.third", "c"); !errors.Is(err, alarm.ErrExchangeChanged) {
		t.Fatalf("another exchange a minute after the cluster's last heartbeat: %v, want alarm.ErrExchangeChanged", err)
	}
	if _, err := db.Exec(`UPDATE clock_instance SET expires_at = CAST(UNIX_TIMESTAMP(NOW(3)) * 1000 AS SIGNED) - 600000 WHERE instance_id = 'a'`); err != nil {
		t.Fatal(err)
	}
	if prev, err := mysql.SetupExchange(ctx, db, "clock.third", "c"); err != nil || prev != "clock.other" {
		t.Fatalf("another exchange ten minutes after the cluster's last heartbeat: %q %v, want clock.other recorded before", prev, err)
	}
}
