package console

import (
	"crypto/rand"
	"encoding/base64"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/clockd/clockd/internal/auth"
	"github.com/clockd/clockd/internal/testenv"
)

// While MySQL does not answer, the console's requests that carry a session
// cookie, and its logins, write a few log lines, not one each (found by
// review: one WARN line each). Anyone can send them: a session cookie is 32
// random bytes in base64url (no secret needed to forge one that is looked
// up), and the login form's CSRF token comes with the login page; a tab
// that reloads or a live tail that reconnects sends them too.
func TestConsoleOutageDoesNotFloodTheLog(t *testing.T) {
	var logs testenv.SyncBuffer
	srv, c := outageConsole(t, slog.New(slog.NewJSONHandler(&logs, nil)))

	const n = 200
	// Pages and the tail's stream with a made-up session cookie.
	for i := range n {
		var b [32]byte
		_, _ = rand.Read(b[:])
		path := []string{"/ui/", "/ui/cluster", "/ui/tail/events?app=x"}[i%3]
		req, _ := http.NewRequest("GET", srv.URL+path, nil)
		req.AddCookie(&http.Cookie{Name: sessionCookie, Value: base64.RawURLEncoding.EncodeToString(b[:])})
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusServiceUnavailable {
			t.Fatalf("GET %s with a made-up session during the outage: %d, want 503", path, resp.StatusCode)
		}
	}
	// Logins with a well-formed token that cannot be checked.
	csrf := loginCSRF(t, c, srv.URL)
	token := auth.SecretPrefix + strings.Repeat("a", 43)
	for range n {
		resp, err := c.PostForm(srv.URL+"/ui/login", url.Values{"csrf": {csrf}, "token": {token}})
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusServiceUnavailable {
			t.Fatalf("login during the outage: %d, want 503", resp.StatusCode)
		}
	}
	out := logs.String()
	if got := strings.Count(out, `"level":"WARN"`) + strings.Count(out, `"level":"ERROR"`); got > 10 {
		t.Errorf("%d console requests during a MySQL outage wrote %d WARN/ERROR lines; want a few at most (rate-limited as the API's failures and the console's refused logins are). First lines:\n%.600s",
			2*n, got, out)
	}
}
