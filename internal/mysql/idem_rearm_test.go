package mysql_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/clockd/clockd/internal/alarm"
	"github.com/clockd/clockd/internal/mysql"
)

// README: "an identical create ... within clock.idempotency_window of the
// finished clock's creation ... is a retry of the create that made it ...
// so it answers 200 with the finished clock and nothing rings a second
// time." Also when the key was re-armed in between (and that clock
// finished too): the first clock, in history since, answers the retry.
// Before, the retry was compared with the newer clock only, and set the
// first one again (201): it rang a second time within the window.
func TestRetryWithinWindowAfterTheKeyWasRearmed(t *testing.T) {
	t.Parallel()
	// With history.keep 0 the re-arming create deleted the finished clock
	// outright and the retry found nothing: a re-arm now keeps a clock still
	// in its window in clock_history, where the retry looks.
	for _, noHistory := range []bool{false, true} {
		t.Run(map[bool]string{false: "history kept", true: "history.keep 0"}[noHistory], func(t *testing.T) {
			t.Parallel()
			s, db := historyStore(t, mysql.StoreConfig{IdempotencyWindow: 10 * time.Minute, NoHistory: noHistory})
			t0 := time.Now().Add(-time.Minute).Truncate(time.Millisecond)
			a := alarm.NewClock{Application: "order", BusinessID: "o-1", Payload: "A", ContentType: "text/plain", RingAt: t0.Add(time.Second)}
			first := createOne(t, s, a, t0) // its answer is lost; it rings
			if first.Err != nil || !first.Created {
				t.Fatal(first)
			}
			finish(t, db, first.Clock.ID, alarm.StatusRung, t0.Add(time.Second))
			b := a
			b.Payload, b.RingAt = "B", t0.Add(time.Hour)
			second := createOne(t, s, b, t0.Add(2*time.Second)) // another create re-arms the key
			if second.Err != nil || !second.Created {
				t.Fatal(second)
			}
			if _, err := s.Cancel(context.Background(), alarm.Key{Application: "order", BusinessID: "o-1"}, t0.Add(3*time.Second)); err != nil {
				t.Fatal(err)
			}
			retry := createOne(t, s, a, t0.Add(5*time.Second)) // the first create's retry, 5 s later
			if retry.Created || retry.Err != nil {
				t.Fatalf("the retry of the first create, 5 s later within the 10 min window: created %v, clock %d, err %v; "+
					"want 200 with clock %d (payload A), which rang already", retry.Created, retry.Clock.ID, retry.Err, first.Clock.ID)
			}
			if retry.Clock.ID != first.Clock.ID || !retry.Clock.Archived || retry.Clock.Status != alarm.StatusRung {
				t.Errorf("the retry answered clock %d (%s, archived %v), want clock %d, rung, from history",
					retry.Clock.ID, retry.Clock.Status, retry.Clock.Archived, first.Clock.ID)
			}
			// past the window, the same create re-arms the key
			late := createOne(t, s, a, t0.Add(11*time.Minute))
			if late.Err != nil || !late.Created {
				t.Errorf("the same create past the window: created %v, err %v; want a new clock", late.Created, late.Err)
			}
		})
	}
}

// The 409 of a pending clock with other content says "to replace it,
// cancel it and create it again". An application that set A, replaced it
// with B that way, and then wants A back does the same: that create is
// identical to A, cancelled and in history within the window, and was
// answered 200 with the cancelled A: nothing was set and nothing rang
// (found by review). A clock the application cancelled is no retry target
// once its key was re-armed: the create sets A again (201). The same with
// delays ("close in 30m", "remind in 30m", "close in 30m").
func TestCreateAfterCancelAndRearmSetsTheClockAgain(t *testing.T) {
	t.Parallel()
	s, db := historyStore(t, mysql.StoreConfig{IdempotencyWindow: 10 * time.Minute})
	key := alarm.Key{Application: "order", BusinessID: "o-1"}
	t0 := time.Now().Add(-time.Minute).Truncate(time.Millisecond)
	for _, delays := range []bool{false, true} {
		key.BusinessID = map[bool]string{false: "o-ring-at", true: "o-delay"}[delays]
		a := alarm.NewClock{Application: key.Application, BusinessID: key.BusinessID, Payload: "close", ContentType: "text/plain"}
		if delays {
			a.Delay = 30 * time.Minute
		} else {
			a.RingAt = t0.Add(time.Hour)
		}
		b := a
		b.Payload = "remind"
		first := createOne(t, s, a, t0)
		if first.Err != nil || !first.Created {
			t.Fatal(first)
		}
		if res := createOne(t, s, b, t0.Add(time.Second)); !errors.Is(res.Err, alarm.ErrConflict) {
			t.Fatalf("B over a pending A: %v, want the 409 that says to cancel and create again", res.Err)
		}
		if _, err := s.Cancel(context.Background(), key, t0.Add(2*time.Second)); err != nil {
			t.Fatal(err)
		}
		if res := createOne(t, s, b, t0.Add(3*time.Second)); res.Err != nil || !res.Created {
			t.Fatalf("B after cancelling A: %+v", res)
		}
		if res := createOne(t, s, a, t0.Add(4*time.Second)); !errors.Is(res.Err, alarm.ErrConflict) {
			t.Fatalf("A over a pending B: %v, want 409", res.Err)
		}
		if _, err := s.Cancel(context.Background(), key, t0.Add(5*time.Second)); err != nil {
			t.Fatal(err)
		}
		again := createOne(t, s, a, t0.Add(6*time.Second))
		if again.Err != nil || !again.Created || again.Clock.ID == first.Clock.ID || again.Clock.Status != alarm.StatusPending {
			t.Fatalf("delays %v: A again after cancelling B, as the 409 said: created %v, clock %d (%s, archived %v), err %v; "+
				"want 201 with a new pending clock (the first A, %d, was cancelled)", delays, again.Created, again.Clock.ID,
				again.Clock.Status, again.Clock.Archived, again.Err, first.Clock.ID)
		}
		var pending int
		if err := db.Get(&pending, "SELECT COUNT(*) FROM clock WHERE business_id = ? AND status = 'pending'", key.BusinessID); err != nil || pending != 1 {
			t.Fatalf("delays %v: %d pending clocks of the key (err %v), want 1", delays, pending, err)
		}
		// an identical retry of that create is still answered with it
		if retry := createOne(t, s, a, t0.Add(7*time.Second)); retry.Err != nil || retry.Created || retry.Clock.ID != again.Clock.ID {
			t.Errorf("delays %v: retry of the create that set A again: %+v, want 200 with clock %d", delays, retry, again.Clock.ID)
		}
	}
}
