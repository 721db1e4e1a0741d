// Package httpapi is clockd's REST API (base path /v1) plus /healthz,
// /readyz and /metrics.
package httpapi

import (
	"context"
	"log/slog"
	"net/http"
	"path"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/clockd/clockd/internal/alarm"
	"github.com/clockd/clockd/internal/auth"
	"github.com/clockd/clockd/internal/lograte"
	"github.com/clockd/clockd/internal/quote"
)

// Check is one readiness probe; nil means healthy.
type Check struct {
	Name  string
	Check func(ctx context.Context) error
}

// Options configure the API.
type Options struct {
	Service      *alarm.Service
	Logger       *slog.Logger
	Registerer   prometheus.Registerer
	Gatherer     prometheus.Gatherer
	MaxBodyBytes int64
	Ready        []Check
	// Cluster, when set, answers GET /v1/cluster.
	Cluster func(ctx context.Context) (any, error)
	// Auth authenticates requests and serves /v1/tokens; nil: auth off and
	// no tokens API.
	Auth *auth.Authenticator
	// Quotas enforces and serves the per-application quotas; nil: none.
	Quotas *auth.Quotas
	// MaxListBytes bounds the JSON of one list answer (default
	// DefaultMaxListBytes): a page that would be larger ends early, with
	// its "next" cursor.
	MaxListBytes int
	// MaxConcurrent caps the requests served at once, and 4 times as
	// many request bodies being received (/healthz and /readyz aside);
	// past it requests answer 503 at once. 0: no cap.
	MaxConcurrent int
	// DBTimeout bounds the MySQL work the HTTP layer does itself (token
	// lookups, quotas, the tokens and quota API), as the service bounds
	// its own: a stalled database answers 503, not a hung request.
	// Default alarm.DefaultTimeout.
	DBTimeout time.Duration
	// Console, when set, is served under ConsolePrefix (the operator
	// console, /ui/), within the same MaxConcurrent cap as the API: its
	// pages and its session checks ask MySQL too, and anyone can send
	// them requests. Its bodies (at most ConsoleMaxBody bytes, default
	// 64 KiB) are received under reader slots of their own, a quarter of
	// the API's: they come before any token is checked.
	Console        http.Handler
	ConsolePrefix  string
	ConsoleMaxBody int64
}

// MaxBatch is the most clocks one batch create may carry.
const MaxBatch = 1000

// DefaultMaxListBytes is the default bound of one list answer.
const DefaultMaxListBytes = 1 << 20

type api struct {
	svc     *alarm.Service
	log     *slog.Logger
	maxBody int64
	maxList int
	ready   []Check
	cluster func(ctx context.Context) (any, error)
	auth    *auth.Authenticator
	quotas  *auth.Quotas
	mux     *http.ServeMux
	limit   *limiter
	dbTime  time.Duration
	failLog *lograte.Limiter
	// consolePrefix: the console's paths, whose sessions it checks itself
	consolePrefix string

	// the last readiness answer (readyz), reused for readyFor; readyRun:
	// the checks under way
	readyRun  sync.Mutex
	readyMu   sync.Mutex
	readyAt   time.Time
	readyCode int
	readyBody map[string]any
}

// New returns the handler of every route.
func New(o Options) http.Handler {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.MaxBodyBytes <= 0 {
		o.MaxBodyBytes = 8 << 20
	}
	if o.MaxListBytes <= 0 {
		o.MaxListBytes = DefaultMaxListBytes
	}
	a := &api{svc: o.Service, log: o.Logger, maxBody: o.MaxBodyBytes, maxList: o.MaxListBytes, ready: o.Ready,
		cluster: o.Cluster, auth: o.Auth, quotas: o.Quotas, mux: http.NewServeMux(), limit: newLimiter(o.MaxConcurrent, o.MaxBodyBytes),
		failLog: lograte.New(failureLogEvery, time.Now),
		dbTime:  o.DBTimeout, consolePrefix: o.ConsolePrefix}
	if a.dbTime <= 0 {
		a.dbTime = alarm.DefaultTimeout
	}
	a.handleBody("POST /v1/clocks", needWrite, a.create)
	a.handleBody("POST /v1/clocks/batch", needWrite, a.createBatch)
	a.handle("GET /v1/clocks", needRead, a.list, listParams...)
	a.handle("GET /v1/clocks/{application}/{business_id}", needRead, a.get)
	a.handle("DELETE /v1/clocks/{application}/{business_id}", needWrite, a.cancel)
	a.handleBody("PATCH /v1/clocks/{application}/{business_id}", needWrite, a.reschedule)
	a.handle("POST /v1/clocks/{application}/{business_id}/replay", needWrite, a.replay)
	a.handle("POST /v1/clocks/{application}/{business_id}/pause", needWrite, a.pause)
	a.handle("POST /v1/clocks/{application}/{business_id}/resume", needWrite, a.resume)
	a.handle("GET /v1/cluster", needAdmin, a.clusterView)
	if a.auth != nil {
		a.handleBody("POST /v1/tokens", needAdmin, a.createToken)
		a.handle("GET /v1/tokens", needAdmin, a.listTokens, "application")
		a.handle("DELETE /v1/tokens/{id}", needAdmin, a.revokeToken)
	}
	if a.quotas != nil {
		a.handle("GET /v1/applications/{application}/quota", needAdmin, a.getQuota)
		a.handleBody("PUT /v1/applications/{application}/quota", needAdmin, a.setQuota)
	}
	a.handle("GET /healthz", open, func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	a.handle("GET /readyz", open, a.readyz)
	a.handle("GET /v1/openapi.json", needToken, a.openAPI) // SPEC: every call under /v1 needs a token
	if o.Gatherer != nil {
		a.handle("GET /metrics", needScrape, promhttp.HandlerFor(o.Gatherer, promhttp.HandlerOpts{}).ServeHTTP, anyQuery)
	}
	// No catch-all route: the mux itself answers 404 for an unknown path
	// and 405 with Allow for a known path with another method; misses
	// turns both into JSON errors.
	var h http.Handler = crossOrigin(misses(a.mux, a.refuseAnonymous))
	if o.Console != nil {
		if o.ConsoleMaxBody <= 0 {
			o.ConsoleMaxBody = 64 << 10
		}
		mux := http.NewServeMux()
		mux.Handle(o.ConsolePrefix, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			a.limit.serveConsole(w, r, o.ConsoleMaxBody, o.Console.ServeHTTP)
		}))
		mux.Handle("/", h)
		api := h
		// a request whose path is not a path (CONNECT host:port) matches
		// no pattern of this mux, whose plain-text 404 would answer it:
		// the API's answers it, in JSON (found by review)
		h = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Method == http.MethodConnect || !strings.HasPrefix(r.URL.Path, "/") {
				api.ServeHTTP(w, r)
				return
			}
			mux.ServeHTTP(w, r)
		})
	}
	// every answer, the console's too, carries its X-Request-Id and is
	// counted by route
	return withRequestState(instrument(canonical(h, a.refuseAnonymous), o.Registerer), o.Logger)
}

// canonical refuses a path with an empty, "." or ".." segment, which Go's
// mux would answer with a redirect to the cleaned path as an HTML page
// (found by review): an API client is told what is wrong instead (once
// refuse has not answered it: a call without its token is told that).
func canonical(next http.Handler, refuse func(http.ResponseWriter, *http.Request) bool) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if p := r.URL.EscapedPath(); r.Method != http.MethodConnect && p != cleanPath(p) {
			if refuse(w, r) {
				return
			}
			writeError(w, http.StatusBadRequest, ErrorDetail{"invalid_argument",
				"path " + quote.Short(p) + " has an empty, \".\" or \"..\" segment; did you mean " + quote.Short(cleanPath(p)) + "?" + idNote(r)})
			return
		}
		next.ServeHTTP(w, r)
	})
}

// cleanPath is p as Go's mux cleans it: no empty, "." or ".." segment, a
// trailing slash kept.
func cleanPath(p string) string {
	if p == "" || p[0] != '/' {
		p = "/" + p
	}
	np := path.Clean(p)
	if p[len(p)-1] == '/' && np != "/" {
		np += "/"
	}
	return np
}

// crossOrigin refuses the unsafe requests (POST, PATCH, PUT, DELETE) that a
// browser sends on behalf of a page of another site (Sec-Fetch-Site, or an
// Origin other than the Host). With auth off (the default on loopback) a
// web page could otherwise create clocks on a local clockd with a plain
// text/plain POST, which needs no CORS preflight. curl, clockctl and the
// client libraries send neither header and are not affected.
func crossOrigin(next http.Handler) http.Handler {
	cop := http.NewCrossOriginProtection()
	cop.SetDenyHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusForbidden, ErrorDetail{"permission_denied",
			"cross-origin request from a browser refused: the API is not for pages of other sites"})
	}))
	return cop.Handler(next)
}

// instrument counts requests and their latency by route and status.
func instrument(next http.Handler, reg prometheus.Registerer) http.Handler {
	reqs := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "clockd_http_requests_total", Help: "HTTP requests by route and status code.",
	}, []string{"route", "code"})
	dur := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "clockd_http_request_seconds", Help: "HTTP request latency by route.",
		Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16),
	}, []string{"route"})
	if reg != nil {
		reg.MustRegister(reqs, dur)
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		sw := &statusWriter{ResponseWriter: w, code: http.StatusOK}
		next.ServeHTTP(sw, r)
		route := r.Pattern
		if route == "" {
			route = "unmatched"
		}
		code := itoa(sw.code)
		if st := stateOf(r); st != nil && st.clientGone {
			// The client cut its body off or went away: its doing, not
			// a server error (nginx's 499).
			code = "499"
		}
		reqs.WithLabelValues(route, code).Inc()
		dur.WithLabelValues(route).Observe(time.Since(start).Seconds())
	})
}

type statusWriter struct {
	http.ResponseWriter
	code int
}

func (w *statusWriter) WriteHeader(code int) {
	w.code = code
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
