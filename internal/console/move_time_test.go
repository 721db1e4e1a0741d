package console

import (
	"context"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/clockd/clockd/internal/alarm"
)

// oneClockStore is an alarm.Store holding one pending clock that a
// reschedule changes (the rest of the interface is not used).
type oneClockStore struct {
	alarm.Store
	c alarm.Clock
}

func (s *oneClockStore) Reschedule(_ context.Context, _ alarm.Key, _ time.Time, apply func(alarm.Clock) (alarm.Clock, error)) (alarm.Clock, error) {
	c, err := apply(s.c)
	if err == nil {
		s.c = c
	}
	return c, err
}

// The console's "move" reads a time as the API does (alarm.ParseRFC3339):
// an operator who types 2030-01-02T10:00:00+24:00 is refused, not moved to
// 2030-01-01T10:00Z as time.Parse would have it; a time in the right form
// moves the clock (found by the review of this change).
func TestConsoleMoveReadsTimesAsTheAPI(t *testing.T) {
	now := time.Date(2029, 6, 1, 0, 0, 0, 0, time.UTC)
	st := &oneClockStore{c: alarm.Clock{ID: 1, Application: "order", BusinessID: "o-1", Status: alarm.StatusPending,
		RingAt: now.Add(time.Hour), NextTryAt: now.Add(time.Hour)}}
	svc := alarm.NewService(st, nil, func() time.Time { return now }, alarm.Limits{}, time.Second)
	c, err := New(Options{Service: svc})
	if err != nil {
		t.Fatal(err)
	}
	form := url.Values{"when": {"2030-01-02T10:00:00+24:00"}}
	r := httptest.NewRequest("POST", Prefix+"clocks/order/o-1/move", strings.NewReader(form.Encode()))
	r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	r.SetPathValue("application", "order")
	r.SetPathValue("business_id", "o-1")
	if _, msg, err := c.move(httptest.NewRecorder(), r); err == nil {
		t.Errorf("move to %q: accepted (%s), ring_at now %s; want it refused as the API refuses it",
			form.Get("when"), msg, st.c.RingAt.UTC().Format(time.RFC3339))
	}
	form = url.Values{"when": {"2030-01-02t11:00:00+01:00"}}
	r = httptest.NewRequest("POST", Prefix+"clocks/order/o-1/move", strings.NewReader(form.Encode()))
	r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	r.SetPathValue("application", "order")
	r.SetPathValue("business_id", "o-1")
	if _, _, err := c.move(httptest.NewRecorder(), r); err != nil || !st.c.RingAt.Equal(time.Date(2030, 1, 2, 10, 0, 0, 0, time.UTC)) {
		t.Errorf("move to %q: %v, ring_at %v; want 2030-01-02T10:00Z", form.Get("when"), err, st.c.RingAt)
	}
}
