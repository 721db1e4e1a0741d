package httpapi

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/clockd/clockd/internal/alarm"
	"github.com/clockd/clockd/internal/auth"
)

// access is what a route needs of its caller.
type access int

const (
	open      access = iota // no token: /healthz, /readyz
	needToken               // any valid token: the API's own description
	needRead                // a token with the read scope (the application is checked by the handler)
	needWrite               // a token with the write scope (likewise)
	needAdmin               // a token of the admin kind
	// needScrape: a token of the admin kind, taken from the cache past its
	// TTL while MySQL cannot be reached (auth.StaleOK): /metrics, whose
	// clockd_mysql_up 0 must still be scraped in a MySQL outage
	needScrape
)

type principalKey struct{}

// anyQuery, as a route's query parameters, lets any through unread
// (/metrics: scrapers may add their own).
const anyQuery = "*"

// handle registers a route behind the authentication it needs and the
// concurrency limits. A request without a valid token answers 401 before
// anything else is read; one whose token lacks the scope, 403. Then a
// query parameter the route does not take (query), or one given twice or
// badly encoded, answers 400 before the route runs: a write call never
// ignores a parameter the caller meant something by (?dry_run=true).
func (a *api) handle(pattern string, need access, h http.HandlerFunc, query ...string) {
	a.route(pattern, need, h, false, query...)
}

// handleBody is handle for a call that carries a body (a create, a
// reschedule); the others take at most {} (see limiter.serve).
func (a *api) handleBody(pattern string, need access, h http.HandlerFunc) {
	a.route(pattern, need, h, true)
}

func (a *api) route(pattern string, need access, h http.HandlerFunc, body bool, query ...string) {
	if need == open {
		a.mux.HandleFunc(pattern, h) // health probes: never limited
		return
	}
	a.mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
		p, ok := a.authenticate(w, r, need)
		if !ok {
			return
		}
		var err error
		switch need {
		case needAdmin, needScrape:
			err = p.RequireAdmin()
		case needRead:
			err = p.AllowScope(auth.ScopeRead)
		case needWrite:
			err = p.AllowScope(auth.ScopeWrite)
		}
		if err != nil {
			a.fail(w, r, err)
			return
		}
		if len(query) != 1 || query[0] != anyQuery {
			if _, err := queryParams(r, query...); err != nil {
				a.fail(w, r, err)
				return
			}
		}
		a.limit.serve(w, r.WithContext(context.WithValue(r.Context(), principalKey{}, p)), a.maxBody, h, a.clientOf(r, p), body)
	})
}

// clientOf names the client of r for its share of the limits: its token,
// or, with auth off (or the bootstrap admin token), its address: clients
// behind one proxy with auth off share one.
func (a *api) clientOf(r *http.Request, p auth.Principal) string {
	if a.auth != nil && p.TokenID != 0 {
		return "token " + strconv.FormatInt(p.TokenID, 10)
	}
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	return "address " + host
}

// authenticate finds the caller of r from its token (auth.Anyone with auth
// off). When it cannot, it answers (401, or 503 when the lookup must wait)
// and returns false.
func (a *api) authenticate(w http.ResponseWriter, r *http.Request, need access) (auth.Principal, bool) {
	if a.auth == nil {
		return auth.Anyone, true
	}
	// a token not in the cache costs a MySQL lookup, and anyone can make up
	// well-formed ones: the checks under way are capped as the requests
	// are; past the cap a token is taken from the cache only, and one that
	// needs a lookup answers 503 at once (known tokens are not crowded out
	// by made-up ones)
	ctx, cancel := a.bounded(r)
	slot := a.limit.checkIn()
	if !slot {
		ctx = auth.CachedOnly(ctx)
	}
	if need == needScrape {
		ctx = auth.StaleOK(ctx)
	}
	p, err := a.auth.Authenticate(ctx, r.Header.Get("Authorization"))
	cancel()
	if slot {
		a.limit.checkOut()
	}
	if errors.Is(err, auth.ErrNeedsLookup) {
		tooBusy(w, r)
		return p, false
	}
	if err != nil {
		a.fail(w, r, err)
		return p, false
	}
	return p, true
}

// refuseAnonymous answers 401 (or 503, as a route would) to a request
// without a valid token, and reports whether it did. misses and canonical
// ask it before they answer 404, 405 or 400 to a request no route takes
// (an unknown path, another method, a path with an empty or dot segment):
// SPEC's "every call under /v1 needs a token" holds for those too, and a
// 405's Allow header does not map the API for anyone who asks (found by
// review). The probes and the console (its own sessions) are left to
// themselves; a request a route takes is authenticated by the route, once.
func (a *api) refuseAnonymous(w http.ResponseWriter, r *http.Request) bool {
	if a.auth == nil {
		return false
	}
	switch p := r.URL.Path; {
	case p == "/healthz" || p == "/readyz":
		return false
	case a.consolePrefix != "" && strings.HasPrefix(p, a.consolePrefix):
		return false
	}
	_, ok := a.authenticate(w, r, needToken)
	return !ok
}

// bounded is r's context with the deadline of one request's MySQL work.
func (a *api) bounded(r *http.Request) (context.Context, context.CancelFunc) {
	return context.WithTimeout(r.Context(), a.dbTime)
}

func principal(r *http.Request) auth.Principal {
	if p, ok := r.Context().Value(principalKey{}).(auth.Principal); ok {
		return p
	}
	return auth.Anyone
}

// allow checks the caller may use scope s on app's clocks. It is asked
// before the store, so that the answer is the same whether a clock exists
// or not.
func (a *api) allow(r *http.Request, app string, s auth.Scope) error {
	return principal(r).Allow(app, s)
}

func payloadSize(in alarm.CreateInput) int {
	if in.Payload == nil {
		return 0
	}
	return len(*in.Payload)
}

// admitOne checks one create against its application's quota.
func (a *api) admitOne(r *http.Request, in alarm.CreateInput) error {
	return a.admitSize(r, in.Application, payloadSize(in))
}

// admitSize asks app's quota for one create of a payload of size bytes.
func (a *api) admitSize(r *http.Request, app string, size int) error {
	if a.quotas == nil {
		return nil
	}
	ctx, cancel := a.bounded(r)
	defer cancel()
	errs, err := a.quotas.Admit(ctx, app, []int{size})
	if err != nil {
		return err
	}
	return errs[0]
}

// admitReplay asks the application's quota for a replay as for a create
// (its payload was admitted when the clock was set): a replay makes a
// finished clock live again, and without the quota an application could
// hold any number of live clocks by letting them die and replaying them.
// An operator's replays in the console are not counted.
//
// A replay the quota refuses that could not make a clock live (no such
// clock, or one not expired or dead) is let through to be answered 404 or
// 409 as SPEC says, not 429 (found by review: 429 with Retry-After for a
// replay that could never succeed). As for creates (overQuota), the clock
// is looked up only after a refusal: a replay the quota admits (or of an
// application without one) costs no read.
func (a *api) admitReplay(r *http.Request, k alarm.Key) error {
	return a.refusalStands(r, k, a.admitSize(r, k.Application, 0), func(c alarm.Clock) bool {
		return c.Status == alarm.StatusExpired || c.Status == alarm.StatusDead
	})
}

// refusalStands is the answer to a request for key k that the quota
// refused (refusal): nil when the request could not change the clock (no
// such clock, one archived, or one wouldChange says it could not change),
// so that its own answer (404, 409, 400) is given; the refusal otherwise.
// Any other error of the quota is returned as it is.
func (a *api) refusalStands(r *http.Request, k alarm.Key, refusal error, wouldChange func(alarm.Clock) bool) error {
	if !errors.Is(refusal, auth.ErrResourceExhausted) {
		return refusal // admitted, or the quota could not be read
	}
	c, err := a.svc.Get(r.Context(), k)
	switch {
	case errors.Is(err, alarm.ErrNotFound):
		return nil
	case err != nil:
		return refusal
	case c.Archived || !wouldChange(c):
		return nil
	}
	return refusal
}

// overQuota answers a create that its application's quota refused when
// the key has a live clock: such a create sets no clock, so the idempotency
// rule answers it, whatever the quota says (alarm.AnswerExisting: 200 with
// the clock for an identical retry, 409 for other content). settled is false when the refusal stands: no clock, or a
// finished one (a create would set a new clock, which is what the quota
// bounds), or the clock could not be read. The clock is looked up only
// here, after a refusal, so that a create admitted by the quota (or of an
// application without one) stays one INSERT.
func (a *api) overQuota(r *http.Request, in alarm.CreateInput, refusal error) (res alarm.CreateResult, settled bool) {
	if !errors.Is(refusal, auth.ErrResourceExhausted) {
		return res, false // the quota could not be read
	}
	c, err := a.svc.Get(r.Context(), alarm.Key{Application: in.Application, BusinessID: in.BusinessID})
	if err != nil {
		return res, false
	}
	return settle(in, map[string]alarm.Clock{in.BusinessID: c})
}

// settle is overQuota's answer given the clocks, by business id, of the
// keys whose creates the quota refused (ErrResourceExhausted; the others
// are not in live).
func settle(in alarm.CreateInput, live map[string]alarm.Clock) (res alarm.CreateResult, settled bool) {
	c, ok := live[in.BusinessID]
	if !ok || c.Status.Finished() {
		return res, false
	}
	n, late, err := in.Resolve(time.Now(), alarm.Limits{})
	if err != nil {
		return res, false
	}
	res = alarm.AnswerExisting(n, c)
	if late != nil && res.Err != nil {
		// invalid as a new clock now, and not a retry of c's create: the
		// quota's refusal stands, as for any create it refuses
		return alarm.CreateResult{}, false
	}
	return res, true
}

// payloadQuota refuses a payload of a reschedule over its application's
// max_payload_bytes, as a create's is refused. It reads the quota rather
// than ask Admit, which would count the reschedule as a create; only a
// reschedule that carries a payload pays for the read.
func (a *api) payloadQuota(r *http.Request, app string, size int) error {
	if a.quotas == nil || alarm.CheckApplication(app) != nil {
		return nil // a bad application is refused by validation, which names it
	}
	ctx, cancel := a.bounded(r)
	defer cancel()
	q, err := a.quotas.Get(ctx, app)
	if err != nil {
		return err
	}
	if q.MaxPayloadBytes > 0 && size > q.MaxPayloadBytes {
		return &auth.QuotaError{Application: app, Quota: "max_payload_bytes", RetryAfter: time.Minute,
			Message: fmt.Sprintf("payload: %d bytes is more than application %s's quota max_payload_bytes of %d", size, app, q.MaxPayloadBytes)}
	}
	return nil
}

// admitPatch asks the application's max_payload_bytes for a reschedule's
// payload. An invalid reschedule is answered 400 before the quota is read,
// and one the quota refuses that could not change the clock (no such
// clock, one no longer pending, or a change the clock refuses: ring_at of
// a recurring clock) is let through to be answered 404, 409 or 400 as
// SPEC says, as admitReplay does (found by review: 429 with Retry-After
// for a change that could never be made).
func (a *api) admitPatch(r *http.Request, p alarm.PatchInput) error {
	if a.quotas == nil {
		return nil
	}
	if err := a.svc.InvalidPatch(p); err != nil {
		return err
	}
	k := key(r)
	return a.refusalStands(r, k, a.payloadQuota(r, k.Application, len(*p.Payload)), func(c alarm.Clock) bool {
		return c.Status == alarm.StatusPending && a.svc.PatchError(c, p) == nil
	})
}

// admit checks the creates of a batch against their applications' quotas,
// in request order: a create over a quota gets its 429 in results (one
// whose quota could not be read, its 503) and is left out of the returned
// inputs (and positions).
func (a *api) admit(r *http.Request, ins []alarm.CreateInput, pos []int, results []BatchResult) ([]alarm.CreateInput, []int) {
	if a.quotas == nil || len(ins) == 0 {
		return ins, pos
	}
	byApp := map[string][]int{} // application -> indexes into ins
	var apps []string
	for j, in := range ins {
		if _, ok := byApp[in.Application]; !ok {
			apps = append(apps, in.Application)
		}
		byApp[in.Application] = append(byApp[in.Application], j)
	}
	refused := make([]bool, len(ins))
	for _, app := range apps {
		js := byApp[app]
		sizes := make([]int, len(js))
		for k, j := range js {
			sizes[k] = payloadSize(ins[j])
		}
		ctx, cancel := a.bounded(r)
		errs, err := a.quotas.Admit(ctx, app, sizes)
		cancel()
		if err != nil {
			// the quota could not be read (MySQL away): this application's
			// items answer the error, each in its place, as when the store
			// fails them; the batch is answered 200 as SPEC says, whatever
			// the cache held (found by review: a whole 503, or 200 with a
			// 503 per item, by whether the quota was cached)
			for _, j := range js {
				results[pos[j]] = a.itemError(r, err)
				refused[j] = true
			}
			continue
		}
		// the clocks of the refused keys, in one read (a read per item made
		// a refusal of a 1,000-clock batch cost 999 round trips)
		var ids []string
		for k, e := range errs {
			if errors.Is(e, auth.ErrResourceExhausted) {
				ids = append(ids, ins[js[k]].BusinessID)
			}
		}
		live := map[string]alarm.Clock{}
		if len(ids) > 0 {
			cs, err := a.svc.InClock(r.Context(), app, ids)
			if err != nil {
				cs = nil // the refusals stand
			}
			for _, c := range cs {
				live[c.BusinessID] = c
			}
		}
		for k, e := range errs {
			if e == nil {
				continue
			}
			j := js[k]
			if res, settled := settle(ins[j], live); settled {
				results[pos[j]] = a.batchResult(r, res)
			} else {
				results[pos[j]] = a.itemError(r, e)
			}
			refused[j] = true
		}
	}
	outIns, outPos := ins[:0:0], pos[:0:0]
	for j := range ins {
		if !refused[j] {
			outIns = append(outIns, ins[j])
			outPos = append(outPos, pos[j])
		}
	}
	return outIns, outPos
}
