package main

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/clockd/clockd/internal/httpapi"
	"github.com/clockd/clockd/internal/testenv"
)

// Recurring clocks across a SIGKILL (issue 13, the short form of its
// measured run): 500 clocks ringing every 2 s, clockd killed with SIGKILL
// midway and started again. Every occurrence up to the cut-off arrives
// (none lost: those of the outage late, by misfire catch_up), with the
// message_id "<id>:<occurrence ms>" and the header x-clock-occurrence;
// none arrives before its time or off the schedule; an occurrence arrives
// twice only as the same message_id (at least once per occurrence).
func TestRecurringKilledMidRun(t *testing.T) {
	t.Parallel()
	const n, every = 500, 2 * time.Second
	e := newEnv(t)
	d := testenv.StartClockd(t, e.vars(nil))
	cons := testenv.Consume(t, e.AMQP, e.Exchange, "rec")

	start := time.Now().Add(3 * time.Second).Truncate(time.Second).UTC()
	items := make([]map[string]any, n)
	for i := range items {
		items[i] = map[string]any{"application": "rec", "business_id": fmt.Sprintf("r-%03d", i), "payload": "{}",
			"schedule": map[string]any{"every": every.String(), "start": start.Format(time.RFC3339Nano),
				"misfire": "catch_up", "catch_up_limit": 20}}
	}
	var res struct {
		Results []httpapi.BatchResult `json:"results"`
	}
	code, err := d.Do(context.Background(), "POST", "/v1/clocks/batch", map[string]any{"clocks": items}, &res)
	if err != nil || code != http.StatusOK || len(res.Results) != n {
		t.Fatalf("batch create: %d %v", code, err)
	}
	ids := map[int64]bool{}
	for i, r := range res.Results {
		if r.Status != http.StatusCreated || r.Clock == nil || r.Clock.Schedule == nil || r.Clock.OccurrenceAt == nil {
			t.Fatalf("create %d: %+v", i, r)
		}
		ids[r.Clock.ID] = true
	}

	time.Sleep(time.Until(start.Add(11 * time.Second)))
	d.Kill()
	killed := time.Now()
	d.Start()
	d.WaitReady(30 * time.Second)
	t.Logf("killed at %v after the first occurrence; ready again after %v", killed.Sub(start).Round(time.Millisecond), time.Since(killed).Round(time.Millisecond))

	// occurrences up to the cut-off must all arrive
	cutoff := start.Add(24 * time.Second)
	perClock := int(cutoff.Sub(start)/every) + 1
	want := n * perClock
	deadline := time.Now().Add(time.Until(cutoff) + 30*time.Second)
	type occ struct {
		id int64
		ms int64
	}
	var got map[occ]int
	var dup, early, offSchedule, badHeader int
	for {
		got = map[occ]int{}
		dup, early, offSchedule, badHeader = 0, 0, 0, 0
		for _, r := range cons.Rings() {
			idText, msText, ok := strings.Cut(r.Delivery.MessageId, ":")
			id, err1 := strconv.ParseInt(idText, 10, 64)
			ms, err2 := strconv.ParseInt(msText, 10, 64)
			if !ok || err1 != nil || err2 != nil || !ids[id] {
				t.Fatalf("message_id %q is not <id>:<occurrence ms> of one of the clocks", r.Delivery.MessageId)
			}
			at := time.UnixMilli(ms).UTC()
			if h, _ := r.Delivery.Headers["x-clock-occurrence"].(string); h != at.Format(httpapi.TimeFormat) {
				badHeader++
			}
			if r.Received.Before(at) {
				early++
			}
			if at.Before(start) || at.Sub(start)%every != 0 {
				offSchedule++
			}
			o := occ{id, ms}
			if got[o]++; got[o] == 2 {
				dup++
			}
		}
		complete := 0
		for o := range got {
			if !time.UnixMilli(o.ms).After(cutoff) {
				complete++
			}
		}
		if complete >= want || time.Now().After(deadline) {
			t.Logf("%d of %d occurrences up to the cut-off arrived (%d messages in all, %d occurrences twice with the same message_id)",
				complete, want, len(cons.Rings()), dup)
			if complete < want {
				var missing []string
				for id := range ids {
					for k := range perClock {
						ms := start.Add(time.Duration(k) * every).UnixMilli()
						if got[occ{id, ms}] == 0 && len(missing) < 10 {
							missing = append(missing, fmt.Sprintf("%d:%d", id, ms))
						}
					}
				}
				t.Errorf("%d occurrences lost, e.g. %v", want-complete, missing)
			}
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if early+offSchedule+badHeader > 0 {
		t.Errorf("%d rings before their occurrence, %d off the schedule, %d without the right x-clock-occurrence header", early, offSchedule, badHeader)
	}
	// the row moved on past the cut-off (pending, or firing on its next
	// occurrence: claimed a little ahead of it)
	c := getClock(t, d, "rec", "r-007")
	if (c.Status != "pending" && c.Status != "firing") || c.Occurrences < perClock-1 || c.OccurrenceAt == nil {
		t.Errorf("clock after the run: %+v", c)
	}
}

// An occurrence the broker returns (no queue bound) is a failed attempt of
// that occurrence, matched by its "<id>:<ms>" message_id: it never counts
// as rung, and it is given up at its occurrence_deadline. A clock with
// max_occurrences 3 rings exactly three occurrences, each once, leaves
// one history row per occurrence and finishes rung.
func TestRecurringReturnedAndFinished(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	d := testenv.StartClockd(t, e.vars(map[string]string{"CLOCKD_RETRY_MIN": "100ms"}))
	cons := testenv.Consume(t, e.AMQP, e.Exchange, "fin")
	testenv.BindQueue(t, e.AMQP, e.Exchange, "other") // the exchange exists; nothing is bound for "gone"
	create := func(app string, sched map[string]any) httpapi.Clock {
		var c httpapi.Clock
		code, err := d.Do(context.Background(), "POST", "/v1/clocks", map[string]any{
			"application": app, "business_id": "r", "payload": "{}", "schedule": sched}, &c)
		if err != nil || code != http.StatusCreated {
			t.Fatalf("create %s: %d %v", app, code, err)
		}
		return c
	}
	gone := create("gone", map[string]any{"every": "1s", "occurrence_deadline": "1500ms"})
	fin := create("fin", map[string]any{"every": "1s", "max_occurrences": 3})

	c := waitClock(t, d, "fin", "r", 20*time.Second, "finished", func(c httpapi.Clock) bool { return c.Status == "rung" })
	if c.Occurrences != 3 {
		t.Errorf("finished after %d occurrences, want 3", c.Occurrences)
	}
	time.Sleep(2 * time.Second) // nothing more rings
	var ids []string
	for _, r := range cons.Rings() {
		ids = append(ids, r.Delivery.MessageId)
	}
	if len(ids) != 3 || ids[0] == ids[1] || ids[1] == ids[2] || !strings.HasPrefix(ids[0], strconv.FormatInt(fin.ID, 10)+":") {
		t.Errorf("messages %v, want three distinct <id>:<ms> of clock %d", ids, fin.ID)
	}
	db := clusterDB(t, e)
	var occ, rung int
	if err := db.QueryRow("SELECT COUNT(*), SUM(status = 'rung') FROM clock_history WHERE id = ? AND occurrence_of = id", fin.ID).Scan(&occ, &rung); err != nil {
		t.Fatal(err)
	}
	if occ != 3 || rung != 3 {
		t.Errorf("history holds %d occurrence rows (%d rung), want 3", occ, rung)
	}

	g := getClock(t, d, "gone", "r")
	// pending between attempts, or firing one (a retry)
	if g.Occurrences != 0 || (g.Status != "pending" && g.Status != "firing") || g.LastError == nil || *g.LastError == "" {
		t.Errorf("clock with no queue: %+v", g)
	}
	var expired int
	if err := db.QueryRow("SELECT COUNT(*) FROM clock_history WHERE id = ? AND status = 'expired'", gone.ID).Scan(&expired); err != nil {
		t.Fatal(err)
	}
	if expired == 0 {
		t.Errorf("no occurrence of the unroutable clock was given up at its deadline")
	}
}

// A recurring clock whose last occurrence was given up at its
// occurrence_deadline finishes expired, and can be replayed (SPEC): the
// replay rings that occurrence now (its message_id unchanged), and the
// deadline counts from the replay. Counted from the occurrence's time, it
// had passed: the replay answered 200 and the clock expired again, never
// delivered.
func TestReplayOfAnExpiredRecurringClockRings(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	d := testenv.StartClockd(t, e.vars(map[string]string{"CLOCKD_RETRY_MIN": "200ms", "CLOCKD_RETRY_MAX": "400ms"}))
	ctx := context.Background()
	const app, bid = "recexp", "r-1"
	start := time.Now().Add(time.Second).UTC().Truncate(time.Millisecond)
	// one occurrence only (end = start), given up 1 s after its time; no
	// queue bound yet, so every attempt is unroutable
	body := map[string]any{"application": app, "business_id": bid, "payload": "{}",
		"schedule": map[string]any{"every": "1s", "start": start.Format(time.RFC3339Nano),
			"end": start.Format(time.RFC3339Nano), "occurrence_deadline": "1s"}}
	var c httpapi.Clock
	if code, err := d.Do(ctx, "POST", "/v1/clocks", body, &c); err != nil || code != http.StatusCreated {
		t.Fatalf("create: %d %v", code, err)
	}
	waitClock(t, d, app, bid, 15*time.Second, "expired", func(c httpapi.Clock) bool { return c.Status == "expired" })

	// replayed after the occurrence's deadline, as an operator would
	time.Sleep(time.Until(start.Add(1500 * time.Millisecond)))
	cons := testenv.Consume(t, e.AMQP, e.Exchange, app)
	var rc httpapi.Clock
	code, err := d.Do(ctx, "POST", clockPath(app, bid)+"/replay", nil, &rc)
	if err != nil || code != http.StatusOK || rc.Status != "pending" {
		t.Fatalf("replay: %d %v status %q", code, err, rc.Status)
	}
	if !cons.WaitDistinct(1, 5*time.Second) {
		after := getClock(t, d, app, bid)
		le := "none"
		if after.LastError != nil {
			le = *after.LastError
		}
		t.Fatalf("the replayed clock was never delivered; it is now %s, last_error %q", after.Status, le)
	}
	want := strconv.FormatInt(c.ID, 10) + ":" + strconv.FormatInt(start.UnixMilli(), 10)
	if id := cons.Rings()[0].Delivery.MessageId; id != want {
		t.Errorf("replayed ring's message_id %s, want the occurrence's %s", id, want)
	}
	waitClock(t, d, app, bid, 5*time.Second, "rung after its replayed last occurrence", func(c httpapi.Clock) bool { return c.Status == "rung" })
}
