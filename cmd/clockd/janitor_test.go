package main

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/clockd/clockd/internal/httpapi"
	"github.com/clockd/clockd/internal/testenv"
)

// The life of a key, through a real clockd: a clock rings; an identical
// retry of its create within the idempotency window answers 200 with the
// rung clock and rings nothing; after the window the same create sets a
// new clock (new id) that rings again with its own message_id; the janitor
// moves the finished clock to history past its retention, where GET still
// finds it, marked archived.
func TestRearmAndHistoryEndToEnd(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	d := testenv.StartClockd(t, e.vars(map[string]string{
		"CLOCKD_IDEMPOTENCY_WINDOW": "3s", "CLOCKD_RETENTION": "4s", "CLOCKD_RETENTION_FAILED": "4s",
		"CLOCKD_JANITOR_INTERVAL": "1s",
	}))
	cons := testenv.Consume(t, e.AMQP, e.Exchange, "order")
	ctx := context.Background()
	create := func() (int, httpapi.Clock) {
		t.Helper()
		var c httpapi.Clock
		code, err := d.Do(ctx, "POST", "/v1/clocks", map[string]any{
			"application": "order", "business_id": "o-1", "payload": "close", "delay": "100ms",
		}, &c)
		if err != nil {
			t.Fatal(err)
		}
		return code, c
	}
	get := func() (int, map[string]json.RawMessage) {
		t.Helper()
		var m map[string]json.RawMessage
		code, err := d.Do(ctx, "GET", "/v1/clocks/order/o-1", nil, &m)
		if err != nil {
			t.Fatal(err)
		}
		return code, m
	}
	waitStatus := func(id int64, status string) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			_, m := get()
			if string(m["id"]) == strconv.FormatInt(id, 10) && string(m["status"]) == `"`+status+`"` {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("clock %d: %v, want %s", id, m, status)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}

	code, first := create()
	if code != http.StatusCreated {
		t.Fatalf("create: %d", code)
	}
	waitStatus(first.ID, "rung")
	// A retry within the window: 200 with the rung clock, no ring.
	if code, c := create(); code != http.StatusOK || c.ID != first.ID || c.Status != "rung" {
		t.Fatalf("retry within the window: %d %+v", code, c)
	}
	time.Sleep(3 * time.Second) // past the window
	code, second := create()
	if code != http.StatusCreated || second.ID == first.ID || second.Status != "pending" {
		t.Fatalf("create after the window: %d %+v, want 201 with a new id", code, second)
	}
	if !cons.WaitDistinct(2, 10*time.Second) {
		t.Fatalf("rings %d, want 2 distinct", cons.Distinct())
	}
	time.Sleep(300 * time.Millisecond)
	if n := len(cons.Rings()); n != 2 || cons.Count(first.ID) != 1 || cons.Count(second.ID) != 1 {
		t.Errorf("rings: %d in all, %d of %d, %d of %d", n, cons.Count(first.ID), first.ID, cons.Count(second.ID), second.ID)
	}
	waitStatus(second.ID, "rung")

	// Past retention the janitor moves the rung clock to history; GET
	// finds it there, says so, and keeps every field.
	deadline := time.Now().Add(15 * time.Second)
	for {
		code, m := get()
		if code == http.StatusOK && string(m["archived"]) == "true" {
			if string(m["id"]) != strconv.FormatInt(second.ID, 10) || string(m["status"]) != `"rung"` || string(m["rung_at"]) == "null" {
				t.Errorf("archived clock %v", m)
			}
			for _, f := range []string{"id", "application", "business_id", "payload", "content_type", "ring_at", "latest_ring_at",
				"max_attempts", "status", "attempts", "next_try_at", "last_error", "created_at", "updated_at", "rung_at"} {
				if _, ok := m[f]; !ok {
					t.Errorf("archived clock lacks %s", f)
				}
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("not archived within 15s: %d %v", code, m)
		}
		time.Sleep(200 * time.Millisecond)
	}
	// Cancelling it answers 409 and says a create sets a new clock.
	var body httpapi.ErrorBody
	if code, err := d.Do(ctx, "DELETE", "/v1/clocks/order/o-1", nil, &body); err != nil || code != http.StatusConflict ||
		!strings.Contains(body.Error.Message, "create") {
		t.Errorf("cancel of an archived clock: %d %+v %v", code, body, err)
	}
	// The metrics the janitor holder exports.
	resp, err := http.Get(d.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var sb strings.Builder
	buf := make([]byte, 64<<10)
	for {
		n, err := resp.Body.Read(buf)
		sb.Write(buf[:n])
		if err != nil {
			break
		}
	}
	for _, w := range []string{`clockd_janitor_rows_total{action="archived"}`, `clockd_clocks{status="pending"}`, "clockd_janitor_holder 1"} {
		if !strings.Contains(sb.String(), w) {
			t.Errorf("/metrics lacks %s", w)
		}
	}
}
