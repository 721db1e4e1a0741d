package client

import (
	"context"
	"fmt"
	"iter"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// Create sets a clock. created is true when clockd answered 201 (this
// call's request made it) and false when it answered 200: an identical
// clock existed, nothing changed. That includes a clock this very call
// made on an attempt whose answer was lost, the retry then answering 200:
// do not hang a one-time side effect on created. A clock of the same key
// with other content is ErrConflict. Retried on network errors and 503
// (see the package doc).
func (c *Client) Create(ctx context.Context, n NewClock) (clock Clock, created bool, err error) {
	status, err := c.do(ctx, call{method: http.MethodPost, path: "/v1/clocks", body: n.body(), retry: true}, &clock)
	if err != nil {
		return Clock{}, false, err
	}
	return clock, status == http.StatusCreated, nil
}

// MaxBatch is the most clocks one CreateBatch may carry.
const MaxBatch = 1000

// BatchResult is the outcome of one clock of a batch.
type BatchResult struct {
	Clock   Clock
	Created bool  // 201; false with a nil Err: an identical clock existed
	Err     error // an *Error (errors.Is works) when this clock was refused or not made
}

// CreateBatch sets up to MaxBatch clocks in one request and returns one
// result per clock, in order; each is applied or refused on its own.
//
// Retried on network errors and 503 like Create (see the package doc),
// within one retry policy (Retry's attempts and backoff, Retry-After, ctx):
// a request that got no answer or a 503 is sent again whole, and when
// clockd answers with some items of status 503 (MySQL did not answer in
// time: those clocks were not made), only those items are sent again and
// their new results take their places. This is safe because a create is
// idempotent by key: a repeat answers 200 with the clock the first attempt
// made. An item still 503 once the attempts are used up or ctx ended keeps
// that error (errors.Is(r.Err, ErrUnavailable)). A 500 item (an internal
// failure of clockd: not made) is not retried, as Create does not retry a
// 500.
//
// The call fails as a whole (nil results and an error) only when no
// attempt got a batch answer (no answer, a 503 or another error for the
// whole request, to the end of its attempts). When a resend of the 503
// items fails as a whole (no answer, the context ended, another error),
// the items it carried get that error as their Err and the others keep
// the results they had. An item whose resend got no answer matches
// ErrUnavailable: its outcome is unknown; read the clock, or create it
// again.
func (c *Client) CreateBatch(ctx context.Context, clocks []NewClock) ([]BatchResult, error) {
	if len(clocks) > MaxBatch {
		return nil, fmt.Errorf("client: a batch of %d clocks: at most %d", len(clocks), MaxBatch)
	}
	bodies := make([]createBody, len(clocks))
	for i, n := range clocks {
		bodies[i] = n.body()
	}
	const path = "/v1/clocks/batch"
	out := make([]BatchResult, len(clocks))
	send := make([]int, len(clocks)) // the indexes of the clocks this attempt sends
	for i := range send {
		send[i] = i
	}
	answered := false // out holds results of an earlier attempt
	r := c.retrier(true)
	for {
		req := struct {
			Clocks []createBody `json:"clocks"`
		}{Clocks: make([]createBody, len(send))}
		for j, i := range send {
			req.Clocks[j] = bodies[i]
		}
		cl := call{method: http.MethodPost, path: path, body: req, retry: true}
		var ans batchAnswer
		payload, err := cl.encode()
		var retryAfter time.Duration
		if err == nil {
			_, retryAfter, err = c.exchange(ctx, cl, payload, &ans)
		}
		if err == nil && len(ans.Results) != len(send) {
			err = fmt.Errorf("POST %s: %d results for %d clocks", path, len(ans.Results), len(send))
		}
		if err != nil {
			if retryable(err) && r.again(ctx, retryAfter) {
				continue
			}
			if !answered {
				return nil, err
			}
			for _, i := range send {
				out[i] = BatchResult{Err: err}
			}
			return out, nil
		}
		answered = true
		var again []int
		for j, res := range ans.Results {
			i := send[j]
			out[i] = res.result(path, i, retryAfter)
			if res.Clock == nil && res.Status == http.StatusServiceUnavailable {
				again = append(again, i)
			}
		}
		if len(again) == 0 || !r.again(ctx, retryAfter) {
			return out, nil
		}
		send = again
	}
}

// batchAnswer is the JSON of a batch's answer.
type batchAnswer struct {
	Results []batchItem `json:"results"`
}

type batchItem struct {
	Status int    `json:"status"`
	Clock  *Clock `json:"clock"`
	Error  *struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

// result is the BatchResult of item i; wait is the answer's Retry-After,
// which a 429 item (over its application's quota) takes.
func (r batchItem) result(path string, i int, wait time.Duration) BatchResult {
	if r.Clock != nil && r.Status < 300 {
		return BatchResult{Clock: *r.Clock, Created: r.Status == http.StatusCreated}
	}
	e := &Error{Status: r.Status, Method: http.MethodPost, Path: path + " [" + strconv.Itoa(i) + "]"}
	if r.Error != nil {
		e.Code, e.Message = r.Error.Code, r.Error.Message
	}
	if r.Status == http.StatusTooManyRequests {
		e.RetryAfter = wait
	}
	return BatchResult{Err: e}
}

// Get reads a clock, from the history too (Archived) once it finished and
// left the clock table. Retried.
func (c *Client) Get(ctx context.Context, application, businessID string) (Clock, error) {
	return c.clockCall(ctx, http.MethodGet, clockPath(application, businessID), nil, true)
}

// Cancel cancels a pending clock: once it returned without error the clock
// never rings. ErrConflict when it is no longer pending. Not retried.
func (c *Client) Cancel(ctx context.Context, application, businessID string) (Clock, error) {
	return c.clockCall(ctx, http.MethodDelete, clockPath(application, businessID), nil, false)
}

// Reschedule changes a pending clock (its time, payload, limits or
// schedule). ErrConflict when it is no longer pending. Not retried.
func (c *Client) Reschedule(ctx context.Context, application, businessID string, ch Change) (Clock, error) {
	return c.clockCall(ctx, http.MethodPatch, clockPath(application, businessID), ch.body(), false)
}

// Replay puts an expired or dead clock back to pending, due now.
// ErrConflict when it is neither. Not retried.
func (c *Client) Replay(ctx context.Context, application, businessID string) (Clock, error) {
	return c.clockCall(ctx, http.MethodPost, clockPath(application, businessID)+"/replay", nil, false)
}

// Pause stops a pending recurring clock from ringing until Resume.
// ErrConflict when it is not a pending recurring clock. Not retried.
func (c *Client) Pause(ctx context.Context, application, businessID string) (Clock, error) {
	return c.clockCall(ctx, http.MethodPost, clockPath(application, businessID)+"/pause", nil, false)
}

// Resume lets a paused recurring clock ring again from its next
// occurrence. ErrConflict when it is not paused. Not retried.
func (c *Client) Resume(ctx context.Context, application, businessID string) (Clock, error) {
	return c.clockCall(ctx, http.MethodPost, clockPath(application, businessID)+"/resume", nil, false)
}

func (c *Client) clockCall(ctx context.Context, method, path string, body any, retry bool) (Clock, error) {
	var out Clock
	if _, err := c.do(ctx, call{method: method, path: path, body: body, retry: retry}, &out); err != nil {
		return Clock{}, err
	}
	return out, nil
}

// Query selects the clocks of List and ListPage; zero fields select all.
type Query struct {
	Application string
	Status      Status
	Recurring   *bool // only recurring clocks (true) or only one-shot ones (false)
	// Limit is the most clocks per page (1-1000; 0: the server's default,
	// 100). A page may hold fewer: clockd bounds its size in bytes.
	Limit int
	// NoPayload leaves the payloads out: smaller, faster pages.
	NoPayload bool
	// After is the cursor to start from: the Next of a previous page.
	After string
}

// Page is one answer of the list call.
type Page struct {
	Clocks []Clock
	Next   string // the cursor of the next page; empty on the last one
}

// ListPage reads one page of clocks, newest first. Retried.
func (c *Client) ListPage(ctx context.Context, q Query) (Page, error) {
	v := url.Values{}
	if q.Application != "" {
		v.Set("application", q.Application)
	}
	if q.Status != "" {
		v.Set("status", string(q.Status))
	}
	if q.Recurring != nil {
		v.Set("recurring", strconv.FormatBool(*q.Recurring))
	}
	if q.Limit > 0 {
		v.Set("limit", strconv.Itoa(q.Limit))
	}
	if q.NoPayload {
		v.Set("payload", "false")
	}
	if q.After != "" {
		v.Set("after", q.After)
	}
	var ans struct {
		Clocks []Clock `json:"clocks"`
		Next   string  `json:"next"`
	}
	if _, err := c.do(ctx, call{method: http.MethodGet, path: "/v1/clocks", query: v, retry: true}, &ans); err != nil {
		return Page{}, err
	}
	return Page{Clocks: ans.Clocks, Next: ans.Next}, nil
}

// List iterates over every clock q selects, newest first, reading page
// after page as the loop goes on:
//
//	for clock, err := range c.List(ctx, client.Query{Application: "order", Status: client.Dead}) {
//		if err != nil { return err }
//		...
//	}
//
// A failed page is yielded once as an error, and the iteration ends.
func (c *Client) List(ctx context.Context, q Query) iter.Seq2[Clock, error] {
	return func(yield func(Clock, error) bool) {
		seen := map[string]bool{}
		for {
			page, err := c.ListPage(ctx, q)
			if err != nil {
				yield(Clock{}, err)
				return
			}
			for _, cl := range page.Clocks {
				if !yield(cl, nil) {
					return
				}
			}
			if page.Next == "" {
				return
			}
			if seen[page.Next] {
				yield(Clock{}, fmt.Errorf("GET /v1/clocks: the server returned cursor %q twice", page.Next))
				return
			}
			seen[page.Next] = true
			q.After = page.Next
		}
	}
}
