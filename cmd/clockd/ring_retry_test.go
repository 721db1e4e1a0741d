package main

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/clockd/clockd/internal/alarm"
	"github.com/clockd/clockd/internal/httpapi"
	"github.com/clockd/clockd/internal/testenv"
)

// Failed attempts: a ring no queue takes is retried with backoff, visible
// through GET, until a queue is bound; past latest_ring_at a clock expires;
// after max_attempts it is dead, and a replay rings it.
func TestRingFailedAttempts(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	d := testenv.StartClockd(t, e.vars(map[string]string{"CLOCKD_RETRY_MIN": "200ms", "CLOCKD_RETRY_MAX": "1s"}))
	ctx := context.Background()
	create := func(t *testing.T, app, bid string, extra map[string]any) (httpapi.Clock, time.Time) {
		t.Helper()
		at := time.Now().Add(500 * time.Millisecond).UTC().Truncate(time.Millisecond)
		c := postClocks(t, d, []ringSpec{{App: app, BusinessID: bid, RingAt: at, Extra: extra}})[0]
		return c, at
	}
	// failed waits for at least n failed attempts and checks what GET shows.
	failed := func(t *testing.T, app, bid string, n int) httpapi.Clock {
		t.Helper()
		c := waitClock(t, d, app, bid, 15*time.Second, "failed at least twice", func(c httpapi.Clock) bool { return c.Attempts >= n })
		if c.LastError == nil || !strings.Contains(*c.LastError, "unroutable") {
			t.Errorf("last_error %v, want the unroutable ring", c.LastError)
		}
		if c.RungAt != nil {
			t.Errorf("rung_at %v on a clock that never rang", *c.RungAt)
		}
		return c
	}

	t.Run("unroutable is retried until a queue is bound", func(t *testing.T) {
		t.Parallel()
		_, ringAt := create(t, "unbound", "u-1", nil)
		c := failed(t, "unbound", "u-1", 2)
		if c.Status != "pending" && c.Status != "firing" {
			t.Errorf("status %s while retrying, want pending", c.Status)
		}
		if next, _ := time.Parse(time.RFC3339Nano, c.NextTryAt); c.Status == "pending" && !next.After(ringAt) {
			t.Errorf("next_try_at %s not after ring_at %s while retrying", c.NextTryAt, ringAt)
		}
		cons := testenv.Consume(t, e.AMQP, e.Exchange, "unbound")
		if !cons.WaitDistinct(1, 10*time.Second) {
			t.Fatal("not delivered within 10s after binding a queue")
		}
		r := cons.Rings()[0]
		if a := attemptOf(r.Delivery); a < 2 {
			t.Errorf("x-clock-attempt %d on the delivery after failed attempts, want > 1", a)
		}
		if !r.RingAt.Equal(ringAt) {
			t.Errorf("x-clock-ring-at %v, want the original ring_at %v", r.RingAt, ringAt)
		}
		c = waitClock(t, d, "unbound", "u-1", 5*time.Second, "rung", func(c httpapi.Clock) bool { return c.Status == "rung" })
		if c.Attempts != attemptOf(r.Delivery) {
			t.Errorf("attempts %d after the ring, x-clock-attempt was %d", c.Attempts, attemptOf(r.Delivery))
		}
	})

	t.Run("expired past latest_ring_at, never delivered", func(t *testing.T) {
		t.Parallel()
		latestAt := time.Now().Add(2 * time.Second).UTC().Truncate(time.Millisecond)
		_, ringAt := create(t, "expiring", "x-1", map[string]any{"latest_ring_at": latestAt.Format(time.RFC3339Nano)})
		c := waitClock(t, d, "expiring", "x-1", 15*time.Second, "expired", func(c httpapi.Clock) bool { return c.Status == "expired" })
		if c.Attempts < 1 || c.LastError == nil {
			t.Errorf("expired clock: attempts %d last_error %v, want the failed attempts recorded", c.Attempts, c.LastError)
		}
		if time.Since(latestAt) > 3*time.Second {
			t.Errorf("expired only %v after latest_ring_at", time.Since(latestAt))
		}
		if at, _ := time.Parse(time.RFC3339Nano, c.RingAt); !at.Equal(ringAt) {
			t.Errorf("ring_at %s, want %v", c.RingAt, ringAt)
		}
		cons := testenv.Consume(t, e.AMQP, e.Exchange, "expiring")
		time.Sleep(2 * time.Second)
		if n := len(cons.Rings()); n != 0 {
			t.Errorf("an expired clock was delivered (%d messages)", n)
		}
		if c := getClock(t, d, "expiring", "x-1"); c.Status != "expired" {
			t.Errorf("status %s, want expired", c.Status)
		}
	})

	t.Run("latest_ring_at equal to ring_at rings when on time", func(t *testing.T) {
		t.Parallel()
		cons := testenv.Consume(t, e.AMQP, e.Exchange, "ontime")
		at := time.Now().Add(time.Second).UTC().Truncate(time.Millisecond)
		specs := make([]ringSpec, 10)
		for i := range specs {
			ringAt := at.Add(time.Duration(i*37) * time.Millisecond)
			specs[i] = ringSpec{App: "ontime", BusinessID: fmt.Sprintf("eq-%d", i), RingAt: ringAt,
				Extra: map[string]any{"latest_ring_at": ringAt.Format(time.RFC3339Nano)}}
		}
		postClocks(t, d, specs)
		rung := 0
		for _, s := range specs {
			c := waitClock(t, d, s.App, s.BusinessID, 10*time.Second, "finished", func(c httpapi.Clock) bool {
				return c.Status != "pending" && c.Status != "firing"
			})
			switch c.Status {
			case "rung":
				rung++
			case "expired": // fired late, past its millisecond: not rung
			default:
				t.Errorf("%s: %s, want rung or expired", s.BusinessID, c.Status)
			}
		}
		// a clock fired within its millisecond rings: before, every one
		// expired (the firing instant, in nanoseconds, counted as after)
		if rung == 0 {
			t.Errorf("none of %d clocks whose latest_ring_at is their ring_at rang", len(specs))
		}
		time.Sleep(500 * time.Millisecond)
		if n := cons.Distinct(); n != rung {
			t.Errorf("%d delivered, %d rung", n, rung)
		}
	})

	t.Run("dead after max_attempts, replay rings it", func(t *testing.T) {
		t.Parallel()
		_, ringAt := create(t, "dying", "d-1", map[string]any{"max_attempts": 2})
		c := waitClock(t, d, "dying", "d-1", 15*time.Second, "dead", func(c httpapi.Clock) bool { return c.Status == "dead" })
		if c.Attempts != 2 || c.LastError == nil || !strings.Contains(*c.LastError, "unroutable") {
			t.Errorf("dead clock: attempts %d last_error %v, want 2 unroutable attempts", c.Attempts, c.LastError)
		}
		cons := testenv.Consume(t, e.AMQP, e.Exchange, "dying")
		time.Sleep(1500 * time.Millisecond)
		if n := len(cons.Rings()); n != 0 {
			t.Fatalf("a dead clock was delivered (%d messages) before its replay", n)
		}
		var rc httpapi.Clock
		code, err := d.Do(ctx, "POST", clockPath("dying", "d-1")+"/replay", nil, &rc)
		if err != nil || code != http.StatusOK || rc.Status != "pending" {
			t.Fatalf("replay: %d %v status %q", code, err, rc.Status)
		}
		// a replay starts a fresh budget of max_attempts
		if rc.Attempts != 0 {
			t.Errorf("attempts %d after replay, want 0", rc.Attempts)
		}
		if !cons.WaitDistinct(1, 10*time.Second) {
			t.Fatal("replayed clock not delivered within 10s")
		}
		// ... but its ring is a repeat: the two attempts before the replay
		// count on (SPEC: x-clock-attempt 1 is the first publish only)
		r := cons.Rings()[0]
		if a := attemptOf(r.Delivery); a != 3 {
			t.Errorf("x-clock-attempt %d: the first attempt after a replay of a clock tried twice, want 3", a)
		}
		if !r.RingAt.Equal(ringAt) {
			t.Errorf("x-clock-ring-at %v, want the original %v", r.RingAt, ringAt)
		}
		c = waitClock(t, d, "dying", "d-1", 5*time.Second, "rung", func(c httpapi.Clock) bool { return c.Status == "rung" })
		if c.Attempts != 1 {
			t.Errorf("attempts %d after the ring that followed the replay, want 1 (the budget restarted)", c.Attempts)
		}
	})
}

// A failed attempt whose backoff would end past latest_ring_at is followed
// by a last try shortly before the limit (alarm.LastTryLead), early enough
// that a try fired a little late still rings. Before, the last try was
// scheduled at the limit itself and, fired an instant after it, expired the
// clock without a try.
func TestLastTryBeforeLatestRingAt(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	d := testenv.StartClockd(t, e.vars(map[string]string{"CLOCKD_RETRY_MIN": "10s", "CLOCKD_RETRY_MAX": "10s"}))
	// attempt 1 is unroutable and its backoff (5-10 s) passes the limit:
	// the last try comes alarm.LastTryLead before it, and a queue bound
	// meanwhile gets the ring
	ringAt := time.Now().Add(500 * time.Millisecond).UTC().Truncate(time.Millisecond)
	latest := ringAt.Add(2 * time.Second)
	postClocks(t, d, []ringSpec{{App: "lasttry", BusinessID: "l-1", RingAt: ringAt,
		Extra: map[string]any{"latest_ring_at": latest.Format(time.RFC3339Nano)}}})
	c := waitClock(t, d, "lasttry", "l-1", 10*time.Second, "its last try scheduled", func(c httpapi.Clock) bool {
		next, _ := time.Parse(time.RFC3339Nano, c.NextTryAt)
		return c.Status != "pending" && c.Status != "firing" ||
			c.Status == "pending" && c.Attempts >= 1 && next.After(latest.Add(-alarm.LastTryLead-time.Millisecond))
	})
	next, _ := time.Parse(time.RFC3339Nano, c.NextTryAt)
	if c.Status != "pending" || !next.Equal(latest.Add(-alarm.LastTryLead)) {
		t.Fatalf("status %s, next_try_at %s: want pending, the last try %v before latest_ring_at %s",
			c.Status, c.NextTryAt, alarm.LastTryLead, latest.Format(time.RFC3339Nano))
	}
	if left := time.Until(next); left < 50*time.Millisecond {
		t.Fatalf("only %v before the last try (1.9 s after the first): too little to bind a queue", left)
	}
	cons := testenv.Consume(t, e.AMQP, e.Exchange, "lasttry")
	c = waitClock(t, d, "lasttry", "l-1", 10*time.Second, "finished", func(c httpapi.Clock) bool {
		return c.Status != "pending" && c.Status != "firing"
	})
	if c.Status != "rung" || cons.Distinct() != 1 {
		t.Errorf("status %s, attempts %d, last_error %v, %d delivered: the last try (%s) before latest_ring_at (%s) was not made",
			c.Status, c.Attempts, c.LastError, cons.Distinct(), next.Format(time.RFC3339Nano), latest.Format(time.RFC3339Nano))
	}
}
