package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"regexp"
	"strconv"
	"time"

	"github.com/clockd/clockd/internal/alarm"
	"github.com/clockd/clockd/internal/auth"
)

func itoa(n int) string { return strconv.Itoa(n) }

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, code int, d ErrorDetail) {
	writeJSON(w, code, ErrorBody{Error: d})
}

func (a *api) fail(w http.ResponseWriter, r *http.Request, err error) {
	if clientGone(r, err) {
		// The client's doing: counted apart (499), not logged as a failure.
		if st := stateOf(r); st != nil {
			st.clientGone = true
		}
		a.log.Debug("client went away or cut its body off", "method", r.Method, "path", r.URL.Path, "request_id", requestIDOf(r), "err", err)
		writeError(w, http.StatusBadRequest, ErrorDetail{"invalid_argument",
			"the request body was cut off, or did not arrive within the server's read timeout"})
		return
	}
	code, d := publicDetail(r, err)
	a.logFailure(r, code, d.Code, err)
	switch code {
	case http.StatusUnauthorized:
		challenge := `Bearer realm="clockd"`
		if r.Header.Get("Authorization") != "" {
			challenge += `, error="invalid_token"`
		}
		w.Header().Set("WWW-Authenticate", challenge)
	case http.StatusTooManyRequests:
		w.Header().Set("Retry-After", retryAfter(retryWait(err)))
	case http.StatusServiceUnavailable:
		// MySQL or the broker did not answer: a retry in a moment may
		// find them back (as after the concurrency cap's 503)
		w.Header().Set("Retry-After", "1")
	}
	writeError(w, code, d)
}

// failureLogEvery is how often a request failure of one kind (route,
// status and error code) is logged at WARN: during an outage every request
// fails alike, and one line in so many seconds, with the count of those
// held back, says as much as thousands.
const failureLogEvery = 10 * time.Second

// logFailure logs a request answered 5xx (with attrs): at WARN at most
// once per failureLogEvery for each route, status and error code, the
// others at DEBUG (where a request id can still be traced).
func (a *api) logFailure(r *http.Request, code int, errCode string, err error, attrs ...any) {
	if code < 500 {
		return
	}
	args := []any{"method", r.Method, "path", r.URL.Path, "status", code, "request_id", requestIDOf(r), "err", err}
	ok, heldBack := a.failLog.Allow(r.Method+" "+r.Pattern+" "+strconv.Itoa(code)+" "+errCode, 1)
	if !ok {
		a.log.Debug("request failed", append(args, attrs...)...)
		return
	}
	if heldBack > 0 {
		args = append(args, "like_failures_not_logged", heldBack)
	}
	a.log.Warn("request failed", append(args, attrs...)...)
}

// logBatchFailures logs the items of a batch answered 5xx as one failure
// per kind (status and error code): the first one's error, and how many
// failed so.
func (a *api) logBatchFailures(r *http.Request, results []BatchResult) {
	type kind struct {
		status int
		code   string
	}
	var kinds []kind
	failed, first := map[kind]int{}, map[kind]int{}
	for i, res := range results {
		if res.failure == nil {
			continue
		}
		k := kind{res.Status, res.Error.Code}
		if _, seen := failed[k]; !seen {
			kinds, first[k] = append(kinds, k), i
		}
		failed[k]++
	}
	for _, k := range kinds {
		i := first[k]
		a.logFailure(r, k.status, k.code, results[i].failure, "items_failed", failed[k], "items", len(results), "first_failed_item", i)
	}
}

// itemError is the answer to one item of a batch.
func (a *api) itemError(r *http.Request, err error) BatchResult {
	if clientGone(r, err) {
		if st := stateOf(r); st != nil {
			st.clientGone = true
		}
		return BatchResult{Status: 499, Error: &ErrorDetail{"unavailable", "the client went away"}}
	}
	code, d := publicDetail(r, err)
	res := BatchResult{Status: code, Error: &d}
	if code >= 500 {
		res.failure = err
	}
	if code == http.StatusTooManyRequests {
		res.retryAfter = retryWait(err)
	}
	return res
}

// retryWait is how long a request refused with 429 should wait: the
// quota's own wait, at least a second.
func retryWait(err error) time.Duration {
	var qe *auth.QuotaError
	if errors.As(err, &qe) {
		return max(qe.RetryAfter, time.Second)
	}
	return time.Second
}

func requestIDOf(r *http.Request) string {
	if st := stateOf(r); st != nil {
		return st.id
	}
	return ""
}

func (a *api) body(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	var data []byte
	var err error
	if p, ok := r.Body.(*preread); ok {
		// the limiter has received it already: no second copy
		data, err = p.data, p.err
		p.data, p.err = nil, nil
	} else {
		data, err = readBody(http.MaxBytesReader(w, r.Body, a.maxBody), r.ContentLength, a.maxBody)
	}
	var mbe *http.MaxBytesError
	if err != nil && !errors.As(err, &mbe) {
		return nil, &clientError{err}
	}
	return data, err
}

// noBody reads the body of a call that takes none (cancel, replay, pause,
// resume): empty, or an empty JSON object, is fine; anything else is
// refused as a create's unknown field or bad JSON would be, rather than
// ignored ({"until": ...} on a pause).
func (a *api) noBody(w http.ResponseWriter, r *http.Request) error {
	data, err := a.body(w, r)
	if err != nil {
		return err
	}
	if len(bytes.TrimSpace(data)) == 0 {
		return nil
	}
	if err := decodeObject(data, func(string) *json.RawMessage { return nil }); err != nil {
		var fe *alarm.FieldError
		if errors.As(err, &fe) && fe.Field != "body" {
			return badField(fe.Field, "is not known: this call takes no body (or {})")
		}
		return err
	}
	return nil
}

func key(r *http.Request) alarm.Key {
	return alarm.Key{Application: r.PathValue("application"), BusinessID: r.PathValue("business_id")}
}

func (a *api) create(w http.ResponseWriter, r *http.Request) {
	data, err := a.body(w, r)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	in, err := decodeCreateInput(data)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	if err := a.allow(r, in.Application, auth.ScopeWrite); err != nil {
		a.fail(w, r, err)
		return
	}
	if a.quotas != nil {
		if err := a.svc.Invalid(in); err != nil {
			a.fail(w, r, err) // before the quota: it costs none
			return
		}
	}
	var res alarm.CreateResult
	if err := a.admitOne(r, in); err != nil {
		var settled bool
		if res, settled = a.overQuota(r, in, err); !settled {
			a.fail(w, r, err)
			return
		}
	} else {
		res = a.svc.Create(r.Context(), []alarm.CreateInput{in})[0]
	}
	if res.Err != nil {
		a.fail(w, r, res.Err)
		return
	}
	code := http.StatusOK
	if res.Created {
		code = http.StatusCreated
	}
	writeJSON(w, code, ClockJSON(res.Clock))
}

func (a *api) createBatch(w http.ResponseWriter, r *http.Request) {
	data, err := a.body(w, r)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	b, err := decodeBatch(data)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	if b.Clocks == nil {
		a.fail(w, r, badField("clocks", "is required: an array of 1 to %d clocks", MaxBatch))
		return
	}
	if len(b.Clocks) == 0 {
		a.fail(w, r, badField("clocks", "is empty; give 1 to %d clocks", MaxBatch))
		return
	}
	if b.Count > MaxBatch {
		a.fail(w, r, &alarm.FieldError{Field: "clocks", Kind: alarm.ErrTooLarge,
			Message: "has " + itoa(b.Count) + " clocks; at most " + itoa(MaxBatch) + " per batch"})
		return
	}
	results := make([]BatchResult, len(b.Clocks))
	ins := make([]alarm.CreateInput, 0, len(b.Clocks))
	pos := make([]int, 0, len(b.Clocks))
	for i, raw := range b.Clocks {
		in, err := decodeBatchItem(raw)
		if err != nil {
			err = inItem(i, err)
		} else {
			err = a.allow(r, in.Application, auth.ScopeWrite)
		}
		if err == nil && a.quotas != nil {
			err = a.svc.Invalid(in) // before the quota: it costs none
		}
		if err != nil {
			results[i] = a.itemError(r, err)
			continue
		}
		ins = append(ins, in)
		pos = append(pos, i)
	}
	ins, pos = a.admit(r, ins, pos, results)
	if len(ins) > 0 {
		for j, res := range a.svc.Create(r.Context(), ins) {
			results[pos[j]] = a.batchResult(r, res)
		}
	}
	// items refused over quota: the answer says when to send them again,
	// as a single create's 429 does
	var wait time.Duration // > 0: an item was refused
	for _, res := range results {
		wait = max(wait, res.retryAfter)
	}
	if wait > 0 {
		w.Header().Set("Retry-After", retryAfter(wait))
	}
	a.logBatchFailures(r, results)
	writeJSON(w, http.StatusOK, map[string]any{"results": results})
}

// batchResult is the answer to one create of a batch.
func (a *api) batchResult(r *http.Request, res alarm.CreateResult) BatchResult {
	if res.Err != nil {
		return a.itemError(r, res.Err)
	}
	c := ClockJSON(res.Clock)
	if res.Created {
		return BatchResult{Status: http.StatusCreated, Clock: &c}
	}
	return BatchResult{Status: http.StatusOK, Clock: &c}
}

// inItem names batch item i in an error about the item as a whole ("must
// be a JSON object"): there, "body" would wrongly point at the request's
// body. Errors about a field of the item name the field, as in a create;
// the item is the result at the same position.
func inItem(i int, err error) error {
	var fe *alarm.FieldError
	if errors.As(err, &fe) && fe.Field == "body" {
		return &alarm.FieldError{Field: "clocks[" + itoa(i) + "]", Message: fe.Message, Kind: fe.Kind}
	}
	return err
}

func (a *api) get(w http.ResponseWriter, r *http.Request) {
	if err := a.allow(r, key(r).Application, auth.ScopeRead); err != nil {
		a.fail(w, r, err)
		return
	}
	c, err := a.svc.Get(r.Context(), key(r))
	if err != nil {
		a.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, clockWithNextJSON(c, a.svc.Now()))
}

func (a *api) cancel(w http.ResponseWriter, r *http.Request) {
	if err := a.allow(r, key(r).Application, auth.ScopeWrite); err != nil {
		a.fail(w, r, err)
		return
	}
	if err := a.noBody(w, r); err != nil {
		a.fail(w, r, err)
		return
	}
	c, err := a.svc.Cancel(r.Context(), key(r))
	if err != nil {
		a.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, ClockJSON(c))
}

func (a *api) reschedule(w http.ResponseWriter, r *http.Request) {
	if err := a.allow(r, key(r).Application, auth.ScopeWrite); err != nil {
		a.fail(w, r, err)
		return
	}
	data, err := a.body(w, r)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	p, err := decodePatch(data)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	if p.Payload != nil {
		if err := a.admitPatch(r, p); err != nil {
			a.fail(w, r, err)
			return
		}
	}
	c, err := a.svc.Reschedule(r.Context(), key(r), p)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, ClockJSON(c))
}

func (a *api) replay(w http.ResponseWriter, r *http.Request) {
	if err := a.allow(r, key(r).Application, auth.ScopeWrite); err != nil {
		a.fail(w, r, err)
		return
	}
	if err := a.noBody(w, r); err != nil {
		a.fail(w, r, err)
		return
	}
	if err := a.admitReplay(r, key(r)); err != nil {
		a.fail(w, r, err)
		return
	}
	c, err := a.svc.Replay(r.Context(), key(r))
	if err != nil {
		a.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, ClockJSON(c))
}

// readyFor is how long a readiness answer is reused: /readyz is open and
// never held back, so a flood of probes costs MySQL one ping a second,
// not one each.
const readyFor = time.Second

func (a *api) readyz(w http.ResponseWriter, r *http.Request) {
	a.readyMu.Lock()
	fresh := time.Since(a.readyAt) < readyFor
	code, body := a.readyCode, a.readyBody
	a.readyMu.Unlock()
	if !fresh {
		// one check at a time; a probe that comes while one runs (a
		// stalled MySQL: up to 3 s) answers the last result, if any,
		// rather than wait for it
		if a.readyRun.TryLock() {
			code, body = a.runReady(r)
			a.readyRun.Unlock()
		} else if body == nil {
			a.readyRun.Lock()
			a.readyRun.Unlock()
			a.readyMu.Lock()
			code, body = a.readyCode, a.readyBody
			a.readyMu.Unlock()
		}
	}
	writeJSON(w, code, body)
}

// runReady runs the readiness checks and keeps their answer.
func (a *api) runReady(r *http.Request) (int, map[string]any) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), 3*time.Second)
	defer cancel()
	checks := map[string]string{}
	code := http.StatusOK
	for _, c := range a.ready {
		if err := c.Check(ctx); err != nil {
			a.log.Debug("not ready", "check", c.Name, "request_id", requestIDOf(r), "err", err)
			checks[c.Name] = hideAddrs(err.Error())
			code = http.StatusServiceUnavailable
			continue
		}
		checks[c.Name] = "ok"
	}
	status := "ok"
	if code != http.StatusOK {
		status = "unavailable"
	}
	body := map[string]any{"status": status, "checks": checks}
	a.readyMu.Lock()
	a.readyCode, a.readyBody, a.readyAt = code, body, time.Now()
	a.readyMu.Unlock()
	return code, body
}

func (a *api) clusterView(w http.ResponseWriter, r *http.Request) {
	if a.cluster == nil {
		writeError(w, http.StatusNotFound, ErrorDetail{"not_found", "cluster view is not available"})
		return
	}
	ctx, cancel := a.bounded(r)
	defer cancel()
	v, err := a.cluster(ctx)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, v)
}

// addrRE matches the host:port of an address in an error message, and
// quotedRE a name MySQL or RabbitMQ quote in one (an account: "Access
// denied for user 'clockd'@'10.0.0.5'", "access to vhost 'prod' refused
// for user 'clockd'"; a database).
var (
	addrRE   = regexp.MustCompile(`(\[[0-9a-fA-F:.]+\]|[A-Za-z0-9.-]+):[0-9]{1,5}\b`)
	quotedRE = regexp.MustCompile(`'[^']*'`)
	// lookupRE: the host of a failed DNS lookup ("lookup db.internal on
	// 10.0.0.2:53: no such host") has no port after it
	lookupRE = regexp.MustCompile(`lookup [^\s:]+`)
)

// hideAddrs keeps a readiness reason ("dial tcp: connection refused",
// "Access denied") but not the internal addresses, accounts or names in
// it: /readyz answers without a token. The log has the whole error.
func hideAddrs(s string) string {
	s = lookupRE.ReplaceAllString(quotedRE.ReplaceAllString(s, "'…'"), "lookup <host>")
	return addrRE.ReplaceAllString(s, "<address>")
}
