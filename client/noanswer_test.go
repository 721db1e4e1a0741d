package client_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"sync/atomic"
	"testing"
	"time"

	"github.com/clockd/clockd/client"
)

// TestCancelCutByDeadlineIsUnavailable: a Cancel whose context deadline
// ends after clockd received it (the caller's timeout: the commonest way
// of getting no answer) may have been applied. Its error matches both
// context.DeadlineExceeded and ErrUnavailable, which tells the caller to
// read the clock; here the clock is cancelled.
func TestCancelCutByDeadlineIsUnavailable(t *testing.T) {
	t.Parallel()
	d := startClockd(t, nil)
	// A proxy that passes each request to clockd and holds the answer of
	// a DELETE 500 ms (a slow network or load balancer).
	u := delayedAnswers(t, d.URL, 500*time.Millisecond)
	c := newClient(t, u)
	ctx := ctxT(t)
	if _, _, err := c.Create(ctx, client.NewClock{Application: "order", BusinessID: "c-1", Payload: "{}", Delay: time.Hour}); err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	_, err := c.Cancel(cctx, "order", "c-1")
	wantErr(t, "Cancel whose answer came after the deadline", err, client.ErrUnavailable)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Cancel cut by its deadline: %v does not match context.DeadlineExceeded", err)
	}
	got, err := c.Get(ctx, "order", "c-1")
	if err != nil {
		t.Fatal(err)
	}
	if got.Status != client.Cancelled {
		t.Errorf("c-1 is %s: want cancelled (clockd received the cancel before the deadline)", got.Status)
	}
}

// delayedAnswers is a reverse proxy to target that holds every answer
// to a DELETE for d after clockd gave it.
func delayedAnswers(t *testing.T, target string, d time.Duration) string {
	t.Helper()
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	rp := httputil.NewSingleHostReverseProxy(u)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec := httptest.NewRecorder()
		rp.ServeHTTP(rec, r.WithContext(context.WithoutCancel(r.Context())))
		if r.Method == http.MethodDelete {
			time.Sleep(d)
		}
		for k, v := range rec.Header() {
			w.Header()[k] = v
		}
		w.WriteHeader(rec.Code)
		_, _ = w.Write(rec.Body.Bytes())
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// TestContextEndWithoutAnswer: which calls cut by their context match
// ErrUnavailable (outcome unknown) besides the context's error. A change
// sent and cut does; a read cut does not (nothing to find out); a call
// whose context had ended before it was sent is not sent and does not
// either.
func TestContextEndWithoutAnswer(t *testing.T) {
	t.Parallel()
	var seen atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen.Add(1)
		_, _ = io.Copy(io.Discard, r.Body) // then a client that goes away ends r.Context()
		// never answers in time
		select {
		case <-r.Context().Done():
		case <-time.After(5 * time.Second):
		}
	}))
	t.Cleanup(srv.Close)
	c := newClient(t, srv.URL, client.WithRetry(client.Retry{Attempts: 4, Min: 10 * time.Millisecond, Max: 20 * time.Millisecond}))
	ctx := ctxT(t)
	cut := func() context.Context {
		cctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
		t.Cleanup(cancel)
		return cctx
	}
	isUnavailable := func(what string, err error, want bool) {
		t.Helper()
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("%s: %v does not match context.DeadlineExceeded", what, err)
		}
		if got := errors.Is(err, client.ErrUnavailable); got != want {
			t.Errorf("%s: %v matches ErrUnavailable: %v, want %v", what, err, got, want)
		}
	}

	seen.Store(0)
	_, _, err := c.Create(cut(), client.NewClock{Application: "order", BusinessID: "x", Payload: "{}", Delay: time.Hour})
	isUnavailable("Create cut by its deadline", err, true)
	if n := seen.Load(); n != 1 {
		t.Errorf("Create cut by its deadline sent %d times, want once (no retry once the context ended)", n)
	}
	_, err = c.Reschedule(cut(), "order", "x", client.Change{Delay: time.Minute})
	isUnavailable("Reschedule cut by its deadline", err, true)
	_, err = c.Pause(cut(), "order", "x")
	isUnavailable("Pause cut by its deadline", err, true)
	res, err := c.CreateBatch(cut(), batchOf("x"))
	if res != nil {
		t.Errorf("CreateBatch cut by its deadline: results %v", res)
	}
	isUnavailable("CreateBatch cut by its deadline", err, true)

	_, err = c.Get(cut(), "order", "x")
	isUnavailable("Get cut by its deadline", err, false)
	_, err = c.ListPage(cut(), client.Query{Application: "order"})
	isUnavailable("ListPage cut by its deadline", err, false)

	// A cause given to the context is kept, and DeadlineExceeded too.
	cause := errors.New("the order service's budget")
	cctx, cancel := context.WithTimeoutCause(ctx, 100*time.Millisecond, cause)
	defer cancel()
	_, err = c.Cancel(cctx, "order", "x")
	isUnavailable("Cancel cut by a deadline with a cause", err, true)
	if !errors.Is(err, cause) {
		t.Errorf("Cancel cut by a deadline with a cause: %v does not match the cause", err)
	}

	// Ended before: not sent.
	seen.Store(0)
	ended, cancel := context.WithTimeout(ctx, time.Nanosecond)
	defer cancel()
	<-ended.Done()
	_, err = c.Cancel(ended, "order", "x")
	isUnavailable("Cancel whose context had ended", err, false)
	if n := seen.Load(); n != 0 {
		t.Errorf("Cancel whose context had ended was sent %d times", n)
	}
}

// TestAttemptTimeout: a server (or a proxy) that takes the request and
// never answers does not hold a call without a context deadline for ever.
// Each attempt ends after Retry.Timeout: a create is repeated, then
// answers ErrUnavailable; a cancel (not repeated) answers ErrUnavailable
// after one attempt, its outcome unknown.
func TestAttemptTimeout(t *testing.T) {
	t.Parallel()
	var requests atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		_, _ = io.Copy(io.Discard, r.Body) // then the server sees the client go
		<-r.Context().Done()               // never answers
	}))
	defer srv.Close()
	c, err := client.New(srv.URL, client.WithRetry(client.Retry{Attempts: 3, Min: time.Millisecond, Max: time.Millisecond, Timeout: 200 * time.Millisecond}))
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, _, err = c.Create(context.Background(), client.NewClock{Application: "order", BusinessID: "t-1", Payload: "{}", Delay: time.Hour})
	wantErr(t, "Create to a server that never answers", err, client.ErrUnavailable)
	if n, took := requests.Load(), time.Since(start); n != 3 || took > 5*time.Second {
		t.Errorf("Create: %d attempts in %v, want 3 of 200 ms each", n, took)
	}
	requests.Store(0)
	_, err = c.Cancel(context.Background(), "order", "t-1")
	wantErr(t, "Cancel to a server that never answers", err, client.ErrUnavailable)
	if n := requests.Load(); n != 1 {
		t.Errorf("Cancel: %d attempts, want 1 (a change is not repeated)", n)
	}
}
