// Package console is clockd's operator console, served under /ui/: an
// overview, finding and acting on clocks, the trouble list (failing, dead
// and expired clocks), the cluster's shards and instances, and a live tail
// of an application's rings. Pages are rendered on the server with
// html/template; the templates, the stylesheet and the few lines of
// JavaScript of the tail are embedded in the binary, so the console works
// on a closed network.
//
// It talks to the domain through *alarm.Service (every change goes the way
// the REST API's does, so the ring loop learns about it) and reads the
// operator views through the Store interface below.
package console

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"math"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/clockd/clockd/internal/alarm"
	"github.com/clockd/clockd/internal/auth"
	"github.com/clockd/clockd/internal/lograte"
)

//go:embed templates/*.html
var templateFS embed.FS

//go:embed static
var staticFS embed.FS

// Store is what the console reads beyond the service: bounded views for
// operators (internal/mysql implements it).
type Store interface {
	Applications(ctx context.Context, limit int) ([]string, error)
	StatusCounts(ctx context.Context, app string, limit int) ([]alarm.StatusCount, error)
	DueHistogram(ctx context.Context, from time.Time, width time.Duration, n, limit int) ([]alarm.DueBucket, bool, error)
	Failing(ctx context.Context, until time.Time, limit int) ([]alarm.FailureGroup, int, error)
	Instances(ctx context.Context) ([]alarm.Instance, []alarm.ShardLease, time.Time, error)
}

// Authenticator checks an admin token (auth.Authenticator does): at login
// by the token, in a session by its hash.
type Authenticator interface {
	Authenticate(ctx context.Context, header string) (auth.Principal, error)
	AuthenticateHash(ctx context.Context, hash [32]byte) (auth.Principal, error)
}

// Options configure the console.
type Options struct {
	Service *alarm.Service
	Store   Store
	// Auth, when set, makes the console ask for a token of the admin kind
	// (auth mode tokens); nil: the console is open (auth mode off).
	Auth Authenticator
	// Sessions keeps the sessions of logged-in operators (with Auth); nil:
	// this instance's memory (a session then works on this instance only).
	Sessions SessionStore
	// Gatherer is this process's metrics registry: the overview's rates
	// and lateness come from it (this instance only).
	Gatherer prometheus.Gatherer
	// AMQPURL and Exchange are where the live tail binds its queue.
	AMQPURL  string
	Exchange string
	// InstanceID names the serving instance on the pages.
	InstanceID string
	// RetryMax is the cap of the retry backoff (ring.retry_max): a failing
	// clock is due again within it, so the trouble page looks that far
	// ahead (default 5 min).
	RetryMax time.Duration
	// Fresh: how long the overview's counts and the trouble page's
	// failing groups are shown before they are read again (default 10 s;
	// a view of older ones, up to 5 min, answers at once and refreshes
	// them in the background).
	Fresh  time.Duration
	Logger *slog.Logger
	Now    func() time.Time
}

// Console is the handler of /ui/ plus the sampler of the metrics it shows.
type Console struct {
	o        Options
	sessions SessionStore
	log      *slog.Logger
	tpl      map[string]*template.Template
	mux      *http.ServeMux
	sampler  *sampler
	// closing ends the open live tails: an HTTP server's shutdown waits
	// for its requests, and a tail's would never end by itself.
	closing   chan struct{}
	closeOnce sync.Once
	// The heavier reads, kept between views (kept.go).
	overviewSnap *kept[overviewStats]
	failingSnap  *kept[failing]
	// cop refuses the posts a browser sends for a page of another origin
	// (Sec-Fetch-Site, or an Origin other than the Host), as the API does.
	cop *http.CrossOriginProtection
	// refusals rate-limits the log lines of refused logins and actions,
	// and of requests the database could not serve: anyone can send them
	// at their request rate (a guessed token, a form without its CSRF
	// token, a made-up session cookie during an outage).
	refusals *lograte.Limiter
}

// refusalLogEvery is how often a refused login or action, or a request
// failed by the database, is logged, per kind; the next line counts those
// held back.
const refusalLogEvery = 10 * time.Second

// refused logs a refused login or action, at most once per refusalLogEvery
// and kind.
func (c *Console) refused(level slog.Level, kind string, args ...any) {
	c.rated(level, kind, "like_refusals_not_logged", args...)
}

// storeFailed logs a request the database could not serve (a session or a
// token that could not be checked), at most once per refusalLogEvery and
// kind: during an outage every page view, login and reconnecting live tail
// would write one line each.
func (c *Console) storeFailed(kind string, args ...any) {
	c.rated(slog.LevelWarn, kind, "like_failures_not_logged", args...)
}

func (c *Console) rated(level slog.Level, kind, heldKey string, args ...any) {
	ok, heldBack := c.refusals.Allow(kind, 1)
	if !ok {
		return
	}
	c.log.Log(context.Background(), level, kind, append(args, heldKey, heldBack)...)
}

// staleLimit: a kept read older than this is read again before the page
// answers, not shown.
const staleLimit = 5 * time.Minute

// MaxBodyBytes is the largest body of a console request (an action's
// form; a login's is capped lower).
const MaxBodyBytes = 64 << 10

// Prefix is where the console is mounted.
const Prefix = "/ui/"

// New builds the console.
func New(o Options) (*Console, error) {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.RetryMax <= 0 {
		o.RetryMax = 5 * time.Minute
	}
	var sessions SessionStore = &memSessions{}
	if o.Sessions != nil {
		sessions = o.Sessions
	}
	if o.Fresh <= 0 {
		o.Fresh = 10 * time.Second
	}
	c := &Console{o: o, sessions: sessions, log: o.Logger, mux: http.NewServeMux(), sampler: newSampler(o.Gatherer), closing: make(chan struct{}),
		cop: http.NewCrossOriginProtection(), refusals: lograte.New(refusalLogEvery, time.Now)}
	c.overviewSnap = &kept[overviewStats]{fresh: o.Fresh, stale: staleLimit, load: c.readOverview, now: o.Now}
	c.failingSnap = &kept[failing]{fresh: o.Fresh, stale: staleLimit, load: c.readFailing, now: o.Now}
	if err := c.parseTemplates(); err != nil {
		return nil, err
	}
	static, err := fs.Sub(staticFS, "static")
	if err != nil {
		return nil, err
	}
	files := http.StripPrefix(Prefix+"static/", http.FileServerFS(static))
	c.mux.Handle("GET "+Prefix+"static/", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "public, max-age=3600")
		files.ServeHTTP(w, r)
	}))
	c.mux.HandleFunc("GET "+Prefix+"login", c.loginPage)
	c.mux.HandleFunc("POST "+Prefix+"login", c.login)
	c.mux.HandleFunc("POST "+Prefix+"logout", c.action(c.logout))
	c.mux.HandleFunc("GET "+Prefix+"{$}", c.page(c.overview))
	c.mux.HandleFunc("GET "+Prefix+"clocks", c.page(c.clocks))
	c.mux.HandleFunc("GET "+Prefix+"clocks/{application}/{business_id}", c.page(c.clock))
	c.mux.HandleFunc("POST "+Prefix+"clocks/{application}/{business_id}/cancel", c.action(c.cancel))
	c.mux.HandleFunc("POST "+Prefix+"clocks/{application}/{business_id}/move", c.action(c.move))
	c.mux.HandleFunc("POST "+Prefix+"clocks/{application}/{business_id}/replay", c.action(c.replay))
	c.mux.HandleFunc("GET "+Prefix+"trouble", c.page(c.trouble))
	c.mux.HandleFunc("POST "+Prefix+"trouble/replay-all", c.action(c.replayAll))
	c.mux.HandleFunc("GET "+Prefix+"cluster", c.page(c.cluster))
	c.mux.HandleFunc("GET "+Prefix+"tail", c.page(c.tail))
	c.mux.HandleFunc("GET "+Prefix+"tail/events", c.guard(c.tailEvents))
	return c, nil
}

// Run samples the metrics the overview shows until ctx is done.
func (c *Console) Run(ctx context.Context) error {
	return c.sampler.run(ctx)
}

// Close ends the live tails (their event streams close; browsers
// reconnect to another instance or after the restart). Register it with
// http.Server.RegisterOnShutdown.
func (c *Console) Close() { c.closeOnce.Do(func() { close(c.closing) }) }

// ServeHTTP serves the pages with the headers every answer carries.
//
// Requests a browser makes for a page of another origin are refused
// (crossOrigin): an action (a POST), and the live tail, a GET that binds a
// queue to the ring exchange. With auth off (the default on
// loopback) nothing else would stop them: a page on another port of the
// same host is the same site (SameSite cookies go with it), and there is
// no secret in the CSRF token to keep it from computing one.
func (c *Console) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if c.crossOrigin(r) {
		http.Error(w, "cross-origin request refused: the console answers its own pages only", http.StatusForbidden)
		return
	}
	h := w.Header()
	// Nothing of the console is framed, sniffed, or loaded from elsewhere.
	h.Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; frame-ancestors 'none'; form-action 'self'")
	h.Set("X-Frame-Options", "DENY")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "same-origin")
	c.mux.ServeHTTP(w, r)
}

// crossOrigin reports a request a browser sent for a page of another
// origin, as cop judges it (Sec-Fetch-Site, or an Origin other than the
// Host). cop passes every GET; the live tail's is judged as a post would
// be, since it binds a queue. Other GETs only read.
func (c *Console) crossOrigin(r *http.Request) bool {
	if r.URL.Path == Prefix+"tail/events" { // HEAD too: the mux routes it to the GET handler
		post := *r
		post.Method = http.MethodPost
		r = &post
	}
	return c.cop.Check(r) != nil
}

// view is what every page template gets.
type view struct {
	Title      string
	Nav        string
	CSRF       string
	AuthOn     bool
	Instance   string
	Now        time.Time
	Message    string
	Error      string
	Data       any
	Prefix     string
	RenderedIn time.Duration
}

// pageFunc renders one page: it returns the template and its data, or an
// error that becomes the error page.
type pageFunc func(r *http.Request, v *view) (string, error)

// page wraps a page: session check (redirect to the login page), CSRF
// token for its forms, rendering and error mapping.
func (c *Console) page(fn pageFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		sess, err := c.session(w, r)
		if errors.Is(err, errNoSession) {
			forgetSession(w, r)
			http.Redirect(w, r, Prefix+"login?next="+url.QueryEscape(r.URL.RequestURI()), http.StatusSeeOther)
			return
		}
		v := &view{CSRF: sess.csrf(), AuthOn: c.o.Auth != nil, Instance: c.o.InstanceID, Now: c.o.Now().UTC(),
			Message: sess.message(r), Prefix: Prefix}
		if err != nil {
			c.sessionUnchecked(w, r, v, err)
			return
		}
		name, err := fn(r, v)
		if err != nil {
			c.fail(w, r, v, err)
			return
		}
		if to, ok := strings.CutPrefix(name, "redirect:"); ok {
			http.Redirect(w, r, to, http.StatusSeeOther)
			return
		}
		v.RenderedIn = time.Since(start)
		c.render(w, http.StatusOK, name, v)
	}
}

// guard is page for handlers that write their own answer (the tail's
// event stream): only the session check.
func (c *Console) guard(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		switch _, err := c.session(w, r); {
		case errors.Is(err, errNoSession):
			http.Error(w, "log in first", http.StatusUnauthorized)
			return
		case err != nil:
			http.Error(w, c.sessionUncheckedMsg(r, err), http.StatusServiceUnavailable)
			return
		}
		h(w, r)
	}
}

// actionFunc does one change and returns where to go next and what to say.
type actionFunc func(w http.ResponseWriter, r *http.Request) (next, msg string, err error)

// action wraps a change: a POST with a valid session and the CSRF token of
// that session, or it is refused with 403 before anything is read.
func (c *Console) action(fn actionFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		r.Body = http.MaxBytesReader(w, r.Body, MaxBodyBytes)
		sess, err := c.session(w, r)
		v := &view{AuthOn: c.o.Auth != nil, Instance: c.o.InstanceID, Now: c.o.Now().UTC(), Prefix: Prefix}
		if errors.Is(err, errNoSession) {
			forgetSession(w, r)
			v.Title = "Not logged in"
			c.failStatus(w, v, http.StatusUnauthorized, "Log in with an admin token first.")
			return
		}
		if err != nil {
			c.sessionUnchecked(w, r, v, err)
			return
		}
		v.CSRF = sess.csrf()
		if err := r.ParseForm(); err != nil {
			c.failStatus(w, v, http.StatusBadRequest, "The form could not be read: "+err.Error())
			return
		}
		if !sess.checkCSRF(r.PostFormValue("csrf")) {
			c.refused(slog.LevelWarn, "console action refused: CSRF token missing or wrong", "path", r.URL.Path, "remote", r.RemoteAddr)
			v.Title = "Refused"
			c.failStatus(w, v, http.StatusForbidden, "Refused: the form's CSRF token is missing or does not belong to this session. Reload the page and try again.")
			return
		}
		next, msg, err := fn(w, r)
		// An action changes what the kept reads count (a cancel, a
		// replay): the next view reads them again.
		c.overviewSnap.forget()
		c.failingSnap.forget()
		if err != nil {
			c.fail(w, r, v, err)
			return
		}
		if msg != "" {
			sep := "?"
			if strings.Contains(next, "?") {
				sep = "&"
			}
			next += sep + "msg=" + url.QueryEscape(msg) + "&sig=" + url.QueryEscape(sess.msgSig(msg))
		}
		http.Redirect(w, r, next, http.StatusSeeOther)
	}
}

// fail renders an error page with the status the error maps to.
func (c *Console) fail(w http.ResponseWriter, r *http.Request, v *view, err error) {
	code := http.StatusInternalServerError
	switch {
	case errors.Is(err, alarm.ErrNotFound):
		code = http.StatusNotFound
	case errors.Is(err, alarm.ErrConflict):
		code = http.StatusConflict
	case errors.Is(err, alarm.ErrInvalid), errors.Is(err, alarm.ErrTooLarge):
		code = http.StatusBadRequest
	case errors.Is(err, alarm.ErrUnavailable), errors.Is(err, context.DeadlineExceeded):
		code = http.StatusServiceUnavailable
	case errors.Is(err, auth.ErrUnauthenticated):
		code = http.StatusUnauthorized
	case errors.Is(err, auth.ErrPermissionDenied):
		code = http.StatusForbidden
	}
	switch {
	case code == http.StatusServiceUnavailable:
		// the database is not answering: every view says so until it is back
		c.storeFailed("console page unavailable", "path", r.URL.Path, "err", err)
	case code >= 500:
		c.log.Error("console page failed", "path", r.URL.Path, "err", err)
	}
	if v.Title == "" {
		v.Title = http.StatusText(code)
	}
	c.failStatus(w, v, code, err.Error())
}

// sessionUnchecked answers a request whose session's token could not be
// checked: the token store (MySQL) did not answer. The operator stays
// logged in; nothing was done.
func (c *Console) sessionUnchecked(w http.ResponseWriter, r *http.Request, v *view, err error) {
	v.Title = "Unavailable"
	c.failStatus(w, v, http.StatusServiceUnavailable, c.sessionUncheckedMsg(r, err))
}

// sessionUncheckedMsg logs a session check that failed on the store and
// returns what the operator is told.
func (c *Console) sessionUncheckedMsg(r *http.Request, err error) string {
	c.storeFailed("console: the session's token could not be checked", "path", r.URL.Path, "err", err)
	return "Your session could not be checked: clockd's database is not answering. Nothing was done; try again shortly."
}

func (c *Console) failStatus(w http.ResponseWriter, v *view, code int, msg string) {
	if v.Title == "" {
		v.Title = http.StatusText(code)
	}
	v.Error = msg
	c.render(w, code, "error", v)
}

func (c *Console) render(w http.ResponseWriter, code int, name string, v *view) {
	t, ok := c.tpl[name]
	if !ok {
		http.Error(w, "no template "+name, http.StatusInternalServerError)
		return
	}
	var b strings.Builder
	if err := t.ExecuteTemplate(&b, "layout", v); err != nil {
		c.log.Error("console template", "template", name, "err", err)
		http.Error(w, "template error", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	if code == http.StatusServiceUnavailable {
		w.Header().Set("Retry-After", "5") // MySQL did not answer: as the API's 503s say
	}
	w.WriteHeader(code)
	_, _ = w.Write([]byte(b.String()))
}

// clockURL is the console path of one clock.
func clockURL(app, id string) string {
	return Prefix + "clocks/" + url.PathEscape(app) + "/" + url.PathEscape(id)
}

func (c *Console) parseTemplates() error {
	funcs := template.FuncMap{
		"clockURL": clockURL,
		"time":     fmtTime,
		"ago":      func(t time.Time) string { return ago(c.o.Now(), t) },
		"bytes":    fmtBytes,
		"approx":   fmtApprox,
		"ms":       func(d time.Duration) string { return fmt.Sprintf("%.1f ms", float64(d)/float64(time.Millisecond)) },
		"pathEsc":  url.PathEscape,
		"queryEsc": url.QueryEscape,
		"pair":     func(a, b any) struct{ A, B any } { return struct{ A, B any }{a, b} },
		// the exchange clockd publishes to, for a clockctl bind hint
		// (found by review: without -exchange it bound to clock.ring)
		"exchange": func() string { return c.o.Exchange },
		"unroutable": func(s string) bool {
			return strings.Contains(strings.ToLower(s), "unroutable")
		},
	}
	c.tpl = map[string]*template.Template{}
	pages, err := fs.Glob(templateFS, "templates/*.html")
	if err != nil {
		return err
	}
	for _, p := range pages {
		name := strings.TrimSuffix(strings.TrimPrefix(p, "templates/"), ".html")
		if name == "layout" {
			continue
		}
		t, err := template.New(name).Funcs(funcs).ParseFS(templateFS, "templates/layout.html", p)
		if err != nil {
			return fmt.Errorf("console template %s: %w", name, err)
		}
		c.tpl[name] = t
	}
	return nil
}

func fmtTime(t time.Time) string {
	if t.IsZero() {
		return "—"
	}
	return t.UTC().Format("2006-01-02 15:04:05.000Z")
}

func ago(now, t time.Time) string {
	if t.IsZero() {
		return ""
	}
	d := t.Sub(now).Round(time.Second)
	if d == 0 {
		return "just now" // also a few ms ahead: the database's clock wrote it
	}
	if d > 0 {
		return "in " + d.String()
	}
	return (-d).String() + " ago"
}

// fmtApprox shows an estimated count with the precision it has: InnoDB's
// index-range estimates are often off by up to a factor of two, so two
// significant digits ("≈19k", "≈170k", "≈1.2M").
func fmtApprox(n int64) string {
	f := float64(n)
	round2 := func(x float64) float64 { // to two significant digits
		if x <= 0 {
			return 0
		}
		p := math.Pow(10, math.Floor(math.Log10(x))-1)
		return math.Round(x/p) * p
	}
	switch {
	case n >= 1_000_000:
		return fmt.Sprintf("≈%gM", round2(f)/1e6)
	case n >= 1_000:
		return fmt.Sprintf("≈%gk", round2(f)/1e3)
	}
	return fmt.Sprintf("≈%g", round2(f))
}

func fmtBytes(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}
