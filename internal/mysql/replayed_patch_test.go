package mysql_test

import (
	"context"
	"testing"
	"time"

	"github.com/clockd/clockd/internal/alarm"
	"github.com/clockd/clockd/internal/schedule"
)

// A PATCH of only the payload of a replayed occurrence of a recurring
// clock keeps its replayed_attempts: the occurrence is the same (ring_at,
// message_id "<id>:<ms>" and the replay's latest_ring_at stay), so its next
// publish must carry x-clock-attempt 2 or more (SPEC: any repeat is 2 or
// more; README: x-clock-attempt counts the attempts of that occurrence).
// Only a change that moves the clock to another occurrence (a schedule
// PATCH, a resume) starts the count again.
func TestPayloadPatchKeepsReplayedAttemptsOfTheOccurrence(t *testing.T) {
	s, c := recurringClock(t, schedule.Spec{Every: 2 * time.Second})
	ctx := context.Background()
	key := alarm.Key{Application: "app", BusinessID: "r-1"}
	now := time.Now()

	// the occurrence was published once (the claim counted attempt 1) and
	// is given up: dead, and the clock ends with it (no next occurrence)
	a := alarm.Advance{ID: c.ID, Shard: c.Shard, Occurrence: c.RingAt, Status: alarm.StatusDead, At: now,
		Error: "no queue bound", Occurrences: 0}
	if err := s.Advance(ctx, []alarm.Advance{a}, []int64{7}, now); err != nil {
		t.Fatal(err)
	}
	if got, err := s.Get(ctx, key); err != nil || got.Status != alarm.StatusDead || got.Attempts != 1 {
		t.Fatalf("after the dead occurrence: %+v %v", got, err)
	}
	replayed, err := s.Replay(ctx, key, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	var before int
	if err := s.DB().Get(&before, "SELECT replayed_attempts FROM clock WHERE id = ?", c.ID); err != nil || before != 1 {
		t.Fatalf("after the replay: replayed_attempts %d (%v), want 1", before, err)
	}
	// only the payload changes: the same occurrence
	payload := `{"v":2}`
	p := alarm.PatchInput{Payload: &payload}
	patched, err := s.Reschedule(ctx, key, time.Now(), func(c alarm.Clock) (alarm.Clock, error) {
		return p.Apply(c, time.Now(), alarm.Limits{})
	})
	if err != nil {
		t.Fatal(err)
	}
	if !patched.RingAt.Equal(replayed.RingAt) || !patched.RingAt.Equal(c.RingAt) {
		t.Fatalf("a payload PATCH moved the occurrence: %v, was %v", patched.RingAt, c.RingAt)
	}

	leases, err := s.AcquireLeases(ctx, "me", 1, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	claimed, err := s.Claim(ctx, "me", leases, []int64{c.ID}, 11, time.Now().Add(time.Second), time.Now())
	if err != nil || len(claimed) != 1 {
		t.Fatalf("claim after the replay: %v %v", claimed, err)
	}
	// what internal/ring/fire.go publishes as x-clock-attempt
	attempt := max(claimed[0].Attempts, 1) + claimed[0].ReplayedAttempts
	if attempt < 2 {
		t.Errorf("occurrence %d:%d, published once before its replay, is published again as x-clock-attempt %d "+
			"(replayed_attempts %d after a PATCH of its payload); want 2 or more",
			c.ID, c.RingAt.UnixMilli(), attempt, claimed[0].ReplayedAttempts)
	}
}
