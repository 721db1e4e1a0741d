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

// login logs in to the console at base with secret and returns the
// session cookie.
func login(t *testing.T, base, secret string) *http.Cookie {
	t.Helper()
	jar, _ := cookiejar.New(nil)
	c := &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
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
			return ck
		}
	}
	t.Fatalf("login: %d and no session cookie", resp.StatusCode)
	return nil
}

// CLOCKD_ADMIN_TOKEN may be any string of 16 characters or more, and the
// console stored the token itself as the session cookie's value: net/http
// drops the bytes a cookie value may not hold (";", "\"", "\\",
// non-ASCII), so the login answered 303 with a cookie that held another
// string, and every page sent the operator back to the login page. The
// cookie holds the token encoded now.
func TestLoginWithAnyBootstrapTokenKeepsTheSession(t *testing.T) {
	const secret = `Adm1n;Bootstrap"Token\2026`
	con, err := console.New(console.Options{Auth: oneAdmin(secret)})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(con)
	defer srv.Close()
	jar, _ := cookiejar.New(nil)
	c := &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := c.Get(srv.URL + "/ui/login")
	if err != nil {
		t.Fatal(err)
	}
	page := readAll(resp)
	csrf := formValue(t, page, "csrf")
	resp, err = c.PostForm(srv.URL+"/ui/login", url.Values{"csrf": {csrf}, "token": {secret}, "next": {"/ui/"}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("login with the admin token: %d", resp.StatusCode)
	}
	// The tail's event stream needs a session only (no store): 400 for a
	// missing app with a session, 401 without one.
	resp, err = c.Get(srv.URL + "/ui/tail/events")
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
