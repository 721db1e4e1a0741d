package console_test

import (
	"encoding/base64"
	"net/http"
	"net/url"
	"strings"
	"testing"
)

// Logout ends the session on the server: a copy of the cookie taken
// before it (a shared machine, a proxy log, a HAR file attached to a
// ticket) opens nothing afterwards. And the cookie is not the admin token:
// it used to be (base64), so a copy was an API token valid on /v1 until
// revoked.
func TestLogoutEndsTheSessionOnTheServer(t *testing.T) {
	const secret = "clk_review-admin-token-0123456789abcdefghijkl"
	srv := adminConsole(t, secret)
	c := cookieClient()
	_, stolen := logIn(t, c, srv.URL, secret)
	if stolen == nil {
		t.Fatal("no session cookie after login")
	}
	if strings.Contains(stolen.Value, secret) || strings.Contains(stolen.Value, base64.RawURLEncoding.EncodeToString([]byte(secret))) {
		t.Errorf("the session cookie holds the admin token: %q", stolen.Value)
	}
	// Log out the way the page does, with the session's CSRF token (the
	// error page of a refused action carries the layout's logout form).
	resp, err := c.PostForm(srv.URL+"/ui/logout", url.Values{"csrf": {"x"}})
	if err != nil {
		t.Fatal(err)
	}
	sessCSRF := formValue(t, readAll(resp), "csrf") // the error page's logout form
	resp, err = c.PostForm(srv.URL+"/ui/logout", url.Values{"csrf": {sessCSRF}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("logout: %d", resp.StatusCode)
	}
	// The cookie kept from before the logout.
	if code := tailStatus(t, srv.URL, stolen); code != http.StatusUnauthorized {
		t.Errorf("the session cookie from before the logout still opens the console (%d, want 401): logout does not end the session on the server", code)
	}
}

// A login over a session (the same browser logs in again) ends the
// session it replaces: the old cookie would otherwise stay valid, unseen,
// for the rest of its 12 h.
func TestLoginEndsThePreviousSession(t *testing.T) {
	const secret = "clk_review-admin-token-0123456789abcdefghijkl"
	srv := adminConsole(t, secret)
	first := login(t, srv.URL, secret)
	// log in again with the first session's cookie in the browser
	c := cookieClient()
	u, _ := url.Parse(srv.URL + "/ui/")
	c.Jar.SetCookies(u, []*http.Cookie{first})
	if code, _ := logIn(t, c, srv.URL, secret); code != http.StatusSeeOther {
		t.Fatalf("second login: %d", code)
	}
	if code := tailStatus(t, srv.URL, first); code != http.StatusUnauthorized {
		t.Errorf("the session a second login replaced still works: %d, want 401", code)
	}
	// a page asked with the dead session's cookie sends to the login page
	// and tells the browser to drop that cookie
	req, _ := http.NewRequest("GET", srv.URL+"/ui/cluster", nil)
	req.AddCookie(&http.Cookie{Name: first.Name, Value: first.Value})
	resp, err := cookieClient().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	dropped := false
	for _, ck := range resp.Cookies() {
		dropped = dropped || (ck.Name == "clockd_console" && ck.MaxAge < 0)
	}
	if resp.StatusCode != http.StatusSeeOther || !dropped {
		t.Errorf("a page with a dead session's cookie: %d, cookie dropped %v; want 303 to the login page and the cookie dropped", resp.StatusCode, dropped)
	}
	for _, ck := range c.Jar.Cookies(u) {
		if ck.Name == "clockd_console" {
			if code := tailStatus(t, srv.URL, ck); code != http.StatusBadRequest {
				t.Errorf("the new session: %d, want 400 (a session, no app)", code)
			}
		}
	}
}
