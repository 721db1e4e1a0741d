package main

import (
	"context"
	"database/sql"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/clockd/clockd/internal/httpapi"
	"github.com/clockd/clockd/internal/testenv"
)

// env is one isolated clockd world: its own database and exchange.
type env struct {
	DSN, AMQP, Exchange string
}

func newEnv(t *testing.T) env {
	t.Helper()
	e := env{DSN: testenv.MySQLDSN(t), AMQP: testenv.AMQPURL(t), Exchange: testenv.Name("clock.ring.test-")}
	testenv.DeleteExchangeOnCleanup(t, e.AMQP, e.Exchange)
	return e
}

// openDB opens the test's database, closed when the test ends.
func (e env) openDB(t *testing.T) *sql.DB {
	t.Helper()
	db, err := sql.Open("mysql", e.DSN)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

func (e env) vars(extra map[string]string) map[string]string {
	m := map[string]string{
		"CLOCKD_MYSQL_DSN": e.DSN, "CLOCKD_AMQP_URL": e.AMQP, "CLOCKD_EXCHANGE": e.Exchange,
		"CLOCKD_SHARDS": "8", "CLOCKD_LEASE_TTL": "3s", "CLOCKD_MYSQL_MAX_OPEN_CONNS": "12",
	}
	for k, v := range extra {
		m[k] = v
	}
	return m
}

func TestRingEndToEnd(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	d := testenv.StartClockd(t, e.vars(nil))
	cons := testenv.Consume(t, e.AMQP, e.Exchange, "order")
	ctx := context.Background()

	ringAt := time.Now().Add(1500 * time.Millisecond).UTC().Truncate(time.Millisecond)
	var c httpapi.Clock
	code, err := d.Do(ctx, "POST", "/v1/clocks", map[string]any{
		"application": "order", "business_id": "o-123", "payload": `{"order":123}`,
		"content_type": "application/vnd.order+json", "ring_at": ringAt.Format(time.RFC3339Nano),
	}, &c)
	if err != nil || code != http.StatusCreated {
		t.Fatalf("create: %d %v", code, err)
	}
	if !cons.WaitDistinct(1, 10*time.Second) {
		t.Fatal("no ring within 10s")
	}
	r := cons.Rings()[0]
	m := r.Delivery
	if string(m.Body) != `{"order":123}` {
		t.Errorf("body %q", m.Body)
	}
	if m.ContentType != "application/vnd.order+json" {
		t.Errorf("content_type %q", m.ContentType)
	}
	if m.DeliveryMode != 2 {
		t.Errorf("delivery_mode %d", m.DeliveryMode)
	}
	if m.MessageId != strconv.FormatInt(c.ID, 10) {
		t.Errorf("message_id %q, want %d", m.MessageId, c.ID)
	}
	if m.Timestamp.IsZero() || m.Timestamp.Before(ringAt.Add(-time.Second)) {
		t.Errorf("timestamp %v", m.Timestamp)
	}
	if m.RoutingKey != "order" || m.Exchange != e.Exchange {
		t.Errorf("routing %q exchange %q", m.RoutingKey, m.Exchange)
	}
	h := m.Headers
	if h["x-clock-application"] != "order" || h["x-clock-business-id"] != "o-123" {
		t.Errorf("headers %v", h)
	}
	if at, _ := time.Parse(time.RFC3339Nano, h["x-clock-ring-at"].(string)); !at.Equal(ringAt) {
		t.Errorf("x-clock-ring-at %v, want %v", h["x-clock-ring-at"], ringAt)
	}
	if n, ok := h["x-clock-attempt"].(int32); !ok || n != 1 {
		if n64, ok := h["x-clock-attempt"].(int64); !ok || n64 != 1 {
			t.Errorf("x-clock-attempt %#v", h["x-clock-attempt"])
		}
	}
	if r.Received.Before(ringAt) {
		t.Errorf("rang early: received %v, ring_at %v", r.Received, ringAt)
	}
	// the clock is marked rung once confirmed
	deadline := time.Now().Add(5 * time.Second)
	for {
		var got httpapi.Clock
		if _, err := d.Do(ctx, "GET", "/v1/clocks/order/o-123", nil, &got); err != nil {
			t.Fatal(err)
		}
		if got.Status == "rung" {
			if got.Attempts != 1 || got.RungAt == nil {
				t.Errorf("rung clock: %+v", got)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("status %s, want rung", got.Status)
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("lateness %v", r.Received.Sub(ringAt))
	// MySQL runs on this machine: clockd reads its clock and finds its own
	// agrees, so it rings by its own (clocksync)
	if v, ok := scrapeGauge(d, "clockd_clock_offset_seconds"); !ok || v > 0.01 || v < -0.01 {
		t.Errorf("clockd_clock_offset_seconds %v (found %v), want about 0", v, ok)
	}
	if strings.Contains(d.Logs(), "clock differs from MySQL's") {
		t.Errorf("a clock difference was reported against the machine's own MySQL:\n%s", d.Logs())
	}
}
