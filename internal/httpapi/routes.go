// Package httpapi is clockd's REST API (base path /v1) plus /healthz,
// /readyz and /metrics.
package httpapi

import (
	"context"
	"log/slog"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/clockd/clockd/internal/alarm"
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
}

// MaxBatch is the most clocks one batch create may carry.
const MaxBatch = 1000

type api struct {
	svc     *alarm.Service
	log     *slog.Logger
	maxBody int64
	ready   []Check
	cluster func(ctx context.Context) (any, error)
}

// New returns the handler of every route.
func New(o Options) http.Handler {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.MaxBodyBytes <= 0 {
		o.MaxBodyBytes = 8 << 20
	}
	a := &api{svc: o.Service, log: o.Logger, maxBody: o.MaxBodyBytes, ready: o.Ready, cluster: o.Cluster}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/clocks", a.create)
	mux.HandleFunc("POST /v1/clocks/batch", a.createBatch)
	mux.HandleFunc("GET /v1/clocks", a.list)
	mux.HandleFunc("GET /v1/clocks/{application}/{business_id}", a.get)
	mux.HandleFunc("DELETE /v1/clocks/{application}/{business_id}", a.cancel)
	mux.HandleFunc("PATCH /v1/clocks/{application}/{business_id}", a.reschedule)
	mux.HandleFunc("POST /v1/clocks/{application}/{business_id}/replay", a.replay)
	mux.HandleFunc("GET /v1/cluster", a.clusterView)
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	mux.HandleFunc("GET /readyz", a.readyz)
	if o.Gatherer != nil {
		mux.Handle("GET /metrics", promhttp.HandlerFor(o.Gatherer, promhttp.HandlerOpts{}))
	}
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, ErrorDetail{"not_found", "no route " + r.Method + " " + r.URL.Path})
	})
	return instrument(mux, o.Registerer)
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
		reqs.WithLabelValues(route, itoa(sw.code)).Inc()
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
