package console_test

import (
	"context"
	"crypto/sha256"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/clockd/clockd/internal/auth"
	"github.com/clockd/clockd/internal/console"
)

// oneAdmin accepts one admin secret.
type oneAdmin string

func (a oneAdmin) Authenticate(_ context.Context, header string) (auth.Principal, error) {
	if header == "Bearer "+string(a) {
		return auth.Principal{Admin: true}, nil
	}
	return auth.Principal{}, auth.ErrUnauthenticated
}

func (a oneAdmin) AuthenticateHash(_ context.Context, hash [32]byte) (auth.Principal, error) {
	if hash == sha256.Sum256([]byte(a)) {
		return auth.Principal{Admin: true}, nil
	}
	return auth.Principal{}, auth.ErrUnauthenticated
}

// adminConsole serves a console whose one admin token is secret, until the
// test ends.
func adminConsole(t *testing.T, secret string) *httptest.Server {
	t.Helper()
	con, err := console.New(console.Options{Auth: oneAdmin(secret)})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(con)
	t.Cleanup(srv.Close)
	return srv
}

// cookieClient is a client with a cookie jar that shows redirects instead of
// following them.
func cookieClient() *http.Client {
	jar, _ := cookiejar.New(nil)
	return &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

// logIn posts the console's login form at base with secret, as the
// browser c does, and returns the answer's status and session cookie (nil
// when it set none).
func logIn(t *testing.T, c *http.Client, base, secret string) (int, *http.Cookie) {
	t.Helper()
	resp, err := c.Get(base + "/ui/login")
	if err != nil {
		t.Fatal(err)
	}
	csrf := formValue(t, readAll(resp), "csrf")
	resp, err = c.PostForm(base+"/ui/login", url.Values{"csrf": {csrf}, "token": {secret}, "next": {"/ui/"}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	for _, ck := range resp.Cookies() {
		if ck.Name == "clockd_console" && ck.Value != "" {
			return resp.StatusCode, ck
		}
	}
	return resp.StatusCode, nil
}

// login logs in to the console at base with secret and returns the
// session cookie.
func login(t *testing.T, base, secret string) *http.Cookie {
	t.Helper()
	code, ck := logIn(t, cookieClient(), base, secret)
	if ck == nil {
		t.Fatalf("login: %d and no session cookie", code)
	}
	return ck
}

// tailStatus is the status of the tail's event stream asked without an
// app with cookie ck: 400 with a session, 401 without one.
func tailStatus(t *testing.T, base string, ck *http.Cookie) int {
	t.Helper()
	req, _ := http.NewRequest("GET", base+"/ui/tail/events", nil)
	req.AddCookie(&http.Cookie{Name: ck.Name, Value: ck.Value})
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// CLOCKD_ADMIN_TOKEN may be any string of 16 characters or more, and the
// console stored the token itself as the session cookie's value: net/http
// drops the bytes a cookie value may not hold (";", "\"", "\\",
// non-ASCII), so the login answered 303 with a cookie that held another
// string, and every page sent the operator back to the login page. The
// cookie holds the token encoded now.
func TestLoginWithAnyBootstrapTokenKeepsTheSession(t *testing.T) {
	const secret = `Adm1n;Bootstrap"Token\2026`
	srv := adminConsole(t, secret)
	c := cookieClient()
	if code, _ := logIn(t, c, srv.URL, secret); code != http.StatusSeeOther {
		t.Fatalf("login with the admin token: %d", code)
	}
	// The tail's event stream needs a session only (no store): 400 for a
	// missing app with a session, 401 without one.
	resp, err := c.Get(srv.URL + "/ui/tail/events")
	if err != nil {
		t.Fatal(err)
	}
	body := readAll(resp)
	if resp.StatusCode == http.StatusUnauthorized {
		t.Fatalf("after a login that answered 303, the next request has no session (%d %q): the cookie does not hold the token", resp.StatusCode, strings.TrimSpace(body))
	}
}

func readAll(resp *http.Response) string {
	defer resp.Body.Close()
	var b strings.Builder
	buf := make([]byte, 4096)
	for {
		n, err := resp.Body.Read(buf)
		b.Write(buf[:n])
		if err != nil {
			return b.String()
		}
	}
}
