package client_test

import (
	"context"
	"encoding/pem"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/clockd/clockd/client"
	"github.com/clockd/clockd/internal/testenv"
)

// startClockd runs the real clockd binary on the test's own database and
// exchange, with extra environment.
func startClockd(t *testing.T, extra map[string]string) *testenv.Clockd {
	t.Helper()
	amqpURL := testenv.AMQPURL(t)
	exchange := testenv.Name("clock.ring.test-")
	testenv.DeleteExchangeOnCleanup(t, amqpURL, exchange)
	env := map[string]string{
		"CLOCKD_MYSQL_DSN": testenv.MySQLDSN(t), "CLOCKD_AMQP_URL": amqpURL, "CLOCKD_EXCHANGE": exchange,
		"CLOCKD_SHARDS": "4", "CLOCKD_LOG_LEVEL": "warn", "CLOCKD_MYSQL_MAX_OPEN_CONNS": "8",
		"CLOCKD_RETRY_MIN": "50ms", "CLOCKD_RETRY_MAX": "200ms",
	}
	for k, v := range extra {
		env[k] = v
	}
	return testenv.StartClockd(t, env)
}

func newClient(t *testing.T, base string, opts ...client.Option) *client.Client {
	t.Helper()
	c, err := client.New(base, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// wantErr checks err matches kind and no other kind.
func wantErr(t *testing.T, what string, err, kind error) {
	t.Helper()
	kinds := []error{client.ErrInvalid, client.ErrUnauthenticated, client.ErrPermissionDenied, client.ErrNotFound,
		client.ErrConflict, client.ErrOverQuota, client.ErrUnavailable}
	if !errors.Is(err, kind) {
		t.Fatalf("%s: err %v, want %v", what, err, kind)
	}
	for _, k := range kinds {
		if k != kind && errors.Is(err, k) {
			t.Errorf("%s: err %v also matches %v", what, err, k)
		}
	}
}

// TestClientCalls drives every clock call of the client against a real
// clockd: each answer and each error kind it can give without auth.
func TestClientCalls(t *testing.T) {
	t.Parallel()
	d := startClockd(t, nil)
	c := newClient(t, d.URL)
	ctx := ctxT(t)

	ringAt := time.Now().Add(time.Hour).UTC().Truncate(time.Millisecond)
	n := client.NewClock{Application: "order", BusinessID: "o-1", Payload: `{"order":1}`, RingAt: ringAt, MaxAttempts: 3}

	// Create: 201, then 200 for an identical repeat, 409 for other content, 400 for nonsense.
	made, created, err := c.Create(ctx, n)
	if err != nil || !created {
		t.Fatalf("Create: created %v err %v", created, err)
	}
	if made.ID <= 0 || made.Status != client.Pending || !made.RingAt.Equal(ringAt) || made.Payload != `{"order":1}` ||
		made.ContentType != "application/json" || made.MaxAttempts != 3 || made.CreatedAt.IsZero() || !made.RungAt.IsZero() {
		t.Errorf("created clock %+v", made)
	}
	again, created, err := c.Create(ctx, n)
	if err != nil || created || again.ID != made.ID {
		t.Errorf("identical create: created %v id %d err %v, want the same clock, not created", created, again.ID, err)
	}
	other := n
	other.Payload = `{"order":2}`
	_, _, err = c.Create(ctx, other)
	wantErr(t, "create with other content", err, client.ErrConflict)
	var ae *client.Error
	if !errors.As(err, &ae) || ae.Status != 409 || ae.Code != "conflict" || ae.Message == "" {
		t.Errorf("conflict error %#v", ae)
	}
	_, _, err = c.Create(ctx, client.NewClock{Application: "bad app!", BusinessID: "x", Delay: time.Minute})
	wantErr(t, "invalid application", err, client.ErrInvalid)
	_, _, err = c.Create(ctx, client.NewClock{Application: "order", BusinessID: "big", Payload: strings.Repeat("x", 70<<10), Delay: time.Minute})
	wantErr(t, "payload over 64 KiB", err, client.ErrInvalid)

	// Delay: rounds up to the millisecond, counted from receipt.
	before := time.Now()
	dl, _, err := c.Create(ctx, client.NewClock{Application: "order", BusinessID: "o-delay", Delay: 90 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if dl.RingAt.Before(before.Add(90*time.Minute).Truncate(time.Millisecond)) || dl.RingAt.After(time.Now().Add(90*time.Minute+time.Second)) {
		t.Errorf("delay clock rings at %v, want about now+90m", dl.RingAt)
	}

	// Get, and 404.
	got, err := c.Get(ctx, "order", "o-1")
	if err != nil || got.ID != made.ID || !got.RingAt.Equal(ringAt) {
		t.Errorf("Get: %+v %v", got, err)
	}
	_, err = c.Get(ctx, "order", "nope")
	wantErr(t, "get of a missing clock", err, client.ErrNotFound)

	// Reschedule: moves it; payload, max attempts, latest_ring_at set and cleared.
	later := ringAt.Add(time.Hour)
	p := `{"order":1,"v":2}`
	zero := 0
	moved, err := c.Reschedule(ctx, "order", "o-1", client.Change{RingAt: later, Payload: &p, MaxAttempts: &zero, LatestRingAt: later.Add(time.Hour)})
	if err != nil || !moved.RingAt.Equal(later) || moved.Payload != p || moved.MaxAttempts != 0 || !moved.LatestRingAt.Equal(later.Add(time.Hour)) {
		t.Errorf("Reschedule: %+v %v", moved, err)
	}
	moved, err = c.Reschedule(ctx, "order", "o-1", client.Change{ClearLatestRingAt: true, Delay: 2 * time.Hour})
	if err != nil || !moved.LatestRingAt.IsZero() || moved.RingAt.Before(time.Now().Add(119*time.Minute)) {
		t.Errorf("Reschedule clearing latest: %+v %v", moved, err)
	}
	_, err = c.Reschedule(ctx, "order", "nope", client.Change{Delay: time.Hour})
	wantErr(t, "reschedule of a missing clock", err, client.ErrNotFound)

	// Cancel, then 409 on a second cancel and on a reschedule; replay of a pending clock 409.
	_, err = c.Replay(ctx, "order", "o-delay")
	wantErr(t, "replay of a pending clock", err, client.ErrConflict)
	cancelled, err := c.Cancel(ctx, "order", "o-1")
	if err != nil || cancelled.Status != client.Cancelled {
		t.Errorf("Cancel: %+v %v", cancelled, err)
	}
	_, err = c.Cancel(ctx, "order", "o-1")
	wantErr(t, "second cancel", err, client.ErrConflict)
	_, err = c.Reschedule(ctx, "order", "o-1", client.Change{Delay: time.Hour})
	wantErr(t, "reschedule of a cancelled clock", err, client.ErrConflict)
	_, err = c.Cancel(ctx, "order", "nope")
	wantErr(t, "cancel of a missing clock", err, client.ErrNotFound)

	// Replay: a clock dies after one failed attempt (no queue is bound, so
	// the broker returns it); replay makes it pending again.
	if _, _, err := c.Create(ctx, client.NewClock{Application: "unbound", BusinessID: "u-1", Payload: "{}", MaxAttempts: 1}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		cl, err := c.Get(ctx, "unbound", "u-1")
		if err != nil {
			t.Fatal(err)
		}
		if cl.Status == client.Dead {
			if cl.Attempts != 1 || cl.LastError == "" {
				t.Errorf("dead clock %+v", cl)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("clock not dead after 30s: %+v", cl)
		}
		time.Sleep(100 * time.Millisecond)
	}
	replayed, err := c.Replay(ctx, "unbound", "u-1")
	if err != nil || replayed.Status != client.Pending {
		t.Errorf("Replay: %+v %v", replayed, err)
	}
	_, err = c.Replay(ctx, "unbound", "nope")
	wantErr(t, "replay of a missing clock", err, client.ErrNotFound)

	// CreateBatch: one result per clock, in order, each with its own outcome.
	res, err := c.CreateBatch(ctx, []client.NewClock{
		{Application: "order", BusinessID: "b-1", Payload: "{}", Delay: time.Hour},
		{Application: "order", BusinessID: "o-delay", Payload: "other", Delay: time.Hour},
		{Application: "", BusinessID: "b-3", Delay: time.Hour},
		{Application: "order", BusinessID: "b-1", Payload: "{}", Delay: time.Hour},
	})
	if err != nil || len(res) != 4 {
		t.Fatalf("CreateBatch: %d results, %v", len(res), err)
	}
	if res[0].Err != nil || !res[0].Created || res[0].Clock.BusinessID != "b-1" {
		t.Errorf("batch[0] %+v", res[0])
	}
	wantErr(t, "batch[1]", res[1].Err, client.ErrConflict)
	wantErr(t, "batch[2]", res[2].Err, client.ErrInvalid)
	if res[3].Err != nil || res[3].Created || res[3].Clock.ID != res[0].Clock.ID {
		t.Errorf("batch[3] (identical to batch[0]) %+v", res[3])
	}
	if _, err := c.CreateBatch(ctx, make([]client.NewClock, client.MaxBatch+1)); err == nil {
		t.Error("a batch over MaxBatch was sent")
	}

	// Recurring clocks: a schedule, its occurrences, pause and resume, the
	// recurring filter of lists.
	start := time.Now().Add(time.Hour).UTC().Truncate(time.Second)
	rc, created, err := c.Create(ctx, client.NewClock{Application: "report", BusinessID: "hourly", Payload: "{}",
		Schedule: &client.Schedule{Every: time.Hour, Start: start, MaxOccurrences: 48, Misfire: "catch_up", CatchUpLimit: 3,
			OccurrenceDeadline: 5 * time.Minute}})
	if err != nil || !created {
		t.Fatalf("create recurring: %v", err)
	}
	if s := rc.Schedule; s == nil || s.Every != time.Hour || !s.Start.Equal(start) || s.MaxOccurrences != 48 ||
		s.Misfire != "catch_up" || s.CatchUpLimit != 3 || s.OccurrenceDeadline != 5*time.Minute || rc.Paused ||
		!rc.OccurrenceAt.Equal(start) {
		t.Errorf("recurring clock %+v schedule %+v", rc, rc.Schedule)
	}
	got, err = c.Get(ctx, "report", "hourly")
	if err != nil || len(got.NextOccurrences) != 5 || !got.NextOccurrences[1].Equal(start.Add(time.Hour)) {
		t.Errorf("Get of a recurring clock: next occurrences %v, %v", got.NextOccurrences, err)
	}
	if p, err := c.Pause(ctx, "report", "hourly"); err != nil || !p.Paused {
		t.Errorf("Pause: %+v %v", p, err)
	}
	_, err = c.Pause(ctx, "report", "hourly")
	wantErr(t, "second pause", err, client.ErrConflict)
	if r, err := c.Resume(ctx, "report", "hourly"); err != nil || r.Paused {
		t.Errorf("Resume: %+v %v", r, err)
	}
	_, err = c.Resume(ctx, "report", "hourly")
	wantErr(t, "resume of a running clock", err, client.ErrConflict)
	_, err = c.Pause(ctx, "order", "o-delay")
	wantErr(t, "pause of a one-shot clock", err, client.ErrConflict)
	_, err = c.Pause(ctx, "report", "nope")
	wantErr(t, "pause of a missing clock", err, client.ErrNotFound)
	moved, err = c.Reschedule(ctx, "report", "hourly", client.Change{Schedule: &client.Schedule{Cron: "0 2 * * *", TimeZone: "Europe/Berlin"}})
	if err != nil || moved.Schedule == nil || moved.Schedule.Cron != "0 2 * * *" || moved.Schedule.TimeZone != "Europe/Berlin" {
		t.Errorf("Reschedule to a cron schedule: %+v %v", moved.Schedule, err)
	}
	_, _, err = c.Create(ctx, client.NewClock{Application: "report", BusinessID: "bad", Schedule: &client.Schedule{Cron: "not cron"}})
	wantErr(t, "create with a bad cron", err, client.ErrInvalid)
	yes, no := true, false
	for q, want := range map[*bool][]string{&yes: {"hourly"}, &no: {"b-1", "o-delay"}} {
		var ids []string
		for cl, err := range c.List(ctx, client.Query{Recurring: q}) {
			if err != nil {
				t.Fatal(err)
			}
			if cl.Status == client.Pending && cl.Application != "unbound" {
				ids = append(ids, cl.BusinessID)
			}
		}
		if fmt.Sprint(ids) != fmt.Sprint(want) {
			t.Errorf("list recurring=%v: pending %v, want %v", *q, ids, want)
		}
	}
}

// TestClientListIteratesPages lists 25 clocks 7 at a time: every clock
// once, newest first, across 4 pages; an early break stops reading pages.
func TestClientListIteratesPages(t *testing.T) {
	t.Parallel()
	d := startClockd(t, nil)
	var pages atomic.Int32
	// Count the list requests on their way to clockd.
	proxy := countingProxy(t, d.URL, func(r *http.Request) {
		if r.URL.Path == "/v1/clocks" && r.Method == "GET" {
			pages.Add(1)
		}
	})
	c := newClient(t, proxy)
	ctx := ctxT(t)
	var batch []client.NewClock
	for i := range 25 {
		batch = append(batch, client.NewClock{Application: "list", BusinessID: fmt.Sprintf("l-%02d", i), Payload: "{}", Delay: time.Hour})
	}
	batch = append(batch, client.NewClock{Application: "other", BusinessID: "x", Payload: "{}", Delay: time.Hour})
	if _, err := c.CreateBatch(ctx, batch); err != nil {
		t.Fatal(err)
	}
	var ids []int64
	for cl, err := range c.List(ctx, client.Query{Application: "list", Limit: 7}) {
		if err != nil {
			t.Fatal(err)
		}
		if cl.Application != "list" {
			t.Errorf("clock of %q in a list of list", cl.Application)
		}
		ids = append(ids, cl.ID)
	}
	if len(ids) != 25 {
		t.Fatalf("listed %d clocks, want 25", len(ids))
	}
	for i := 1; i < len(ids); i++ {
		if ids[i] >= ids[i-1] {
			t.Fatalf("not newest first at %d: %v", i, ids)
		}
	}
	if got := pages.Load(); got != 4 {
		t.Errorf("%d pages read, want 4 (7+7+7+4)", got)
	}
	pages.Store(0)
	n := 0
	for _, err := range c.List(ctx, client.Query{Application: "list", Limit: 7, NoPayload: true}) {
		if err != nil {
			t.Fatal(err)
		}
		if n++; n == 3 {
			break
		}
	}
	if got := pages.Load(); got != 1 {
		t.Errorf("a loop that stopped after 3 clocks read %d pages, want 1", got)
	}
	page, err := c.ListPage(ctx, client.Query{Application: "list", Status: client.Pending, Limit: 10})
	if err != nil || len(page.Clocks) != 10 || page.Next == "" {
		t.Errorf("ListPage: %d clocks, next %q, %v", len(page.Clocks), page.Next, err)
	}
	for _, err := range c.List(ctx, client.Query{Status: "nonsense"}) {
		wantErr(t, "list with a bad status", err, client.ErrInvalid)
	}
}

// countingProxy forwards to target, calling see on each request first.
func countingProxy(t *testing.T, target string, see func(*http.Request)) string {
	t.Helper()
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	rp := httputil.NewSingleHostReverseProxy(u)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		see(r)
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// TestClientRetries puts a proxy in front of clockd that answers 503 (or
// drops the connection) to the first requests: creates and reads are
// retried and succeed, with one clock made; a cancel is not retried.
func TestClientRetries(t *testing.T) {
	t.Parallel()
	d := startClockd(t, nil)
	u, _ := url.Parse(d.URL)
	rp := httputil.NewSingleHostReverseProxy(u)
	var (
		fail  atomic.Int32 // requests still to fail
		drop  atomic.Bool  // fail by dropping the connection instead of 503
		seen  atomic.Int32
		after atomic.Bool // pass the request to clockd, then fail its answer
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen.Add(1)
		if fail.Add(-1) >= 0 {
			if after.Load() {
				// The change is made, the answer is lost: the case that
				// makes idempotency matter.
				rec := httptest.NewRecorder()
				rp.ServeHTTP(rec, r)
			}
			if drop.Load() {
				conn, _, err := http.NewResponseController(w).Hijack()
				if err == nil {
					conn.Close()
				}
				return
			}
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprint(w, `{"error":{"code":"unavailable","message":"try later"}}`)
			return
		}
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	c := newClient(t, srv.URL, client.WithRetry(client.Retry{Attempts: 4, Min: 10 * time.Millisecond, Max: 50 * time.Millisecond}))
	ctx := ctxT(t)

	reset := func(n int32, dropConn, passFirst bool) {
		fail.Store(n)
		drop.Store(dropConn)
		after.Store(passFirst)
		seen.Store(0)
	}

	reset(2, false, false)
	cl, created, err := c.Create(ctx, client.NewClock{Application: "order", BusinessID: "r-1", Payload: "{}", Delay: time.Hour})
	if err != nil || !created || seen.Load() != 3 {
		t.Fatalf("create through two 503s: created %v err %v after %d requests, want created after 3", created, err, seen.Load())
	}

	// Applied, answer lost twice (once dropped): the retry answers 200 with
	// the same clock, and there is one clock.
	reset(2, true, true)
	cl2, created, err := c.Create(ctx, client.NewClock{Application: "order", BusinessID: "r-2", Payload: "{}", RingAt: time.Now().Add(time.Hour)})
	if err != nil || created || seen.Load() != 3 {
		t.Fatalf("create whose answers were lost: created %v err %v after %d requests, want 200 after 3", created, err, seen.Load())
	}
	reset(0, false, false)
	n := 0
	for x, err := range c.List(ctx, client.Query{Application: "order"}) {
		if err != nil {
			t.Fatal(err)
		}
		if x.BusinessID == "r-2" {
			n++
			if x.ID != cl2.ID {
				t.Errorf("r-2 has id %d, the retried create answered %d", x.ID, cl2.ID)
			}
		}
	}
	if n != 1 {
		t.Errorf("%d clocks r-2, want 1", n)
	}

	// Batch and Get are retried too.
	reset(1, true, false)
	if _, err := c.CreateBatch(ctx, []client.NewClock{{Application: "order", BusinessID: "r-3", Payload: "{}", Delay: time.Hour}}); err != nil || seen.Load() != 2 {
		t.Errorf("batch after a dropped connection: %v after %d requests", err, seen.Load())
	}
	reset(1, false, false)
	if _, err := c.Get(ctx, "order", "r-1"); err != nil || seen.Load() != 2 {
		t.Errorf("get after a 503: %v after %d requests", err, seen.Load())
	}

	// Gives up after Attempts, with ErrUnavailable.
	reset(10, false, false)
	_, _, err = c.Create(ctx, client.NewClock{Application: "order", BusinessID: "r-4", Payload: "{}", Delay: time.Hour})
	wantErr(t, "create through ten 503s", err, client.ErrUnavailable)
	if seen.Load() != 4 {
		t.Errorf("%d attempts, want 4", seen.Load())
	}
	reset(10, true, false)
	_, err = c.Get(ctx, "order", "r-1")
	wantErr(t, "get through dropped connections", err, client.ErrUnavailable)

	// Cancel is not retried: one request, ErrUnavailable, and the clock is
	// still pending.
	reset(1, false, false)
	_, err = c.Cancel(ctx, "order", "r-1")
	wantErr(t, "cancel through a 503", err, client.ErrUnavailable)
	if seen.Load() != 1 {
		t.Errorf("cancel sent %d times, want once", seen.Load())
	}
	reset(1, true, false)
	_, err = c.Reschedule(ctx, "order", "r-1", client.Change{Delay: time.Minute})
	wantErr(t, "reschedule through a dropped connection", err, client.ErrUnavailable)
	if seen.Load() != 1 {
		t.Errorf("reschedule sent %d times, want once", seen.Load())
	}
	reset(0, false, false)
	if got, err := c.Get(ctx, "order", "r-1"); err != nil || got.Status != client.Pending || !got.RingAt.Equal(cl.RingAt) {
		t.Errorf("r-1 after a failed cancel and reschedule: %+v %v", got, err)
	}

	// A cancelled context stops the retries at once.
	reset(10, false, false)
	cctx, cancel := context.WithTimeout(ctx, 30*time.Millisecond)
	defer cancel()
	slow := newClient(t, srv.URL, client.WithRetry(client.Retry{Attempts: 100, Min: time.Second, Max: time.Second}))
	start := time.Now()
	_, _, err = slow.Create(cctx, client.NewClock{Application: "order", BusinessID: "r-5", Payload: "{}", Delay: time.Hour})
	if err == nil || time.Since(start) > 5*time.Second {
		t.Errorf("create with a 30ms context: %v after %v", err, time.Since(start))
	}
}

// TestClientAuthQuotaTLS runs clockd with tokens: the admin calls, each
// auth error kind, the quota error with its Retry-After, and the client
// over HTTPS with a private CA.
func TestClientAuthQuotaTLS(t *testing.T) {
	t.Parallel()
	const admin = "clk_test-admin-token-0123456789abcdef"
	d := startClockd(t, map[string]string{"CLOCKD_AUTH_MODE": "tokens", "CLOCKD_ADMIN_TOKEN": admin, "CLOCKD_AUTH_CACHE_TTL": "200ms"})
	ctx := ctxT(t)
	anon := newClient(t, d.URL)
	_, err := anon.Get(ctx, "order", "x")
	wantErr(t, "no token", err, client.ErrUnauthenticated)
	_, err = newClient(t, d.URL, client.WithToken("clk_wrong")).Get(ctx, "order", "x")
	wantErr(t, "a wrong token", err, client.ErrUnauthenticated)

	ad := newClient(t, d.URL, client.WithToken(admin))
	tok, err := ad.CreateToken(ctx, client.NewToken{Application: "order", Scopes: []string{"read", "write"}, Name: "svc"})
	if err != nil || tok.Secret == "" || tok.Application != "order" || tok.Admin || tok.ID <= 0 {
		t.Fatalf("CreateToken: %+v %v", tok, err)
	}
	ro, err := ad.CreateToken(ctx, client.NewToken{Application: "order", Scopes: []string{"read"}})
	if err != nil {
		t.Fatal(err)
	}
	_, err = ad.CreateToken(ctx, client.NewToken{Application: "order", Scopes: []string{"nonsense"}})
	wantErr(t, "token with a bad scope", err, client.ErrInvalid)
	toks, err := ad.Tokens(ctx, "order")
	if err != nil || len(toks) != 2 || toks[0].Secret != "" {
		t.Errorf("Tokens: %+v %v", toks, err)
	}

	app := newClient(t, d.URL, client.WithToken(tok.Secret))
	if _, _, err := app.Create(ctx, client.NewClock{Application: "order", BusinessID: "a-1", Payload: "{}", Delay: time.Hour}); err != nil {
		t.Fatalf("create with the application's token: %v", err)
	}
	_, _, err = app.Create(ctx, client.NewClock{Application: "member", BusinessID: "a-1", Payload: "{}", Delay: time.Hour})
	wantErr(t, "create for another application", err, client.ErrPermissionDenied)
	_, err = newClient(t, d.URL, client.WithToken(ro.Secret)).Cancel(ctx, "order", "a-1")
	wantErr(t, "cancel with a read token", err, client.ErrPermissionDenied)
	_, err = app.Tokens(ctx, "")
	wantErr(t, "tokens with an application's token", err, client.ErrPermissionDenied)

	// Quota: one live clock at most; the second create is over it.
	q, err := ad.SetQuota(ctx, client.Quota{Application: "order", MaxLiveClocks: 1})
	if err != nil || q.MaxLiveClocks != 1 {
		t.Fatalf("SetQuota: %+v %v", q, err)
	}
	if q, err := ad.Quota(ctx, "order"); err != nil || q.MaxLiveClocks != 1 || q.UpdatedAt == nil {
		t.Errorf("Quota: %+v %v", q, err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, _, err = app.Create(ctx, client.NewClock{Application: "order", BusinessID: "a-2", Payload: "{}", Delay: time.Hour})
		if err != nil || time.Now().After(deadline) {
			break
		}
		// The live count is read at most once a second: an early create may pass.
		if _, err := ad.Cancel(ctx, "order", "a-2"); err != nil {
			t.Fatal(err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	wantErr(t, "create over the quota", err, client.ErrOverQuota)
	var ae *client.Error
	if !errors.As(err, &ae) || ae.RetryAfter <= 0 {
		t.Errorf("over quota without Retry-After: %#v", ae)
	}
	// The same in a batch: the item refused over the quota says when to
	// send it again.
	res, err := app.CreateBatch(ctx, []client.NewClock{{Application: "order", BusinessID: "a-3", Payload: "{}", Delay: time.Hour}})
	if err != nil || len(res) != 1 {
		t.Fatalf("CreateBatch over the quota: %v %v", res, err)
	}
	wantErr(t, "batch item over the quota", res[0].Err, client.ErrOverQuota)
	if !errors.As(res[0].Err, &ae) || ae.RetryAfter <= 0 {
		t.Errorf("batch item over quota without Retry-After: %#v", res[0].Err)
	}

	if raw, err := ad.Cluster(ctx); err != nil || !strings.Contains(string(raw), "instances") {
		t.Errorf("Cluster: %s %v", raw, err)
	}
	if _, err := ad.RevokeToken(ctx, tok.ID); err != nil {
		t.Fatal(err)
	}
	_, err = ad.RevokeToken(ctx, 1<<40)
	wantErr(t, "revoke of a missing token", err, client.ErrNotFound)
	deadline = time.Now().Add(5 * time.Second)
	for {
		_, err = app.Get(ctx, "order", "a-1")
		if errors.Is(err, client.ErrUnauthenticated) || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	wantErr(t, "a revoked token", err, client.ErrUnauthenticated)

	// HTTPS with a private CA (a TLS proxy in front of clockd): trusted
	// with WithCACert, refused without.
	u, _ := url.Parse(d.URL)
	tlsSrv := httptest.NewTLSServer(httputil.NewSingleHostReverseProxy(u))
	t.Cleanup(tlsSrv.Close)
	caPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: tlsSrv.Certificate().Raw})
	secure := newClient(t, tlsSrv.URL, client.WithToken(admin), client.WithCACert(caPEM))
	if got, err := secure.Get(ctx, "order", "a-1"); err != nil || got.BusinessID != "a-1" {
		t.Errorf("Get over HTTPS with the CA: %+v %v", got, err)
	}
	_, err = newClient(t, tlsSrv.URL, client.WithToken(admin), client.WithRetry(client.Retry{Attempts: 1})).Get(ctx, "order", "a-1")
	if err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Errorf("Get over HTTPS without the CA: %v, want a certificate error", err)
	}
	if _, err := client.New(tlsSrv.URL, client.WithCACert([]byte("not pem"))); err == nil {
		t.Error("WithCACert accepted a file without a certificate")
	}
}

func TestNewRefusesBadBaseURLs(t *testing.T) {
	t.Parallel()
	for _, base := range []string{"", "ftp://x", "http://", "http://h:1/?q=1", "http://h:1/#f", "://"} {
		if _, err := client.New(base); err == nil {
			t.Errorf("New(%q) accepted", base)
		}
	}
	for _, base := range []string{"127.0.0.1:8080", "http://h:1", "https://h/prefix/"} {
		if _, err := client.New(base); err != nil {
			t.Errorf("New(%q): %v", base, err)
		}
	}
}
