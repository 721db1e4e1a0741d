package httpapi

import (
	"context"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// ServerConfig is the HTTP edge: the deadlines and sizes that keep slow or
// hostile clients from holding clockd's goroutines and memory.
type ServerConfig struct {
	// ReadTimeout bounds reading a whole request, body included: a body
	// sent at one byte a second is cut off.
	ReadTimeout time.Duration
	// ReadHeaderTimeout bounds reading the request headers.
	ReadHeaderTimeout time.Duration
	// WriteTimeout bounds a request from the end of its headers to the end
	// of its answer: a client that never reads its answer lets go of it.
	WriteTimeout time.Duration
	// IdleTimeout closes keep-alive connections idle that long.
	IdleTimeout time.Duration
	// MaxHeaderBytes bounds the request line and headers.
	MaxHeaderBytes int
	// TLS, when set, serves HTTPS.
	TLS *tls.Config
}

// NewServer returns the http.Server of handler h with the edge limits of c.
// Its own error lines (TLS handshakes, bad requests) go to log at debug
// level: they are the clients' doing.
func NewServer(h http.Handler, c ServerConfig, log *slog.Logger) *http.Server {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &http.Server{
		Handler:           h,
		ReadTimeout:       c.ReadTimeout,
		ReadHeaderTimeout: c.ReadHeaderTimeout,
		WriteTimeout:      c.WriteTimeout,
		IdleTimeout:       c.IdleTimeout,
		MaxHeaderBytes:    c.MaxHeaderBytes,
		TLSConfig:         c.TLS,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelDebug),
	}
}

// reqState is what the layers of one request tell each other.
type reqState struct {
	id         string
	clientGone bool // the client cut its body off or went away
}

type stateKey struct{}

func stateOf(r *http.Request) *reqState {
	st, _ := r.Context().Value(stateKey{}).(*reqState)
	return st
}

// requestID returns the id of a request: the caller's X-Request-Id when it
// is a sane token (so that ids follow a request across services), else a
// fresh random one.
func requestID(r *http.Request) string {
	if id := r.Header.Get("X-Request-Id"); id != "" && len(id) <= 64 && strings.IndexFunc(id, func(c rune) bool {
		return !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.' || c == ':')
	}) < 0 {
		return id
	}
	var b [8]byte
	v := rand.Uint64()
	for i := range b {
		b[i] = byte(v >> (8 * i))
	}
	return hex.EncodeToString(b[:])
}

// withRequestState gives every request an id, sent back as X-Request-Id on
// every answer and written in every log line about the request.
func withRequestState(next http.Handler, log *slog.Logger) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		st := &reqState{id: requestID(r)}
		w.Header().Set("X-Request-Id", st.id)
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), stateKey{}, st)))
	})
}

// limiter caps the requests being worked on at max, and the request bodies
// being received at 4 × max: past either a request answers 503 with
// Retry-After at once, instead of queueing (each held request is a
// goroutine, a body buffer, perhaps a MySQL connection). A body is received
// before a work slot is taken, so clients that send their bodies slowly
// (until http.read_timeout cuts them off) hold reader slots, not the slots
// of the requests that are ready to be served.
type limiter struct {
	work    chan struct{}
	readers chan struct{}
	// consoleReaders: the console's bodies, received before anything has
	// checked who sent them (a login form carries its token in the body),
	// so that clients without a token cannot hold the API's readers
	consoleReaders chan struct{}
	checks         chan struct{} // token checks under way (checkIn)
	// bodies: bytes of request bodies held (received or being received,
	// until their request ends), at most bodyBudget: 1,024 readers of
	// 8 MiB bodies would otherwise be 8 GiB
	bodies     atomic.Int64
	bodyBudget int64

	// shares: what each client holds of the readers and of the body
	// budget (a client: its token, or its address with auth off), at
	// most a quarter of each: one client's slow or huge bodies held them
	// all, and every other client's creates answered 503 (found by
	// review: 1,100 slow bodies of one read-only token, or 28 connections
	// holding 8 MiB bodies)
	sharesMu sync.Mutex
	shares   map[string]*share
}

// share is what one client holds.
type share struct {
	readers int
	bytes   int64
}

// clientShare is the part of the readers and of the body budget one
// client may hold: a quarter.
const clientShare = 4

// noBodyMax is the most a call that takes no body may carry ({} or
// nothing): received without a reader slot.
const noBodyMax = 1 << 10

// bodyBudgetBodies is how many bodies of max_body_bytes the limiter lets
// clockd hold at once (bodyBudget; at least minBodyBudget bytes).
const (
	bodyBudgetBodies = 32
	minBodyBudget    = 64 << 20
)

func newLimiter(most int, maxBody int64) *limiter {
	if most <= 0 {
		return nil
	}
	return &limiter{work: make(chan struct{}, most), readers: make(chan struct{}, 4*most), checks: make(chan struct{}, most),
		consoleReaders: make(chan struct{}, max(most/4, 4)),
		bodyBudget:     max(bodyBudgetBodies*maxBody, minBodyBudget), shares: map[string]*share{}}
}

// takeReader takes one of client's reader slots, or reports that it holds
// its share of them.
func (l *limiter) takeReader(client string) bool {
	l.sharesMu.Lock()
	defer l.sharesMu.Unlock()
	sh := l.shares[client]
	if sh == nil {
		sh = &share{}
		l.shares[client] = sh
	}
	if sh.readers >= max(cap(l.readers)/clientShare, 1) {
		return false
	}
	sh.readers++
	return true
}

// reserveFor takes n bytes of the body budget for client, or reports that
// the budget, or the client's share of it, is spent.
func (l *limiter) reserveFor(client string, n int64) bool {
	l.sharesMu.Lock()
	sh := l.shares[client]
	ok := sh != nil && sh.bytes+n <= l.bodyBudget/clientShare
	if ok {
		sh.bytes += n
	}
	l.sharesMu.Unlock()
	if !ok {
		return false
	}
	if !l.reserve(n) {
		l.release(client, 0, n)
		return false
	}
	return true
}

// release gives back client's reader slots and bytes, and forgets a client
// that holds nothing.
func (l *limiter) release(client string, readers int, n int64) {
	l.sharesMu.Lock()
	defer l.sharesMu.Unlock()
	sh := l.shares[client]
	if sh == nil {
		return
	}
	sh.readers -= readers
	sh.bytes -= n
	if sh.readers == 0 && sh.bytes == 0 {
		delete(l.shares, client)
	}
}

// reserve takes n bytes of the body budget, or reports that it is spent.
func (l *limiter) reserve(n int64) bool {
	if l.bodies.Add(n) > l.bodyBudget {
		l.bodies.Add(-n)
		return false
	}
	return true
}

// errBodyBudget: the bodies held already use the whole budget.
var errBodyBudget = errors.New("too many request bodies held at once")

// checkIn takes a slot for a token check, or reports that max checks are
// under way (a nil limiter has room for all).
func (l *limiter) checkIn() bool {
	if l == nil {
		return true
	}
	select {
	case l.checks <- struct{}{}:
		return true
	default:
		return false
	}
}

func (l *limiter) checkOut() {
	if l != nil {
		<-l.checks
	}
}

func tooBusy(w http.ResponseWriter, r *http.Request) {
	// Close the connection: its unread body is not worth waiting for.
	w.Header().Set("Connection", "close")
	w.Header().Set("Retry-After", "1")
	writeError(w, http.StatusServiceUnavailable, ErrorDetail{"unavailable",
		"too many requests in progress; retry in a moment" + idNote(r)})
}

// preread is a request body already received: its bytes, then the error
// that ended the read (nil: EOF).
type preread struct {
	data []byte
	err  error
}

func (p *preread) Read(b []byte) (int, error) {
	if len(p.data) == 0 {
		if p.err != nil {
			return 0, p.err
		}
		return 0, io.EOF
	}
	n := copy(b, p.data)
	p.data = p.data[n:]
	return n, nil
}

func (p *preread) Close() error { return nil }

// readBody reads r to its end like io.ReadAll, but sized by the declared
// length instead of io.ReadAll's buffer grown and copied a dozen times for
// a batch of 500 clocks: up to firstRead at once, then up to four times
// what has arrived (or the rest, when that is within 1 KiB of it), never
// past the declared length (plus one byte, so that the read that meets the
// end needs no growth). A client that declares
// max_body_bytes and sends a trickle holds memory in proportion to what it
// sent, not to what it declared.
func readBody(r io.Reader, declared, limit int64) ([]byte, error) {
	return readBodyWithin(r, declared, limit, nil)
}

// readBodyWithin is readBody that asks reserve (when set) for the bytes of
// each buffer before it makes it, and stops with errBodyBudget when
// refused.
func readBodyWithin(r io.Reader, declared, limit int64, reserve func(int64) bool) ([]byte, error) {
	const firstRead = 32 << 10
	want := declared + 1 // the capacity that holds the whole body
	if declared < 0 || declared > limit {
		want = 0 // unknown: grow by doubling
	}
	first := min(max(want, 512), firstRead)
	if reserve != nil && !reserve(first) {
		return nil, errBodyBudget
	}
	b := make([]byte, 0, first)
	for {
		if len(b) == cap(b) {
			n := 2 * cap(b)
			if want > int64(len(b)) {
				n = int(min(want, 4*int64(cap(b))))
				if want-int64(n) <= 1<<10 {
					// just short of the end: all of it at once, not a
					// buffer that needs a second one of the same size to
					// see the end (a body of 8 MiB, 32 KiB × 4⁴: found by
					// review)
					n = int(want)
				}
			}
			if reserve != nil && !reserve(int64(n)) {
				return b, errBodyBudget
			}
			b = append(make([]byte, 0, n), b...)
		}
		n, err := r.Read(b[len(b):cap(b)])
		b = b[:len(b)+n]
		if err != nil {
			if err == io.EOF {
				err = nil
			}
			return b, err
		}
	}
}

// serve runs h within the limits: it receives the body (at most maxBody
// bytes) under a reader slot of client's share, then runs h under a work
// slot. A call that takes no body (!body) receives at most noBodyMax
// bytes, under no reader slot: GETs with a slow body of a read-only token
// held every reader slot (found by review).
func (l *limiter) serve(w http.ResponseWriter, r *http.Request, maxBody int64, h http.HandlerFunc, client string, body bool) {
	if l == nil {
		h(w, r)
		return
	}
	if !body {
		if r.Body != nil && r.Body != http.NoBody && r.ContentLength != 0 {
			data, err := readBody(http.MaxBytesReader(w, r.Body, noBodyMax), r.ContentLength, noBodyMax)
			r.Body = &preread{data: data, err: err}
		}
		l.serveReading(w, r, nil, "", 0, h)
		return
	}
	l.serveReading(w, r, l.readers, client, maxBody, h)
}

// serveConsole is serve for the console: its bodies are received under
// reader slots of their own.
func (l *limiter) serveConsole(w http.ResponseWriter, r *http.Request, maxBody int64, h http.HandlerFunc) {
	if l == nil {
		h(w, r)
		return
	}
	l.serveReading(w, r, l.consoleReaders, "", maxBody, h)
}

// serveReading receives the body under one of readers (none: received
// already) and within client's share ("": the console's, under readers of
// its own), then runs h under a work slot.
func (l *limiter) serveReading(w http.ResponseWriter, r *http.Request, readers chan struct{}, client string, maxBody int64, h http.HandlerFunc) {
	if readers != nil && r.Body != nil && r.Body != http.NoBody && r.ContentLength != 0 {
		if client != "" && !l.takeReader(client) {
			tooBusy(w, r)
			return
		}
		select {
		case readers <- struct{}{}:
		default:
			if client != "" {
				l.release(client, 1, 0)
			}
			tooBusy(w, r)
			return
		}
		// every buffer readBody makes counts (the old one is garbage
		// once copied, but not yet collected), until the request ends
		var held int64
		reserve := l.reserve
		if client != "" {
			reserve = func(n int64) bool { return l.reserveFor(client, n) }
		}
		data, err := readBodyWithin(http.MaxBytesReader(w, r.Body, maxBody), r.ContentLength, maxBody, func(n int64) bool {
			if !reserve(n) {
				return false
			}
			held += n
			return true
		})
		<-readers
		if client != "" {
			l.release(client, 1, 0)
			defer l.release(client, 0, held)
		}
		defer l.bodies.Add(-held)
		if errors.Is(err, errBodyBudget) {
			tooBusy(w, r)
			return
		}
		r.Body = &preread{data: data, err: err}
	}
	select {
	case l.work <- struct{}{}:
		var once sync.Once
		release := func() { once.Do(func() { <-l.work }) }
		defer release()
		h(&answerWriter{ResponseWriter: w, release: release}, r)
	default:
		tooBusy(w, r)
	}
}

// answerWriter lets go of its request's work slot when the answer starts
// to go out: the work is done by then (every handler builds its answer
// before writing it), and a client that reads its answer slowly (over
// HTTP/2, one that grants it no flow-control window) then holds its own
// connection until http.write_timeout, not a slot the other clients need.
// A stream (the console's tail) holds no slot past its first event.
type answerWriter struct {
	http.ResponseWriter
	release func()
}

func (a *answerWriter) Write(b []byte) (int, error) {
	a.release()
	return a.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the connection's writer.
func (a *answerWriter) Unwrap() http.ResponseWriter { return a.ResponseWriter }

func idNote(r *http.Request) string {
	if st := stateOf(r); st != nil {
		return " (request id " + st.id + ")"
	}
	return ""
}

// misses answers the mux's own 404 and 405 (with its Allow header) in the
// API's JSON error form, once refuse has not answered the request (a call
// without its token is told that instead).
func misses(mux *http.ServeMux, refuse func(http.ResponseWriter, *http.Request) bool) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mux.ServeHTTP(&missWriter{ResponseWriter: w, r: r, refuse: refuse}, r)
	})
}

type missWriter struct {
	http.ResponseWriter
	r       *http.Request
	refuse  func(http.ResponseWriter, *http.Request) bool
	replied bool
}

func (m *missWriter) WriteHeader(code int) {
	// r.Pattern is empty when no route matched (set by the mux before it
	// calls the handler).
	if m.r.Pattern != "" || (code != http.StatusNotFound && code != http.StatusMethodNotAllowed) {
		m.ResponseWriter.WriteHeader(code)
		return
	}
	m.replied = true
	m.Header().Del("X-Content-Type-Options")
	allow := m.Header().Get("Allow")
	m.Header().Del("Allow") // a 401 does not list the methods
	if m.refuse(m.ResponseWriter, m.r) {
		return
	}
	if allow != "" {
		m.Header().Set("Allow", allow)
	}
	if code == http.StatusNotFound {
		writeError(m.ResponseWriter, code, ErrorDetail{"not_found", "no route " + m.r.Method + " " + m.r.URL.Path})
		return
	}
	writeError(m.ResponseWriter, code, ErrorDetail{"method_not_allowed",
		"method " + m.r.Method + " is not allowed on " + m.r.URL.Path + "; allowed: " + m.Header().Get("Allow")})
}

func (m *missWriter) Write(b []byte) (int, error) {
	if m.replied {
		return len(b), nil // the mux's plain-text body, replaced
	}
	return m.ResponseWriter.Write(b)
}

func (m *missWriter) Unwrap() http.ResponseWriter { return m.ResponseWriter }

// clientError is a request body that could not be read: cut off by the
// client, or too slow for http.read_timeout.
type clientError struct{ err error }

func (e *clientError) Error() string { return "read request body: " + e.err.Error() }
func (e *clientError) Unwrap() error { return e.err }

// clientGone reports whether err is the client's doing: its body was cut
// off or too slow, or it went away before its answer.
func clientGone(r *http.Request, err error) bool {
	var ce *clientError
	if errors.As(err, &ce) {
		return true
	}
	return r.Context().Err() != nil && errors.Is(err, context.Canceled)
}

func retryAfter(d time.Duration) string {
	s := int64((d + time.Second - 1) / time.Second)
	if s < 1 {
		s = 1
	}
	return strconv.FormatInt(s, 10)
}
