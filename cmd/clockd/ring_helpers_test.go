package main

// Helpers of the ringing tests (issue 3): create many clocks through the
// batch API, read them back, and judge what a consumer received.

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/clockd/clockd/internal/httpapi"
	"github.com/clockd/clockd/internal/testenv"
)

// ringSpec is a clock to create.
type ringSpec struct {
	App, BusinessID string
	RingAt          time.Time
	Extra           map[string]any // latest_ring_at, max_attempts, ...
}

// spreadSpecs makes n clocks of app ringing evenly over [from, from+spread).
func spreadSpecs(app, prefix string, n int, from time.Time, spread time.Duration) []ringSpec {
	out := make([]ringSpec, n)
	for i := range out {
		at := from.Add(spread * time.Duration(i) / time.Duration(n)).Truncate(time.Millisecond)
		out[i] = ringSpec{App: app, BusinessID: fmt.Sprintf("%s-%05d", prefix, i), RingAt: at}
	}
	return out
}

// postClocks creates the clocks through POST /v1/clocks/batch (1000 per
// request, requests in parallel) and returns them in order. Every create
// must answer 201.
func postClocks(t *testing.T, d *testenv.Clockd, specs []ringSpec) []httpapi.Clock {
	t.Helper()
	out := make([]httpapi.Clock, len(specs))
	errs := make(chan error, len(specs)/1000+1)
	for lo := 0; lo < len(specs); lo += 1000 {
		hi := min(lo+1000, len(specs))
		go func() {
			errs <- func() error {
				body := make([]map[string]any, 0, hi-lo)
				for _, s := range specs[lo:hi] {
					m := map[string]any{
						"application": s.App, "business_id": s.BusinessID,
						"payload": fmt.Sprintf(`{"id":%q}`, s.BusinessID),
						"ring_at": s.RingAt.UTC().Format(time.RFC3339Nano),
					}
					for k, v := range s.Extra {
						m[k] = v
					}
					body = append(body, m)
				}
				var resp struct {
					Results []struct {
						Status int            `json:"status"`
						Clock  *httpapi.Clock `json:"clock"`
						Error  any            `json:"error"`
					} `json:"results"`
				}
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				code, err := d.Do(ctx, "POST", "/v1/clocks/batch", map[string]any{"clocks": body}, &resp)
				if err != nil || code != http.StatusOK || len(resp.Results) != hi-lo {
					return fmt.Errorf("batch create: %d %v (%d results)", code, err, len(resp.Results))
				}
				for i, r := range resp.Results {
					if r.Status != http.StatusCreated || r.Clock == nil {
						return fmt.Errorf("batch create %s: %d %v", specs[lo+i].BusinessID, r.Status, r.Error)
					}
					out[lo+i] = *r.Clock
				}
				return nil
			}()
		}()
	}
	for lo := 0; lo < len(specs); lo += 1000 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// clockPath is the REST path of a clock.
func clockPath(app, bid string) string {
	return "/v1/clocks/" + url.PathEscape(app) + "/" + url.PathEscape(bid)
}

// getClock reads a clock; it must exist.
func getClock(t *testing.T, d *testenv.Clockd, app, bid string) httpapi.Clock {
	t.Helper()
	var c httpapi.Clock
	code, err := d.Do(context.Background(), "GET", clockPath(app, bid), nil, &c)
	if err != nil || code != http.StatusOK {
		t.Fatalf("GET %s/%s: %d %v", app, bid, code, err)
	}
	return c
}

// waitClock polls a clock until cond holds; it fails the test after limit.
func waitClock(t *testing.T, d *testenv.Clockd, app, bid string, limit time.Duration, what string, cond func(httpapi.Clock) bool) httpapi.Clock {
	t.Helper()
	deadline := time.Now().Add(limit)
	for {
		c := getClock(t, d, app, bid)
		if cond(c) {
			return c
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s/%s: not %s after %s: %+v", app, bid, what, limit, c)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// countStatus is how many clocks of app have status (listing, up to 1000).
func countStatus(t *testing.T, d *testenv.Clockd, app, status string) int {
	t.Helper()
	var resp struct {
		Clocks []httpapi.Clock `json:"clocks"`
	}
	code, err := d.Do(context.Background(), "GET", "/v1/clocks?application="+app+"&status="+status+"&limit=1000", nil, &resp)
	if err != nil || code != http.StatusOK {
		t.Fatalf("list %s %s: %d %v", app, status, code, err)
	}
	return len(resp.Clocks)
}

// attemptOf reads the x-clock-attempt header.
func attemptOf(d amqp.Delivery) int {
	switch v := d.Headers["x-clock-attempt"].(type) {
	case int32:
		return int(v)
	case int64:
		return int(v)
	case int:
		return v
	}
	return -1
}

// ringJudge is what a consumer received for a set of created clocks.
type ringJudge struct {
	byID      map[int64]httpapi.Clock
	got       map[int64]int // deliveries per clock id
	lateness  []time.Duration
	early     []string // rang before ring_at
	foreign   []string // a message of no created clock, or with another's identity
	dups      int
	redeliver int
	// firstTwice: clocks delivered twice as attempt 1 (not a broker
	// redelivery); a repeat must say 2 or more.
	firstTwice []string
}

// judge reads what cons received against the created clocks.
func judge(cons *testenv.Consumer, clocks []httpapi.Clock) ringJudge {
	j := ringJudge{byID: map[int64]httpapi.Clock{}, got: map[int64]int{}}
	firsts := map[int64]int{}
	for _, c := range clocks {
		j.byID[c.ID] = c
	}
	for _, r := range cons.Rings() {
		c, ok := j.byID[r.ID]
		ringAt, _ := time.Parse(time.RFC3339Nano, c.RingAt)
		if !ok || r.BusinessID != c.BusinessID || r.Delivery.MessageId != strconv.FormatInt(c.ID, 10) || !r.RingAt.Equal(ringAt) {
			j.foreign = append(j.foreign, fmt.Sprintf("message_id %s business_id %s ring_at %v", r.Delivery.MessageId, r.BusinessID, r.RingAt))
			continue
		}
		j.got[r.ID]++
		if r.Delivery.Redelivered {
			j.redeliver++
		} else if attemptOf(r.Delivery) == 1 {
			if firsts[r.ID]++; firsts[r.ID] == 2 {
				j.firstTwice = append(j.firstTwice, c.BusinessID)
			}
		}
		if j.got[r.ID] > 1 {
			j.dups++
			continue
		}
		if r.Received.Before(r.RingAt) {
			j.early = append(j.early, fmt.Sprintf("%s received %v before ring_at", c.BusinessID, r.RingAt.Sub(r.Received)))
		}
		j.lateness = append(j.lateness, r.Received.Sub(r.RingAt))
	}
	slices.Sort(j.lateness)
	return j
}

// missing lists created clocks never received.
func (j ringJudge) missing() []string {
	var out []string
	for id, c := range j.byID {
		if j.got[id] == 0 {
			out = append(out, c.BusinessID)
		}
	}
	slices.Sort(out)
	return out
}

func (j ringJudge) pct(p float64) time.Duration {
	if len(j.lateness) == 0 {
		return 0
	}
	return j.lateness[min(len(j.lateness)-1, int(p*float64(len(j.lateness))))]
}

func (j ringJudge) String() string {
	return fmt.Sprintf("%d clocks, %d received (%d duplicates, %d redelivered), lateness p50 %v p90 %v p99 %v max %v",
		len(j.byID), len(j.got), j.dups, j.redeliver,
		j.pct(.5).Round(100*time.Microsecond), j.pct(.9).Round(100*time.Microsecond),
		j.pct(.99).Round(100*time.Microsecond), j.pct(1).Round(100*time.Microsecond))
}

// check fails the test for early, foreign or missing rings.
func (j ringJudge) check(t *testing.T) {
	t.Helper()
	if len(j.early) > 0 {
		t.Errorf("%d clocks rang early, e.g. %v", len(j.early), j.early[:min(5, len(j.early))])
	}
	if len(j.foreign) > 0 {
		t.Errorf("%d messages do not match a created clock, e.g. %v", len(j.foreign), j.foreign[:min(5, len(j.foreign))])
	}
	if m := j.missing(); len(m) > 0 {
		t.Errorf("%d clocks never received, e.g. %v", len(m), m[:min(10, len(m))])
	}
	if len(j.firstTwice) > 0 {
		t.Errorf("%d clocks delivered twice with x-clock-attempt 1 (a repeat must say 2 or more), e.g. %v",
			len(j.firstTwice), j.firstTwice[:min(5, len(j.firstTwice))])
	}
}

// waitReceived waits until every clock was received at least once.
func waitReceived(cons *testenv.Consumer, clocks []httpapi.Clock, limit time.Duration) bool {
	deadline := time.Now().Add(limit)
	for {
		n := 0
		for _, c := range clocks {
			if cons.Count(c.ID) > 0 {
				n++
			}
		}
		if n == len(clocks) {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// latest is the latest ring_at of the clocks.
func latest(clocks []httpapi.Clock) time.Time {
	var l time.Time
	for _, c := range clocks {
		if at, _ := time.Parse(time.RFC3339Nano, c.RingAt); at.After(l) {
			l = at
		}
	}
	return l
}
