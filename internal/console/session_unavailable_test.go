package console

import (
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/clockd/clockd/internal/alarm"
	"github.com/clockd/clockd/internal/auth"
)

// The tail shows the first PayloadShown bytes of a text payload, cut where
// a character starts: cut inside one, the text was not valid UTF-8 and
// the tail showed no payload at all.
func TestTailShowsLongNonASCIIPayloads(t *testing.T) {
	body := `{"note":"` + strings.Repeat("€", 300) + `"}` // 911 bytes of valid UTF-8
	r := ringOf(amqp.Delivery{Body: []byte(body), ContentType: "application/json", RoutingKey: "shop"}, testNow)
	if r.Payload == "" {
		t.Fatalf("a %d-byte UTF-8 JSON payload is shown as empty in the tail (cut at %d bytes inside a character)", len(body), PayloadShown)
	}
	if !utf8.ValidString(r.Payload) || !strings.HasPrefix(body, r.Payload) {
		t.Errorf("shown payload %q is not a prefix of the payload", r.Payload)
	}
}

var testNow = time.Date(2026, 11, 24, 10, 0, 0, 0, time.UTC)

// unavailableAuth is the authenticator while MySQL does not answer: every
// token of the database is "unavailable", not unknown.
type unavailableAuth struct{}

func (unavailableAuth) Authenticate(context.Context, string) (auth.Principal, error) {
	return auth.Principal{}, fmt.Errorf("look up token: %w: dial tcp 127.0.0.1:3306: connection refused", alarm.ErrUnavailable)
}

func (unavailableAuth) AuthenticateHash(ctx context.Context, _ [32]byte) (auth.Principal, error) {
	return unavailableAuth{}.Authenticate(ctx, "")
}

// unavailableSessions is the session store while MySQL does not answer.
type unavailableSessions struct{ memSessions }

func (*unavailableSessions) Session(context.Context, [32]byte) ([32]byte, time.Time, error) {
	return [32]byte{}, time.Time{}, fmt.Errorf("read session: %w: dial tcp 127.0.0.1:3306: connection refused", alarm.ErrUnavailable)
}

// While MySQL does not answer, the authenticator says so
// (alarm.ErrUnavailable): the console answers 503 saying the database is
// not answering, instead of sending a logged-in operator to the login page
// and telling them their token is not valid.
func TestLoginDuringDatabaseOutageSaysSo(t *testing.T) {
	srv, c := outageConsole(t, nil)
	csrf := loginCSRF(t, c, srv.URL)
	token := auth.SecretPrefix + strings.Repeat("a", 43)
	resp, err := c.PostForm(srv.URL+"/ui/login", url.Values{"csrf": {csrf}, "token": {token}, "next": {"/ui/"}})
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || strings.Contains(string(body), "not a valid token") {
		t.Errorf("login while the token store is unavailable: %d %q; want 503 saying the database is unavailable",
			resp.StatusCode, between(string(body), `id="err">`, `<`))
	}
	// An operator already logged in is sent to the login page.
	req, _ := http.NewRequest("GET", srv.URL+"/ui/cluster", nil)
	req.AddCookie(&http.Cookie{Name: sessionCookie, Value: base64.RawURLEncoding.EncodeToString(make([]byte, 32))})
	resp, err = c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode == http.StatusSeeOther && strings.HasPrefix(resp.Header.Get("Location"), "/ui/login") {
		t.Errorf("a logged-in operator is sent to the login page while the token store is unavailable, want 503")
	}
}

// loginCSRF fetches the login page with c (whose jar keeps its cookie)
// and returns the form's CSRF token.
func loginCSRF(t *testing.T, c *http.Client, base string) string {
	t.Helper()
	resp, err := c.Get(base + "/ui/login")
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return between(string(page), `name="csrf" value="`, `"`)
}

func between(s, from, to string) string {
	i := strings.Index(s, from)
	if i < 0 {
		return ""
	}
	s = s[i+len(from):]
	if j := strings.Index(s, to); j >= 0 {
		return s[:j]
	}
	return s
}

// outageConsole serves a console whose database does not answer (logging
// to log; nil: nowhere) and returns a client that keeps cookies and does
// not follow redirects.
func outageConsole(t *testing.T, log *slog.Logger) (*httptest.Server, *http.Client) {
	t.Helper()
	con, err := New(Options{Auth: unavailableAuth{}, Sessions: &unavailableSessions{}, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(con)
	t.Cleanup(srv.Close)
	jar, _ := cookiejar.New(nil)
	return srv, &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}
