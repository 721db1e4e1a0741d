package main

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/clockd/clockd/internal/httpapi"
	"github.com/clockd/clockd/internal/testenv"
)

// checkRingProps checks one delivery against SPEC's table, with exact types.
func checkRingProps(t *testing.T, m amqp.Delivery, c httpapi.Clock, wantID, ct string, wantAttempt func(int32) bool) {
	t.Helper()
	if m.ContentType != ct {
		t.Errorf("content_type %q, want %q", m.ContentType, ct)
	}
	if m.DeliveryMode != 2 {
		t.Errorf("delivery_mode %d", m.DeliveryMode)
	}
	if m.MessageId != wantID {
		t.Errorf("message_id %q, want %q", m.MessageId, wantID)
	}
	if m.Timestamp.IsZero() || time.Since(m.Timestamp) > time.Minute {
		t.Errorf("timestamp %v", m.Timestamp)
	}
	h := m.Headers
	if v, ok := h["x-clock-application"].(string); !ok || v != c.Application {
		t.Errorf("x-clock-application %#v", h["x-clock-application"])
	}
	if v, ok := h["x-clock-business-id"].(string); !ok || v != c.BusinessID {
		t.Errorf("x-clock-business-id %#v", h["x-clock-business-id"])
	}
	v, ok := h["x-clock-ring-at"].(string)
	if _, err := time.Parse(time.RFC3339, v); !ok || err != nil || !strings.HasSuffix(v, "Z") {
		t.Errorf("x-clock-ring-at %#v: not RFC 3339 UTC", h["x-clock-ring-at"])
	}
	if a, ok := h["x-clock-attempt"].(int32); !ok || !wantAttempt(a) {
		t.Errorf("x-clock-attempt %#v (%T)", h["x-clock-attempt"], h["x-clock-attempt"])
	}
}

// A recurring clock whose first occurrence is retried (no queue bound yet),
// then rings: every property of every delivery as SPEC's table says, with
// the header types a consumer in another language reads (x-clock-attempt
// an integer, the times RFC 3339 in UTC).
func TestRingPropertiesOfARetriedRecurringClock(t *testing.T) {
	e := newEnv(t)
	d := testenv.StartClockd(t, e.vars(map[string]string{"CLOCKD_RETRY_MIN": "200ms", "CLOCKD_RETRY_MAX": "500ms"}))
	start := time.Now().Add(time.Second).UTC().Truncate(time.Second)
	var c httpapi.Clock
	code, err := d.Do(context.Background(), "POST", "/v1/clocks", map[string]any{
		"application": "propr", "business_id": "r-1", "payload": "hello", "content_type": "text/plain",
		"schedule": map[string]any{"every": "2s", "start": start.Format(time.RFC3339Nano), "max_occurrences": 3},
	}, &c)
	if err != nil || code != http.StatusCreated {
		t.Fatalf("create: %d %v", code, err)
	}
	waitClock(t, d, "propr", "r-1", 10*time.Second, "retried", func(c httpapi.Clock) bool { return c.Attempts >= 2 })
	cons := testenv.Consume(t, e.AMQP, e.Exchange, "propr")
	deadline := time.Now().Add(15 * time.Second)
	for len(cons.Rings()) < 3 && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
	}
	rings := cons.Rings()
	if len(rings) < 2 {
		t.Fatalf("%d rings", len(rings))
	}
	for i, r := range rings {
		m := r.Delivery
		occ, _ := m.Headers["x-clock-occurrence"].(string)
		at, err := time.Parse(time.RFC3339, occ)
		if err != nil {
			t.Errorf("ring %d: x-clock-occurrence %#v", i, m.Headers["x-clock-occurrence"])
			continue
		}
		want := strconv.FormatInt(c.ID, 10) + ":" + strconv.FormatInt(at.UnixMilli(), 10)
		first := i == 0
		checkRingProps(t, m, c, want, "text/plain", func(a int32) bool {
			if first {
				return a >= 2 // its earlier attempts were returned
			}
			return a == 1
		})
	}
}
