package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/clockd/clockd/client"
	"github.com/clockd/clockd/internal/benchkit"
)

// api is the clockd client of the bench: the client package (transport,
// token, errors) on a transport tuned for load (connections kept alive and
// reused), without retries (a benchmark counts failures, it does not hide
// them), with create bodies built by hand (no reflection on the hot path)
// and sent as they are through client.Do.
type api struct {
	base string
	hc   *http.Client
	cl   *client.Client
}

func newAPI(base string, conns int, timeout time.Duration, token string) (*api, error) {
	tr := &http.Transport{
		Proxy:                 nil,
		DialContext:           (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:          conns * 2,
		MaxIdleConnsPerHost:   conns * 2,
		IdleConnTimeout:       90 * time.Second,
		DisableCompression:    true,
		ForceAttemptHTTP2:     false,
		ExpectContinueTimeout: 0,
	}
	hc := &http.Client{Transport: tr, Timeout: timeout}
	cl, err := client.New(base, client.WithHTTPClient(hc), client.WithToken(token),
		client.WithRetry(client.Retry{Attempts: 1}), client.WithUserAgent("clockbench"))
	if err != nil {
		return nil, err
	}
	return &api{base: base, hc: hc, cl: cl}, nil
}

func (a *api) close() { a.hc.CloseIdleConnections() }

// do sends one request with a JSON body already encoded (nil: none) and
// returns the status. The answer is written to into (reset first) when it
// is not nil: clockd's JSON for a 2xx, the error's code and message
// otherwise. A non-2xx answer is a status, not an error; an error is a
// request without an answer.
func (a *api) do(ctx context.Context, method, path string, body []byte, into *bytes.Buffer) (int, error) {
	var query url.Values
	if p, q, ok := strings.Cut(path, "?"); ok {
		v, err := url.ParseQuery(q)
		if err != nil {
			return 0, err
		}
		path, query = p, v
	}
	var b any
	if body != nil {
		b = json.RawMessage(body)
	}
	st, data, err := a.cl.Do(ctx, method, path, query, b)
	if into != nil {
		into.Reset()
	}
	var ce *client.Error
	if errors.As(err, &ce) {
		if into != nil {
			into.WriteString(ce.Code + ": " + ce.Message)
		}
		return ce.Status, nil
	}
	if err != nil {
		return 0, err
	}
	if into != nil {
		into.Write(data)
	}
	return st, nil
}

// ready checks GET /readyz.
func (a *api) ready(ctx context.Context) error {
	var buf bytes.Buffer
	st, err := a.do(ctx, http.MethodGet, "/readyz", nil, &buf)
	if err != nil {
		return fmt.Errorf("clockd at %s: %w", a.base, err)
	}
	if st != http.StatusOK {
		return fmt.Errorf("clockd at %s: /readyz answered %d: %s", a.base, st, snippet(buf.Bytes()))
	}
	return nil
}

type listedClock struct {
	ID         int64
	BusinessID string
	Status     string
	Attempts   int
	LastError  string
}

func listed(c client.Clock) listedClock {
	return listedClock{ID: c.ID, BusinessID: c.BusinessID, Status: string(c.Status), Attempts: c.Attempts, LastError: c.LastError}
}

// list reads one page of an application's clocks; status may be empty.
func (a *api) list(ctx context.Context, app, status string, limit int, after string) ([]listedClock, string, error) {
	page, err := a.cl.ListPage(ctx, client.Query{Application: app, Status: client.Status(status), Limit: limit,
		After: after, NoPayload: true})
	if err != nil {
		return nil, "", fmt.Errorf("list %s: %w", app, err)
	}
	out := make([]listedClock, len(page.Clocks))
	for i, c := range page.Clocks {
		out[i] = listed(c)
	}
	return out, page.Next, nil
}

// httpStatusOf is the HTTP status of a call's outcome (0: no answer).
func httpStatusOf(err error) int {
	var ce *client.Error
	switch {
	case err == nil:
		return http.StatusOK
	case errors.As(err, &ce):
		return ce.Status
	}
	return 0
}

// get reads one clock; a non-2xx answer is a status, not an error.
func (a *api) get(ctx context.Context, app, bid string) (listedClock, int, error) {
	c, err := a.cl.Get(ctx, app, bid)
	if st := httpStatusOf(err); st != 0 {
		return listed(c), st, nil
	}
	return listedClock{}, 0, err
}

// cancel cancels one clock; a non-2xx answer is a status, not an error.
func (a *api) cancel(ctx context.Context, app, bid string) (int, error) {
	_, err := a.cl.Cancel(ctx, app, bid)
	if st := httpStatusOf(err); st != 0 {
		return st, nil
	}
	return 0, err
}

// clockSpec is one clock to create.
type clockSpec struct {
	businessID  string
	payload     []byte
	ringAt      time.Time
	maxAttempts int
}

// appendJSONString appends s as a JSON string.
func appendJSONString(b []byte, s []byte) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	for _, c := range s {
		switch {
		case c == '"' || c == '\\':
			b = append(b, '\\', c)
		case c < 0x20:
			b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
		default:
			b = append(b, c)
		}
	}
	return append(b, '"')
}

// appendClock appends the JSON create body of one clock.
func appendClock(b []byte, app string, c *clockSpec) []byte {
	b = append(b, `{"application":`...)
	b = appendJSONString(b, []byte(app))
	b = append(b, `,"business_id":`...)
	b = appendJSONString(b, []byte(c.businessID))
	b = append(b, `,"payload":`...)
	b = appendJSONString(b, c.payload)
	b = append(b, `,"ring_at":"`...)
	b = c.ringAt.UTC().AppendFormat(b, "2006-01-02T15:04:05.000Z07:00")
	b = append(b, '"')
	if c.maxAttempts > 0 {
		b = append(b, `,"max_attempts":`...)
		b = strconv.AppendInt(b, int64(c.maxAttempts), 10)
	}
	return append(b, '}')
}

func appendBatch(b []byte, app string, cs []clockSpec) []byte {
	b = append(b, `{"clocks":[`...)
	for i := range cs {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendClock(b, app, &cs[i])
	}
	return append(b, "]}"...)
}

// makePayload returns a JSON payload of about size bytes naming clock key.
func makePayload(key string, size int) []byte {
	b := []byte(`{"bench":`)
	b = appendJSONString(b, []byte(key))
	if pad := size - len(b) - 9; pad > 0 {
		b = append(b, `,"pad":"`...)
		b = append(b, bytes.Repeat([]byte{'x'}, pad)...)
		b = append(b, '"')
	}
	return append(b, '}')
}

// batchResult is the answer of POST /v1/clocks/batch, reduced to what the
// bench uses.
type batchResult struct {
	Results []struct {
		Status int `json:"status"`
		Clock  *struct {
			ID         int64  `json:"id"`
			BusinessID string `json:"business_id"`
		} `json:"clock"`
		Error *struct {
			Code    string `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	} `json:"results"`
}

var status201 = []byte(`"status":201`)

// errCounter tallies errors by kind and keeps the first few messages.
type errCounter struct {
	mu      sync.Mutex
	total   int
	kinds   map[string]int
	samples []string
}

func (e *errCounter) add(kind, sample string, n int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.kinds == nil {
		e.kinds = map[string]int{}
	}
	e.total += n
	e.kinds[kind] += n
	if len(e.samples) < 5 {
		e.samples = append(e.samples, kind+": "+sample)
	}
}

func (e *errCounter) addHTTP(status int, err error, body []byte) {
	if err != nil {
		e.add(errKind(err), err.Error(), 1)
		return
	}
	e.add("http "+strconv.Itoa(status), snippet(body), 1)
}

func errKind(err error) string {
	var ne net.Error
	switch {
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
		return "timeout"
	case errors.Is(err, context.Canceled):
		return "cancelled"
	default:
		return "transport"
	}
}

func snippet(b []byte) string {
	s := strings.TrimSpace(string(b))
	if len(s) > 300 {
		s = s[:300] + "..."
	}
	return s
}

// CreateResult holds the figures of the create, batch and backlog scenarios.
type CreateResult struct {
	Application  string         `json:"application"`
	Clients      int            `json:"clients"`
	BatchSize    int            `json:"batch_size,omitempty"`
	DurationS    float64        `json:"duration_s"`
	ElapsedS     float64        `json:"elapsed_s"`
	Requests     int            `json:"requests"`
	Clocks       int            `json:"clocks_created"`
	Errors       int            `json:"errors"`
	ErrorKinds   map[string]int `json:"error_kinds,omitempty"`
	ErrorSamples []string       `json:"error_samples,omitempty"`
	Rate         float64        `json:"clocks_per_s"`
	RequestRate  float64        `json:"requests_per_s"`
	Latency      Summary        `json:"request_latency"`
	LatencyHist  []Bucket       `json:"request_latency_histogram,omitempty"`
	Timeline     *TimelineJSON  `json:"timeline,omitempty"`
	Note         string         `json:"note,omitempty"`
}

// runCreate measures single-clock creates from cfg.clients clients. The
// clocks ring in 24 h with max_attempts 1 under an application nobody
// binds, so they never disturb a later run: they die after one unroutable
// attempt.
func runCreate(ctx context.Context, cfg *config, a *api, app string, logf func(string, ...any)) (*CreateResult, error) {
	start := time.Now()
	deadline := start.Add(cfg.duration)
	ringAt := start.Add(24 * time.Hour).Truncate(time.Millisecond)
	tl := newTimeline(start, 100*time.Millisecond)
	var errs errCounter
	lats := make([][]time.Duration, cfg.clients)
	var created atomic.Int64
	var wg sync.WaitGroup
	for w := range cfg.clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var body []byte
			var resp bytes.Buffer
			prefix := "c" + strconv.Itoa(w) + "-"
			payload := makePayload(app, cfg.payloadSize)
			lat := make([]time.Duration, 0, 1<<14)
			for seq := 0; ctx.Err() == nil && time.Now().Before(deadline); seq++ {
				spec := clockSpec{businessID: prefix + strconv.Itoa(seq), payload: payload, ringAt: spreadHour(ringAt, w, seq), maxAttempts: 1}
				body = appendClock(body[:0], app, &spec)
				t0 := time.Now()
				st, err := a.do(ctx, http.MethodPost, "/v1/clocks", body, &resp)
				t1 := time.Now()
				if ctx.Err() != nil {
					break
				}
				lat = append(lat, t1.Sub(t0))
				if err == nil && st == http.StatusCreated {
					created.Add(1)
					tl.Add("create", t1, 1)
				} else {
					errs.addHTTP(st, err, resp.Bytes())
				}
			}
			lats[w] = lat
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	all := slices.Concat(lats...)
	res := &CreateResult{
		Application: app, Clients: cfg.clients, DurationS: cfg.duration.Seconds(), ElapsedS: elapsed.Seconds(),
		Requests: len(all), Clocks: int(created.Load()), Errors: errs.total, ErrorKinds: errs.kinds, ErrorSamples: errs.samples,
		Rate: rate(int(created.Load()), elapsed), RequestRate: rate(len(all), elapsed),
		Timeline: tl.Export(),
		Note: fmt.Sprintf("clocks left pending under application %s, due within the hour after %s with max_attempts 1 (they die after one unroutable attempt)",
			app, ringAt.UTC().Format(time.RFC3339)),
	}
	res.Latency = benchkit.Summarize(all)
	res.LatencyHist = histogram(all)
	logf("create: %d clocks in %.1fs = %.0f/s, p99 %.1f ms, %d errors", res.Clocks, res.ElapsedS, res.Rate, res.Latency.P99, res.Errors)
	return res, nil
}

// spreadHour spreads the far-future clocks of the create scenarios over an
// hour, as real ring times are, rather than piling them on one index key.
func spreadHour(base time.Time, worker, seq int) time.Time {
	h := (uint64(worker)*1_000_003 + uint64(seq)) * 2_654_435_761
	return base.Add(time.Duration(h%3_600_000) * time.Millisecond)
}

// batchCreator posts batches of clocks and tallies the outcome.
type batchCreator struct {
	a      *api
	app    string
	errs   errCounter
	tl     *Timeline
	series string
	// wantIDs decodes every answer and records the clock ids.
	wantIDs bool
	// existing counts clocks answered 200: an identical clock was there.
	existing atomic.Int64
}

// post creates one batch and returns, when wantIDs, the id of each clock
// (0 for a clock not created), and the number created.
func (bc *batchCreator) post(ctx context.Context, cs []clockSpec, body []byte, resp *bytes.Buffer) ([]int64, int, time.Duration, []byte) {
	body = appendBatch(body[:0], bc.app, cs)
	t0 := time.Now()
	st, err := bc.a.do(ctx, http.MethodPost, "/v1/clocks/batch", body, resp)
	t1 := time.Now()
	lat := t1.Sub(t0)
	if err != nil || st != http.StatusOK {
		if ctx.Err() == nil {
			bc.errs.addHTTP(st, err, resp.Bytes())
			if len(cs) > 1 {
				bc.errs.add("clocks in failed batches", "", len(cs)-1)
			}
		}
		return nil, 0, lat, body
	}
	if !bc.wantIDs && bytes.Count(resp.Bytes(), status201) == len(cs) {
		if bc.tl != nil {
			bc.tl.Add(bc.series, t1, len(cs))
		}
		return nil, len(cs), lat, body
	}
	var r batchResult
	if err := json.Unmarshal(resp.Bytes(), &r); err != nil {
		bc.errs.add("bad batch answer", err.Error(), len(cs))
		return nil, 0, lat, body
	}
	if len(r.Results) != len(cs) {
		bc.errs.add("bad batch answer", fmt.Sprintf("%d results for %d clocks", len(r.Results), len(cs)), len(cs))
		return nil, 0, lat, body
	}
	ids := make([]int64, len(cs))
	ok := 0
	for i, x := range r.Results {
		switch {
		case (x.Status == http.StatusCreated || x.Status == http.StatusOK) && x.Clock != nil:
			ids[i] = x.Clock.ID
			ok++
			if x.Status == http.StatusOK {
				bc.existing.Add(1)
			}
		default:
			msg := ""
			if x.Error != nil {
				msg = x.Error.Code + ": " + x.Error.Message
			}
			bc.errs.add("item "+strconv.Itoa(x.Status), msg, 1)
		}
	}
	if bc.tl != nil {
		bc.tl.Add(bc.series, t1, ok)
	}
	return ids, ok, lat, body
}

// runBatch measures batch creates from cfg.batchClients clients.
func runBatch(ctx context.Context, cfg *config, a *api, app string, logf func(string, ...any)) (*CreateResult, error) {
	start := time.Now()
	deadline := start.Add(cfg.duration)
	ringAt := start.Add(24 * time.Hour).Truncate(time.Millisecond)
	tl := newTimeline(start, 100*time.Millisecond)
	bc := &batchCreator{a: a, app: app, tl: tl, series: "create"}
	lats := make([][]time.Duration, cfg.batchClients)
	var created atomic.Int64
	var wg sync.WaitGroup
	payload := makePayload(app, cfg.payloadSize)
	for w := range cfg.batchClients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var body []byte
			var resp bytes.Buffer
			cs := make([]clockSpec, cfg.batchSize)
			prefix := "b" + strconv.Itoa(w) + "-"
			var lat []time.Duration
			for seq := 0; ctx.Err() == nil && time.Now().Before(deadline); {
				for i := range cs {
					cs[i] = clockSpec{businessID: prefix + strconv.Itoa(seq), payload: payload, ringAt: spreadHour(ringAt, w, seq), maxAttempts: 1}
					seq++
				}
				var n int
				var l time.Duration
				_, n, l, body = bc.post(ctx, cs, body, &resp)
				if ctx.Err() != nil {
					break
				}
				lat = append(lat, l)
				created.Add(int64(n))
			}
			lats[w] = lat
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	all := slices.Concat(lats...)
	res := &CreateResult{
		Application: app, Clients: cfg.batchClients, BatchSize: cfg.batchSize, DurationS: cfg.duration.Seconds(), ElapsedS: elapsed.Seconds(),
		Requests: len(all), Clocks: int(created.Load()), Errors: bc.errs.total, ErrorKinds: bc.errs.kinds, ErrorSamples: bc.errs.samples,
		Rate: rate(int(created.Load()), elapsed), RequestRate: rate(len(all), elapsed),
		Timeline: tl.Export(),
		Note:     fmt.Sprintf("clocks left pending under application %s, due within the hour after %s with max_attempts 1", app, ringAt.UTC().Format(time.RFC3339)),
	}
	res.Latency = benchkit.Summarize(all)
	logf("batch: %d clocks in %.1fs = %.0f/s (%d per batch, %d clients), batch p99 %.1f ms, %d errors",
		res.Clocks, res.ElapsedS, res.Rate, cfg.batchSize, cfg.batchClients, res.Latency.P99, res.Errors)
	return res, nil
}

// BacklogResult describes the insert of the far-future backlog.
type BacklogResult struct {
	Application  string         `json:"application"`
	Target       int            `json:"target"`
	ResumedFrom  int            `json:"resumed_from"`
	Skipped      bool           `json:"skipped"`
	Inserted     int            `json:"inserted"`
	Present      int            `json:"already_present"`
	Errors       int            `json:"errors"`
	ErrorKinds   map[string]int `json:"error_kinds,omitempty"`
	ErrorSamples []string       `json:"error_samples,omitempty"`
	ElapsedS     float64        `json:"elapsed_s"`
	Rate         float64        `json:"clocks_per_s"`
	TimedOut     bool           `json:"timed_out"`
	Note         string         `json:"note,omitempty"`
}

// backlogBase is the first ring time of the backlog: years ahead, fixed so
// that a re-run creates identical clocks (idempotent 200s) when it resumes.
var backlogBase = time.Date(2036, 1, 1, 0, 0, 0, 0, time.UTC)

func backlogID(i int) string { return fmt.Sprintf("bl-%09d", i) }

// runBacklog inserts cfg.backlog pending clocks years ahead. Business ids
// and ring times are deterministic, so an interrupted insert resumes from
// the newest clock present (minus the batches that may have been in
// flight; re-creating an identical clock answers 200).
func runBacklog(ctx context.Context, cfg *config, a *api, logf func(string, ...any)) (*BacklogResult, error) {
	app := cfg.backlogApp
	res := &BacklogResult{Application: app, Target: cfg.backlog}
	newest, _, err := a.list(ctx, app, "", 1, "")
	if err != nil {
		return nil, fmt.Errorf("backlog: %w", err)
	}
	from := 0
	if len(newest) > 0 {
		if cfg.backlogSkip {
			res.Skipped = true
			res.Note = "application already has clocks (newest " + newest[0].BusinessID + "); insert skipped"
			logf("backlog: %s", res.Note)
			return res, nil
		}
		if i, err := strconv.Atoi(strings.TrimPrefix(newest[0].BusinessID, "bl-")); err == nil {
			from = max(0, i+1-2*cfg.batchClients*cfg.batchSize)
		}
	}
	res.ResumedFrom = from
	if from >= cfg.backlog {
		res.Note = "backlog already complete"
		logf("backlog: %s (newest %s)", res.Note, newest[0].BusinessID)
		return res, nil
	}
	bctx, cancel := context.WithTimeout(ctx, cfg.backlogTimeout)
	defer cancel()
	start := time.Now()
	bc := &batchCreator{a: a, app: app}
	var next atomic.Int64
	next.Store(int64(from))
	var inserted atomic.Int64
	payload := makePayload(app, cfg.payloadSize)
	var wg sync.WaitGroup
	done := make(chan struct{})
	go func() { // progress
		t := time.NewTicker(10 * time.Second)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				n := inserted.Load()
				logf("backlog: %d/%d inserted, %.0f/s", int(n)+from, cfg.backlog, rate(int(n), time.Since(start)))
			}
		}
	}()
	for range cfg.batchClients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var body []byte
			var resp bytes.Buffer
			cs := make([]clockSpec, 0, cfg.batchSize)
			for bctx.Err() == nil {
				lo := int(next.Add(int64(cfg.batchSize))) - cfg.batchSize
				if lo >= cfg.backlog {
					return
				}
				hi := min(lo+cfg.batchSize, cfg.backlog)
				cs = cs[:0]
				for i := lo; i < hi; i++ {
					cs = append(cs, clockSpec{businessID: backlogID(i), payload: payload, ringAt: backlogBase.Add(time.Duration(i) * 3 * time.Second)})
				}
				var n int
				_, n, _, body = bc.post(bctx, cs, body, &resp)
				inserted.Add(int64(n))
			}
		}()
	}
	wg.Wait()
	close(done)
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	elapsed := time.Since(start)
	res.TimedOut = bctx.Err() != nil
	res.Present = int(bc.existing.Load())
	res.Inserted = int(inserted.Load()) - res.Present
	res.Errors, res.ErrorKinds, res.ErrorSamples = bc.errs.total, bc.errs.kinds, bc.errs.samples
	res.ElapsedS = elapsed.Seconds()
	res.Rate = rate(res.Inserted+res.Present, elapsed)
	res.Note = fmt.Sprintf("pending clocks due from %s on, one every 3 s", backlogBase.Format(time.DateOnly))
	if res.TimedOut {
		res.Note += "; stopped by -backlog-timeout (run again to resume)"
	}
	logf("backlog: %d clocks inserted (%d were already there) in %.1fs = %.0f/s, %d errors%s", res.Inserted, res.Present, res.ElapsedS, res.Rate, res.Errors,
		map[bool]string{true: " (timed out)", false: ""}[res.TimedOut])
	return res, nil
}

// sortedKinds returns the keys of m in order, for stable output.
func sortedKinds(m map[string]int) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
