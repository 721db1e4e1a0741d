package console

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"net/http"
	"strings"
	"time"

	"github.com/clockd/clockd/internal/alarm"
)

// Sessions. With auth mode tokens an operator logs in with a token of the
// admin kind; the console keeps it in a cookie (HttpOnly: no script reads
// it; SameSite=Strict: no other site's page sends it) and checks it again
// on every request through the authenticator's cache, so a revoked token
// stops working within auth.cache_ttl. Nothing is kept on the server:
// every instance accepts every session.
//
// CSRF: every visitor also gets a random cookie; the token every form
// carries is a hash of that cookie and the session, so a form of one
// session (or from another site, which cannot read the cookie) is refused
// in another. SameSite=Strict already keeps cross-site posts from carrying
// the cookies; the token is the second lock, and the only one with auth
// off (where there is no session to steal, but a page elsewhere could
// still post to a console on localhost).

const (
	sessionCookie = "clockd_console"
	csrfCookie    = "clockd_csrf"
)

type session struct {
	token string // the admin token; empty with auth off
	nonce string // the visitor's random CSRF cookie
}

// csrf is the token forms of this session carry.
func (s session) csrf() string {
	h := sha256.New()
	h.Write([]byte("clockd console csrf\x00"))
	h.Write([]byte(s.nonce))
	h.Write([]byte{0})
	h.Write([]byte(s.token))
	return base64.RawURLEncoding.EncodeToString(h.Sum(nil))
}

// msgSig signs a message the console shows after an action (the
// redirect's ?msg=): a page shows only a message this session's action
// put there, not text anyone can write into a link ("your session
// expired, log in at ...").
func (s session) msgSig(msg string) string {
	m := hmac.New(sha256.New, []byte(s.csrf()))
	m.Write([]byte("clockd console message\x00"))
	m.Write([]byte(msg))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil)[:16])
}

// message is the signed message of a request's query, or "".
func (s session) message(r *http.Request) string {
	q := r.URL.Query()
	msg, sig := q.Get("msg"), q.Get("sig")
	if msg == "" || subtle.ConstantTimeCompare([]byte(sig), []byte(s.msgSig(msg))) != 1 {
		return ""
	}
	return msg
}

func (s session) checkCSRF(got string) bool {
	want := s.csrf()
	return got != "" && subtle.ConstantTimeCompare([]byte(got), []byte(want)) == 1
}

func cookie(r *http.Request, name, value string, maxAge int) *http.Cookie {
	return &http.Cookie{Name: name, Value: value, Path: Prefix, MaxAge: maxAge, HttpOnly: true,
		Secure: r.TLS != nil, SameSite: http.SameSiteStrictMode}
}

// nonce returns the visitor's CSRF cookie, setting a new one when there is
// none.
func nonce(w http.ResponseWriter, r *http.Request) string {
	if ck, err := r.Cookie(csrfCookie); err == nil && len(ck.Value) >= 32 {
		return ck.Value
	}
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err) // crypto/rand does not fail on Linux
	}
	v := base64.RawURLEncoding.EncodeToString(b[:])
	http.SetCookie(w, cookie(r, csrfCookie, v, 0))
	return v
}

// errNoSession: the request has no session cookie, or one that does not
// hold a valid token of the admin kind.
var errNoSession = errors.New("not logged in")

// session returns the request's session: always one with auth off; with
// auth on, only for a cookie holding a valid token of the admin kind. The
// error is errNoSession, or one wrapping alarm.ErrUnavailable when the
// token could not be checked (MySQL does not answer): that is no reason to
// send an operator back to the login page.
func (c *Console) session(w http.ResponseWriter, r *http.Request) (session, error) {
	s := session{nonce: nonce(w, r)}
	if c.o.Auth == nil {
		return s, nil
	}
	token, ok := sessionToken(r)
	if !ok {
		return s, errNoSession
	}
	if err := c.checkSession(r.Context(), token); err != nil {
		return s, err
	}
	s.token = token
	return s, nil
}

// sessionToken is the token the request's session cookie holds.
func sessionToken(r *http.Request) (string, bool) {
	ck, err := r.Cookie(sessionCookie)
	if err != nil || ck.Value == "" {
		return "", false
	}
	token, err := base64.RawURLEncoding.DecodeString(ck.Value)
	if err != nil {
		return "", false
	}
	return string(token), true
}

// checkSession is checkAdmin with every refusal errNoSession, and a token
// store that did not answer alarm.ErrUnavailable.
func (c *Console) checkSession(ctx context.Context, token string) error {
	err := c.checkAdmin(ctx, token)
	switch {
	case err == nil:
		return nil
	case unavailable(err):
		return err
	}
	return errNoSession
}

// unavailable reports an error of a token check that says nothing of the
// token: the store did not answer.
func unavailable(err error) bool {
	return errors.Is(err, alarm.ErrUnavailable) || errors.Is(err, context.DeadlineExceeded)
}

func (c *Console) checkAdmin(ctx context.Context, token string) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	p, err := c.o.Auth.Authenticate(ctx, "Bearer "+token)
	if err != nil {
		return err
	}
	return p.RequireAdmin()
}

// safeNext keeps a post-login redirect inside the console.
func safeNext(next string) string {
	if !strings.HasPrefix(next, Prefix) || strings.HasPrefix(next, "//") || strings.Contains(next, "\\") {
		return Prefix
	}
	return next
}

func (c *Console) loginPage(w http.ResponseWriter, r *http.Request) {
	if c.o.Auth == nil {
		http.Redirect(w, r, Prefix, http.StatusSeeOther)
		return
	}
	s := session{nonce: nonce(w, r)}
	v := &view{Title: "Log in", CSRF: s.csrf(), AuthOn: true, Instance: c.o.InstanceID, Now: c.o.Now().UTC(), Prefix: Prefix,
		Data: safeNext(r.URL.Query().Get("next"))}
	c.render(w, http.StatusOK, "login", v)
}

func (c *Console) login(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, 16<<10)
	if c.o.Auth == nil {
		http.Redirect(w, r, Prefix, http.StatusSeeOther)
		return
	}
	s := session{nonce: nonce(w, r)}
	v := &view{Title: "Log in", CSRF: s.csrf(), AuthOn: true, Instance: c.o.InstanceID, Now: c.o.Now().UTC(), Prefix: Prefix,
		Data: safeNext(r.PostFormValue("next"))}
	if !s.checkCSRF(r.PostFormValue("csrf")) {
		v.Error = "Refused: the form's CSRF token is missing or wrong. Reload the page and try again."
		c.render(w, http.StatusForbidden, "login", v)
		return
	}
	token := strings.TrimSpace(r.PostFormValue("token"))
	err := c.checkAdmin(r.Context(), token)
	if token != "" && err != nil && unavailable(err) {
		c.log.Warn("console login: the token could not be checked", "remote", r.RemoteAddr, "err", err)
		v.Error = "The token could not be checked: clockd's database is not answering. Try again shortly."
		c.render(w, http.StatusServiceUnavailable, "login", v)
		return
	}
	if err != nil || token == "" {
		c.log.Info("console login refused", "remote", r.RemoteAddr)
		v.Error = "That is not a valid token of the admin kind."
		c.render(w, http.StatusUnauthorized, "login", v)
		return
	}
	// encoded: a cookie value keeps only some characters (net/http drops
	// the others, such as ; " \ and non-ASCII, silently), and the
	// bootstrap admin token (CLOCKD_ADMIN_TOKEN) may have any
	http.SetCookie(w, cookie(r, sessionCookie, base64.RawURLEncoding.EncodeToString([]byte(token)), 0))
	c.log.Info("console login", "remote", r.RemoteAddr)
	http.Redirect(w, r, safeNext(r.PostFormValue("next")), http.StatusSeeOther)
}

func (c *Console) logout(w http.ResponseWriter, r *http.Request) (string, string, error) {
	http.SetCookie(w, cookie(r, sessionCookie, "", -1))
	if c.o.Auth == nil {
		return Prefix, "", nil
	}
	return Prefix + "login", "", nil
}
