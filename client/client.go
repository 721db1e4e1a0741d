// Package client is the Go client of clockd's REST API.
//
//	c, err := client.New("http://127.0.0.1:8080", client.WithToken(os.Getenv("CLOCKD_TOKEN")))
//	if err != nil { ... }
//	clock, created, err := c.Create(ctx, client.NewClock{
//		Application: "order", BusinessID: "o-123", Payload: `{"order":123}`, Delay: 30 * time.Minute,
//	})
//	switch {
//	case errors.Is(err, client.ErrConflict): // o-123 exists with other content
//	case err != nil: // ...
//	}
//
// Every call takes a context and honours its deadline and cancellation.
// Errors answered by clockd are *Error values; test them with errors.Is
// against ErrNotFound, ErrConflict, ErrInvalid, ErrUnavailable,
// ErrOverQuota, ErrUnauthenticated and ErrPermissionDenied.
//
// # No answer: the outcome is unknown
//
// A call whose request got no answer matches ErrUnavailable: clockd may
// have received and applied it, or not. That is a network error, and also
// a change (every call but the reads: Create, CreateBatch, Cancel,
// Reschedule, Replay, Pause, Resume, SetQuota, CreateToken, RevokeToken)
// whose context ended (deadline or cancel) after its request was sent and
// before its answer came: its error matches both the context's error
// (errors.Is(err, context.DeadlineExceeded) or context.Canceled) and
// ErrUnavailable. A read cut by its context returns the context's error
// alone (nothing to find out), and so does any call whose context had
// ended before it was sent (it was not sent: nothing happened). A 503
// answer (ErrUnavailable too) means the change was not made, except one
// whose message says its outcome is unknown. A 5xx that is not clockd's
// (without its error body: a proxy's 502 or 504) is no answer of clockd
// either: it matches ErrUnavailable, of unknown outcome.
//
// A redirect (3xx) is never followed: followed, a 301 or 302 turns a
// change into a GET without its body. It is an *Error of its status,
// naming where it points, matching none of the kinds: nothing was done.
//
// # Retries
//
// Calls that are safe to repeat are retried, with capped exponential
// backoff and jitter (Retry; a Retry-After of clockd is waited instead),
// while their context lasts, when the request did not get an answer (a
// network error) or got 503 Unavailable (or a proxy's 5xx): Create and CreateBatch, because
// clockd is idempotent by key — a create repeated with the same content
// answers 200 with the clock the first attempt made, never a second clock
// (and 409 only if the key holds different content) — and the reads (Get,
// List, Tokens, Quota, Cluster) and SetQuota (a PUT of the whole quota).
// CreateBatch also sends again, alone, the items that clockd answered 503
// within a 200 answer (see CreateBatch).
//
// Cancel, Reschedule, Replay, Pause, Resume, CreateToken and RevokeToken are
// NOT retried: their second attempt, after a first one that was applied but
// whose answer was lost, would answer 409 (the clock is no longer pending,
// no longer dead, already paused), move a clock a second time (a delay
// counts from the moment it is received) or make a second token. When one
// of them fails with ErrUnavailable — no answer (a network error, or its
// context ended while it waited for the answer) or a 503 — read the clock
// (Get) to learn whether it was applied. A 429 (ErrOverQuota) is never
// retried either: it carries RetryAfter for the caller to decide.
package client

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// Client calls one clockd (or a load balancer in front of several). It is
// safe for concurrent use.
type Client struct {
	base      string // scheme://host[:port][/prefix], no trailing slash
	http      *http.Client
	token     string
	userAgent string
	retry     Retry
}

// Retry says how retryable calls are repeated (see the package doc).
type Retry struct {
	// Attempts is the most attempts of one call, the first included; 1
	// disables retries. Default 4.
	Attempts int
	// Min and Max bound the wait before each repeat, which doubles from
	// Min up to Max, with jitter. Defaults 100ms and 2s. A 503 carrying
	// Retry-After waits that long instead (at most Max).
	Min, Max time.Duration
	// Timeout bounds one attempt, so that a server or proxy that accepts
	// the request and never answers does not hold a call without a
	// context deadline for ever, nor use up a deadline in one attempt.
	// An attempt cut by it is a network error: repeated when the call is
	// retried, of unknown outcome (ErrUnavailable) when not; it does not
	// match the context's errors, since the call's context did not end
	// (context.DeadlineExceeded is for a call whose context did). Default 40s
	// (more than clockd's longest answer: its MySQL request timeout plus
	// the time to resolve a lost COMMIT).
	Timeout time.Duration
}

// Option configures a Client.
type Option func(*Client) error

// WithToken sends token as "Authorization: Bearer <token>" (needed when
// clockd runs with auth.mode tokens). An empty token sends none.
func WithToken(token string) Option {
	return func(c *Client) error { c.token = strings.TrimSpace(token); return nil }
}

// WithCACert trusts the CA certificates in pem (PEM) for an https:// base
// URL, for a clockd whose certificate a private CA signed.
func WithCACert(pem []byte) Option {
	return func(c *Client) error {
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return errors.New("client: no PEM certificate in the CA given")
		}
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
		c.http = &http.Client{Transport: tr, CheckRedirect: noRedirects}
		return nil
	}
}

// WithHTTPClient sends requests through h (its transport, proxy, TLS
// settings, timeout) instead of a client of net/http's defaults. Its
// redirect policy is not used: a redirect is never followed (see
// noRedirects).
func WithHTTPClient(h *http.Client) Option {
	return func(c *Client) error {
		hc := *h
		hc.CheckRedirect = noRedirects
		c.http = &hc
		return nil
	}
}

// noRedirects is the client's redirect policy: a 3xx answer is returned as
// it is, and Do makes it an error naming where it points. Followed, a 301
// or 302 turns a POST, PATCH or DELETE into a GET without its body, whose
// 200 was taken for the change's answer: a cancel was reported done and
// the clock still rang (found by review).
func noRedirects(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }

// WithRetry replaces the retry policy; zero fields keep their defaults.
func WithRetry(r Retry) Option {
	return func(c *Client) error {
		if r.Attempts > 0 {
			c.retry.Attempts = r.Attempts
		}
		if r.Min > 0 {
			c.retry.Min = r.Min
		}
		if r.Max > 0 {
			c.retry.Max = r.Max
		}
		if r.Timeout > 0 {
			c.retry.Timeout = r.Timeout
		}
		return nil
	}
}

// WithUserAgent sets the User-Agent header (default "clockd-go-client").
func WithUserAgent(ua string) Option {
	return func(c *Client) error { c.userAgent = ua; return nil }
}

// New returns a client of the clockd at baseURL ("http://host:port" or
// "https://host:port", optionally with a path prefix; "host:port" means
// http).
func New(baseURL string, opts ...Option) (*Client, error) {
	addr := strings.TrimSpace(baseURL)
	if addr == "" {
		return nil, errors.New("client: the base URL is empty")
	}
	if !strings.Contains(addr, "://") {
		addr = "http://" + addr
	}
	u, err := url.Parse(addr)
	if err != nil {
		return nil, fmt.Errorf("client: base URL %q: %w", baseURL, err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("client: base URL %q: want http://host:port or https://host:port", baseURL)
	}
	if u.RawQuery != "" || u.Fragment != "" {
		return nil, fmt.Errorf("client: base URL %q must not have a query or a fragment", baseURL)
	}
	c := &Client{
		base:      strings.TrimRight(u.String(), "/"),
		http:      &http.Client{CheckRedirect: noRedirects},
		userAgent: "clockd-go-client",
		retry:     Retry{Attempts: 4, Min: 100 * time.Millisecond, Max: 2 * time.Second, Timeout: 40 * time.Second},
	}
	for _, o := range opts {
		if err := o(c); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// call is one API call: what to send and whether it may be repeated.
type call struct {
	method string
	path   string
	query  url.Values
	body   any
	retry  bool
}

// do sends a call, repeating it when it may be, decodes a 2xx answer into
// out (when not nil) and returns its status.
func (c *Client) do(ctx context.Context, cl call, out any) (int, error) {
	payload, err := cl.encode()
	if err != nil {
		return 0, err
	}
	r := c.retrier(cl.retry)
	for {
		status, retryAfter, err := c.exchange(ctx, cl, payload, out)
		if err == nil || !retryable(err) || !r.again(ctx, retryAfter) {
			return status, err
		}
	}
}

// encode returns the JSON of the call's body; nil when it has none.
func (cl call) encode() ([]byte, error) {
	switch b := cl.body.(type) {
	case nil:
		return nil, nil
	case json.RawMessage:
		return b, nil // encoded by the caller (Do)
	default:
		data, err := json.Marshal(cl.body)
		if err != nil {
			return nil, fmt.Errorf("%s %s: encode request: %w", cl.method, cl.path, err)
		}
		return data, nil
	}
}

// exchange makes one attempt of a call and decodes a 2xx answer into out
// (when not nil). retryAfter is the answer's Retry-After, 0 without one.
func (c *Client) exchange(ctx context.Context, cl call, payload []byte, out any) (status int, retryAfter time.Duration, err error) {
	status, data, retryAfter, err := c.once(ctx, cl, payload)
	if err != nil {
		return status, retryAfter, err
	}
	if raw, ok := out.(*json.RawMessage); ok {
		*raw = data // as it came (Do): no second pass over a large answer
		return status, retryAfter, nil
	}
	if out != nil && len(data) > 0 {
		if err := json.Unmarshal(data, out); err != nil {
			return status, 0, fmt.Errorf("%s %s: decode answer: %w", cl.method, cl.path, err)
		}
	}
	return status, retryAfter, nil
}

// retrier counts the attempts of one call under the client's retry policy
// and waits between them.
type retrier struct {
	policy   Retry
	attempts int // the most attempts: 1 for a call that is not retried
	n        int // attempts made
	wait     time.Duration
}

func (c *Client) retrier(retry bool) *retrier {
	r := &retrier{policy: c.retry, attempts: 1, n: 1, wait: c.retry.Min}
	if retry {
		r.attempts = max(c.retry.Attempts, 1)
	}
	return r
}

// again waits before the next attempt (retryAfter, at most Retry.Max,
// when the server asked for it; else the backoff) and reports whether it
// may be made: false when the attempts are used up or ctx ended.
func (r *retrier) again(ctx context.Context, retryAfter time.Duration) bool {
	if r.n >= r.attempts || ctx.Err() != nil {
		return false
	}
	d := jitter(r.wait)
	if retryAfter > 0 {
		d = min(retryAfter, r.policy.Max)
	}
	r.wait = min(r.wait*2, r.policy.Max)
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
	}
	r.n++
	return true
}

// jitter returns a wait between d/2 and d, so that clients that failed
// together do not come back together.
func jitter(d time.Duration) time.Duration {
	if d <= 1 {
		return d
	}
	return d/2 + rand.N(d/2+1)
}

// retryable says whether a failed attempt may be repeated: no answer at
// all, a 503, or a proxy's 5xx (see Error.Is).
func retryable(err error) bool {
	var e *Error
	if errors.As(err, &e) {
		return e.Is(ErrUnavailable)
	}
	var ne *netError
	return errors.As(err, &ne)
}

// netError is a request that got no answer: its outcome is unknown.
type netError struct{ err error }

func (e *netError) Error() string { return e.err.Error() }
func (e *netError) Unwrap() []error {
	return []error{e.err, ErrUnavailable}
}

// cutShort is the error of a request that ctx ended after it was handed
// to the transport and before its answer was read: the context's error,
// which a read returns as it is. Any other call may have reached clockd
// and been applied, so its error is a request without an answer too: it
// matches ErrUnavailable as well (outcome unknown).
func cutShort(ctx context.Context, cl call) error {
	if cl.method == http.MethodGet || cl.method == http.MethodHead {
		return fmt.Errorf("%s %s: %w", cl.method, cl.path, ctxError(ctx))
	}
	return &netError{fmt.Errorf("%s %s: no answer before the context ended, outcome unknown: %w",
		cl.method, cl.path, ctxError(ctx))}
}

// ctxError is the error of an ended ctx: ctx.Err(), with its cause when
// it was given one, so that errors.Is finds both.
func ctxError(ctx context.Context) error {
	err, cause := ctx.Err(), context.Cause(ctx)
	if cause == nil || cause == err {
		return err
	}
	return fmt.Errorf("%w (%w)", err, cause)
}

// attemptCause is the cause of a failed attempt whose call's context did
// not end: err, said to be Retry.Timeout's doing when the attempt's
// context actx ended. It never matches context.DeadlineExceeded or
// context.Canceled (an attempt's deadline, or an http.Client's own
// Timeout, would): callers test for those to learn that their context
// ended, and it did not.
func (c *Client) attemptCause(actx context.Context, err error) error {
	if actx.Err() != nil {
		return fmt.Errorf("no answer within %s (Retry.Timeout): %v", c.retry.Timeout, err)
	}
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return errors.New(err.Error())
	}
	return err
}

// maxAnswer bounds what the client reads of one answer.
const maxAnswer = 64 << 20

func (c *Client) once(ctx context.Context, cl call, payload []byte) (status int, data []byte, retryAfter time.Duration, err error) {
	target := c.base + cl.path
	if len(cl.query) > 0 {
		target += "?" + cl.query.Encode()
	}
	if ctx.Err() != nil {
		// Not sent: its outcome is known (nothing happened).
		return 0, nil, 0, fmt.Errorf("%s %s: %w", cl.method, cl.path, ctxError(ctx))
	}
	var body io.Reader
	if payload != nil {
		body = bytes.NewReader(payload)
	}
	actx, cancel := context.WithTimeout(ctx, c.retry.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(actx, cl.method, target, body)
	if err != nil {
		return 0, nil, 0, fmt.Errorf("%s %s: %w", cl.method, cl.path, err)
	}
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", c.userAgent)
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	if payload != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.http.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return 0, nil, 0, cutShort(ctx, cl)
		}
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return 0, nil, 0, &netError{fmt.Errorf("%s %s: %w", cl.method, target, c.attemptCause(actx, err))}
	}
	defer resp.Body.Close()
	data, err = io.ReadAll(io.LimitReader(resp.Body, maxAnswer))
	if err != nil {
		if ctx.Err() != nil {
			return resp.StatusCode, nil, 0, cutShort(ctx, cl)
		}
		return resp.StatusCode, nil, 0, &netError{fmt.Errorf("%s %s: read answer: %w", cl.method, target, c.attemptCause(actx, err))}
	}
	if s := resp.Header.Get("Retry-After"); s != "" {
		if secs, err := strconv.Atoi(s); err == nil && secs >= 0 {
			retryAfter = time.Duration(secs) * time.Second
		}
	}
	if resp.StatusCode >= 200 && resp.StatusCode <= 299 {
		// A Retry-After here is for the items of a batch answered 503.
		return resp.StatusCode, data, retryAfter, nil
	}
	e := decodeError(resp.StatusCode, data)
	e.Method, e.Path, e.RetryAfter = cl.method, cl.path, retryAfter
	if resp.StatusCode >= 300 && resp.StatusCode <= 399 {
		// not clockd's answer: nothing was done, and nothing is retried
		e.Message = fmt.Sprintf("redirected to %q, which is not followed (a change would be lost on the way): "+
			"give the client the address clockd answers on", resp.Header.Get("Location"))
	}
	return resp.StatusCode, nil, e.RetryAfter, e
}

// Do sends one request to path (below the base URL, e.g. "/v1/cluster")
// with body (when not nil) as JSON (a json.RawMessage is sent as it is),
// and returns the status and the JSON of
// a 2xx answer as it came, or an *Error. It is for tools that show clockd's
// answers as they are (clockctl); applications use the typed calls. GET and
// PUT requests and the creates (POST /v1/clocks, POST /v1/clocks/batch) are
// retried as the typed calls are, a batch as a whole only (its items
// answered 503 are in the answer, not sent again as CreateBatch does);
// other requests are not.
func (c *Client) Do(ctx context.Context, method, path string, query url.Values, body any) (int, json.RawMessage, error) {
	retry := method == http.MethodGet || method == http.MethodPut ||
		(method == http.MethodPost && (path == "/v1/clocks" || path == "/v1/clocks/batch"))
	var raw json.RawMessage
	status, err := c.do(ctx, call{method: method, path: path, query: query, body: body, retry: retry}, &raw)
	return status, raw, err
}

func clockPath(app, businessID string) string {
	return "/v1/clocks/" + url.PathEscape(app) + "/" + url.PathEscape(businessID)
}
