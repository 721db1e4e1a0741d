package console

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/clockd/clockd/internal/alarm"
)

// Sessions. With auth mode tokens an operator logs in with a token of the
// admin kind. The console opens a session on the server (SessionStore:
// clock_console_session in MySQL, so every instance accepts it) holding
// the hash of that token, and gives the browser a cookie with the random
// session id only (HttpOnly: no script reads it; SameSite=Strict: no other
// site's page sends it). Every request checks the session and its token
// again (the token through the authenticator's cache, so a revoked token
// ends its sessions within auth.cache_ttl). A logout deletes the session:
// a copy of the cookie is worth nothing afterwards, and never was an API
// token.
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
	id    string // the session id the cookie holds; empty with auth off
	nonce string // the visitor's random CSRF cookie
}

// SessionTTL is how long a console session lasts after its login.
const SessionTTL = 12 * time.Hour

// SessionStore keeps console sessions by the SHA-256 of their id: the hash
// of the token each was opened with, and its end (internal/mysql
// implements it for every instance; without one the console keeps them in
// memory, for this instance only).
type SessionStore interface {
	CreateSession(ctx context.Context, id, token [32]byte, created, expires time.Time) error
	// Session: alarm.ErrNotFound when there is none.
	Session(ctx context.Context, id [32]byte) (token [32]byte, expires time.Time, err error)
	DeleteSession(ctx context.Context, id [32]byte) error
}

// memSessions is the SessionStore of a console without one: this
// instance's memory, at most maxMemSessions (past it, expired sessions go
// first, then any).
type memSessions struct {
	mu sync.Mutex
	m  map[[32]byte]memSession
}

type memSession struct {
	token   [32]byte
	expires time.Time
}

const maxMemSessions = 10000

func (m *memSessions) CreateSession(_ context.Context, id, token [32]byte, created, expires time.Time) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.m == nil {
		m.m = map[[32]byte]memSession{}
	}
	if len(m.m) >= maxMemSessions {
		maps.DeleteFunc(m.m, func(_ [32]byte, s memSession) bool { return s.expires.Before(created) })
		for k := range m.m {
			if len(m.m) < maxMemSessions {
				break
			}
			delete(m.m, k)
		}
	}
	m.m[id] = memSession{token, expires}
	return nil
}

func (m *memSessions) Session(_ context.Context, id [32]byte) ([32]byte, time.Time, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	s, ok := m.m[id]
	if !ok {
		return [32]byte{}, time.Time{}, alarm.ErrNotFound
	}
	return s.token, s.expires, nil
}

func (m *memSessions) DeleteSession(_ context.Context, id [32]byte) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.m, id)
	return nil
}

// csrf is the token forms of this session carry.
func (s session) csrf() string {
	h := sha256.New()
	h.Write([]byte("clockd console csrf\x00"))
	h.Write([]byte(s.nonce))
	h.Write([]byte{0})
	h.Write([]byte(s.id))
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
		Secure: overHTTPS(r), SameSite: http.SameSiteStrictMode}
}

// overHTTPS reports whether the browser reached the console over HTTPS:
// clockd's own TLS, or a proxy in front that ended TLS and says so
// (X-Forwarded-Proto or Forwarded: proto=https). A client that claims it
// falsely only makes its own cookies HTTPS-only.
func overHTTPS(r *http.Request) bool {
	if r.TLS != nil || strings.EqualFold(strings.TrimSpace(r.Header.Get("X-Forwarded-Proto")), "https") {
		return true
	}
	for _, f := range r.Header.Values("Forwarded") {
		for _, part := range strings.FieldsFunc(f, func(c rune) bool { return c == ';' || c == ',' }) {
			k, v, _ := strings.Cut(strings.TrimSpace(part), "=")
			if strings.EqualFold(k, "proto") && strings.EqualFold(strings.Trim(v, `"`), "https") {
				return true
			}
		}
	}
	return false
}

// nonce returns the visitor's CSRF cookie, setting a new one when there is
// none.
func nonce(w http.ResponseWriter, r *http.Request) string {
	if ck, err := r.Cookie(csrfCookie); err == nil && len(ck.Value) >= 32 {
		return ck.Value
	}
	v := randomID()
	http.SetCookie(w, cookie(r, csrfCookie, v, 0))
	return v
}

// randomID is 32 random bytes, base64url: a CSRF nonce or a session id.
func randomID() string {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err) // crypto/rand does not fail on Linux
	}
	return base64.RawURLEncoding.EncodeToString(b[:])
}

// sessionKey is what a SessionStore keeps a session by: the hash of its
// id, never the id.
func sessionKey(id string) [32]byte { return sha256.Sum256([]byte(id)) }

// errNoSession: the request has no session cookie, or one whose session
// does not exist (logged out, expired) or whose token no longer is a valid
// token of the admin kind.
var errNoSession = errors.New("not logged in")

// errUnchecked: the session could not be checked (MySQL does not answer).
// That is no reason to send an operator back to the login page.
var errUnchecked = errors.New("the session could not be checked")

// session returns the request's session: always one with auth off; with
// auth on, only for a cookie naming a live session. The error is
// errNoSession, or one wrapping errUnchecked.
func (c *Console) session(w http.ResponseWriter, r *http.Request) (session, error) {
	s := session{nonce: nonce(w, r)}
	if c.o.Auth == nil {
		return s, nil
	}
	id, ok := sessionID(r)
	if !ok {
		return s, errNoSession
	}
	if err := c.checkSession(r.Context(), id); err != nil {
		return s, err
	}
	s.id = id
	return s, nil
}

// forgetSession asks the browser to drop a session cookie that names no
// live session (expired, logged out elsewhere, its token revoked).
func forgetSession(w http.ResponseWriter, r *http.Request) {
	if _, err := r.Cookie(sessionCookie); err == nil {
		http.SetCookie(w, cookie(r, sessionCookie, "", -1))
	}
}

// sessionID is the session id the request's cookie holds.
func sessionID(r *http.Request) (string, bool) {
	ck, err := r.Cookie(sessionCookie)
	if err != nil {
		return "", false
	}
	// 32 random bytes, base64url: anything else was never made here
	if b, err := base64.RawURLEncoding.DecodeString(ck.Value); err != nil || len(b) != 32 {
		return "", false
	}
	return ck.Value, true
}

// checkSession checks that the session exists, has not expired, and that
// the token it was opened with still is a valid token of the admin kind:
// nil, errNoSession, or an error wrapping errUnchecked.
func (c *Console) checkSession(ctx context.Context, id string) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	token, expires, err := c.sessions.Session(ctx, sessionKey(id))
	switch {
	case errors.Is(err, alarm.ErrNotFound):
		return errNoSession
	case err != nil:
		return fmt.Errorf("%w: %w", errUnchecked, err)
	case !c.o.Now().Before(expires):
		return errNoSession
	}
	p, err := c.o.Auth.AuthenticateHash(ctx, token)
	switch {
	case err == nil && p.RequireAdmin() == nil:
		return nil
	case err != nil && unavailable(err):
		return fmt.Errorf("%w: %w", errUnchecked, err)
	}
	return errNoSession
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

// unavailable reports an error of a token check that says nothing of the
// token: the store did not answer.
func unavailable(err error) bool {
	return errors.Is(err, alarm.ErrUnavailable) || errors.Is(err, context.DeadlineExceeded)
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
		c.storeFailed("console login: the token could not be checked", "remote", r.RemoteAddr, "err", err)
		v.Error = "The token could not be checked: clockd's database is not answering. Try again shortly."
		c.render(w, http.StatusServiceUnavailable, "login", v)
		return
	}
	if err != nil || token == "" {
		c.refused(slog.LevelInfo, "console login refused", "remote", r.RemoteAddr)
		v.Error = "That is not a valid token of the admin kind."
		c.render(w, http.StatusUnauthorized, "login", v)
		return
	}
	id := randomID()
	now := c.o.Now()
	ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
	defer cancel()
	if err := c.sessions.CreateSession(ctx, sessionKey(id), sha256.Sum256([]byte(token)), now, now.Add(SessionTTL)); err != nil {
		c.storeFailed("console login: the session could not be stored", "remote", r.RemoteAddr, "err", err)
		v.Error = "The session could not be opened: clockd's database is not answering. Try again shortly."
		c.render(w, http.StatusServiceUnavailable, "login", v)
		return
	}
	// the session this browser had (a login over it) ends: it would stay
	// valid, unseen, for the rest of its 12 h
	if old, ok := sessionID(r); ok {
		if err := c.sessions.DeleteSession(ctx, sessionKey(old)); err != nil {
			c.log.Debug("console login: the previous session was not deleted", "err", err)
		}
	}
	http.SetCookie(w, cookie(r, sessionCookie, id, int(SessionTTL/time.Second)))
	c.log.Info("console login", "remote", r.RemoteAddr)
	http.Redirect(w, r, safeNext(r.PostFormValue("next")), http.StatusSeeOther)
}

// logout ends the session on the server (every instance), then asks the
// browser to forget its cookie.
func (c *Console) logout(w http.ResponseWriter, r *http.Request) (string, string, error) {
	if c.o.Auth == nil {
		http.SetCookie(w, cookie(r, sessionCookie, "", -1))
		return Prefix, "", nil
	}
	if id, ok := sessionID(r); ok {
		ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
		defer cancel()
		if err := c.sessions.DeleteSession(ctx, sessionKey(id)); err != nil {
			return "", "", fmt.Errorf("%w: end the session: %w", alarm.ErrUnavailable, err)
		}
	}
	http.SetCookie(w, cookie(r, sessionCookie, "", -1))
	c.log.Info("console logout", "remote", r.RemoteAddr)
	return Prefix + "login", "", nil
}
