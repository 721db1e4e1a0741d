package client_test

import (
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"sync/atomic"
	"testing"
	"time"

	"github.com/clockd/clockd/client"
)

// TestProxyGatewayErrorsAreUnavailable: behind a reverse proxy (the
// path-prefix set-up New documents), a clockd that is restarting or slow
// shows as the proxy's 502 Bad Gateway or 504 Gateway Timeout, with the
// proxy's own error page. To the application that is "no answer from
// clockd": a Create should be retried as after a cut connection, and a
// Cancel whose answer was a 504 (the proxy gave up waiting, clockd may
// have applied it) should match ErrUnavailable, which the package doc
// tells callers to test before reading the clock. Neither happened: the
// error matched no kind, and the Create was not retried (found by review).
func TestProxyGatewayErrorsAreUnavailable(t *testing.T) {
	t.Parallel()
	d := startClockd(t, nil)
	ctx := ctxT(t)
	u, _ := url.Parse(d.URL)
	rp := httputil.NewSingleHostReverseProxy(u)
	var (
		bad     atomic.Int32 // requests still to answer 502 without passing them on
		timeout atomic.Int32 // requests still to pass on, then answer 504
		seen    atomic.Int32
	)
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen.Add(1)
		if bad.Add(-1) >= 0 {
			w.Header().Set("Content-Type", "text/html")
			w.WriteHeader(http.StatusBadGateway)
			fmt.Fprint(w, "<html><body><h1>502 Bad Gateway</h1>nginx</body></html>")
			return
		}
		if timeout.Add(-1) >= 0 {
			rp.ServeHTTP(httptest.NewRecorder(), r) // clockd applies it; the answer is lost
			w.Header().Set("Content-Type", "text/html")
			w.WriteHeader(http.StatusGatewayTimeout)
			fmt.Fprint(w, "<html><body><h1>504 Gateway Time-out</h1>nginx</body></html>")
			return
		}
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(front.Close)
	c := newClient(t, front.URL+"/", client.WithRetry(client.Retry{Attempts: 4, Min: 10 * time.Millisecond, Max: 50 * time.Millisecond}))
	direct := newClient(t, d.URL)

	// One 502 while clockd restarts: the create is not retried.
	bad.Store(1)
	seen.Store(0)
	_, _, err := c.Create(ctx, client.NewClock{Application: "order", BusinessID: "gw-1", Payload: "{}", Delay: time.Hour})
	if err != nil {
		t.Errorf("Create through one 502 of the proxy: %v after %d request(s); want it retried like a cut connection (errors.Is ErrUnavailable: %v)",
			err, seen.Load(), errors.Is(err, client.ErrUnavailable))
	}

	// A cancel applied by clockd whose answer the proxy replaced by a 504.
	if _, _, err := direct.Create(ctx, client.NewClock{Application: "order", BusinessID: "gw-2", Payload: "{}", Delay: time.Hour}); err != nil {
		t.Fatal(err)
	}
	timeout.Store(1)
	_, err = c.Cancel(ctx, "order", "gw-2")
	now, _ := direct.Get(ctx, "order", "gw-2")
	if err == nil || !errors.Is(err, client.ErrUnavailable) {
		t.Errorf("Cancel answered 504 by the proxy (the clock is now %s): err %v, errors.Is(err, ErrUnavailable) = %v; want an outcome-unknown ErrUnavailable",
			now.Status, err, errors.Is(err, client.ErrUnavailable))
	}
}
