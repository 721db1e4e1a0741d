package client_test

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/clockd/clockd/client"
)

// redirectingFront answers every request with a 301 to the same path on
// target: what a load balancer that moves plain http to https (or an old
// host name to the new one) does in front of clockd.
func redirectingFront(t *testing.T, target string, code int) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, target+r.URL.RequestURI(), code)
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// TestChangesThroughARedirectAreRefusedNotReportedDone: behind a front that
// answers 301 (http -> https, an old host name), net/http followed the
// redirect of a POST, DELETE or PATCH as a GET without a body, and the
// client took the GET's 200 for the change's answer: Create said "an
// identical clock existed" and returned an empty clock although none was
// made, and Cancel returned without error while the clock stayed pending
// and rang (found by review). A redirect is now an error, never followed.
func TestChangesThroughARedirectAreRefusedNotReportedDone(t *testing.T) {
	t.Parallel()
	d := startClockd(t, nil)
	ctx := ctxT(t)
	direct := newClient(t, d.URL)
	front := newClient(t, redirectingFront(t, d.URL, http.StatusMovedPermanently))

	var failures []string

	// Create through the front.
	cl, created, err := front.Create(ctx, client.NewClock{Application: "order", BusinessID: "rd-1", Payload: "{}", Delay: time.Hour})
	if err == nil {
		if _, gerr := direct.Get(ctx, "order", "rd-1"); gerr != nil {
			failures = append(failures, "Create through a 301 returned no error (created="+
				strconv.FormatBool(created)+", clock id "+strconv.FormatInt(cl.ID, 10)+") but no clock was made: Get says "+gerr.Error())
		}
	}

	// Cancel through the front.
	if _, _, err := direct.Create(ctx, client.NewClock{Application: "order", BusinessID: "rd-2", Payload: "{}", Delay: time.Hour}); err != nil {
		t.Fatal(err)
	}
	got, err := front.Cancel(ctx, "order", "rd-2")
	if err == nil {
		now, gerr := direct.Get(ctx, "order", "rd-2")
		if gerr != nil || now.Status != client.Cancelled {
			failures = append(failures, "Cancel through a 301 returned no error (answered status "+string(got.Status)+
				") but the clock is "+string(now.Status)+": it will ring")
		}
	}

	// Reschedule through the front.
	got, err = front.Reschedule(ctx, "order", "rd-2", client.Change{Delay: 2 * time.Hour})
	if err == nil {
		now, _ := direct.Get(ctx, "order", "rd-2")
		if now.RingAt.Before(time.Now().Add(90 * time.Minute)) {
			failures = append(failures, "Reschedule through a 301 returned no error but ring_at is still "+
				now.RingAt.Format(time.RFC3339))
		}
	}
	for _, f := range failures {
		t.Error(f)
	}
	// each change answers an error naming the redirect, of no kind: a
	// 307 or 308 (which would keep the method) is not followed either
	for _, code := range []int{http.StatusMovedPermanently, http.StatusFound, http.StatusTemporaryRedirect, http.StatusPermanentRedirect} {
		front := newClient(t, redirectingFront(t, d.URL, code))
		_, _, err := front.Create(ctx, client.NewClock{Application: "order", BusinessID: "rd-3", Payload: "{}", Delay: time.Hour})
		var ce *client.Error
		if !errors.As(err, &ce) || ce.Status != code || !strings.Contains(ce.Error(), "redirected to") ||
			errors.Is(err, client.ErrUnavailable) || errors.Is(err, client.ErrConflict) {
			t.Errorf("Create through a %d: %v, want an *Error %d naming the redirect, matching no kind", code, err, code)
		}
		if _, err := direct.Get(ctx, "order", "rd-3"); !errors.Is(err, client.ErrNotFound) {
			t.Errorf("after a create through a %d: Get says %v, want not found", code, err)
		}
	}
}
