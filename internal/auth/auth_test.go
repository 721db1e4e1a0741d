package auth_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/clockd/clockd/internal/alarm"
	"github.com/clockd/clockd/internal/auth"
)

// fakeStore is an in-memory auth.Store that counts lookups.
type fakeStore struct {
	mu      sync.Mutex
	tokens  map[[32]byte]auth.Token
	byID    map[int64][32]byte
	lookups int
	down    bool
	quotas  map[string]auth.Quota
	live    map[string]int
	counts  int
	// touchHold, when set, holds TouchToken until it is closed (writes
	// held by MySQL); touches counts the calls
	touchHold chan struct{}
	touches   int
}

func newFake() *fakeStore {
	return &fakeStore{tokens: map[[32]byte]auth.Token{}, byID: map[int64][32]byte{}, quotas: map[string]auth.Quota{}, live: map[string]int{}}
}

func (f *fakeStore) CreateToken(_ context.Context, t auth.Token, h [32]byte) (auth.Token, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	t.ID = int64(len(f.tokens) + 1)
	f.tokens[h], f.byID[t.ID] = t, h
	return t, nil
}
func (f *fakeStore) ListTokens(context.Context, string) ([]auth.Token, error) { return nil, nil }
func (f *fakeStore) RevokeToken(_ context.Context, id int64, now time.Time) (auth.Token, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	h, ok := f.byID[id]
	if !ok {
		return auth.Token{}, alarm.ErrNotFound
	}
	t := f.tokens[h]
	t.RevokedAt = now
	f.tokens[h] = t
	return t, nil
}
func (f *fakeStore) TokenByHash(_ context.Context, h [32]byte) (auth.Token, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.lookups++
	if f.down {
		return auth.Token{}, alarm.ErrUnavailable
	}
	t, ok := f.tokens[h]
	if !ok {
		return auth.Token{}, alarm.ErrNotFound
	}
	return t, nil
}
func (f *fakeStore) TouchToken(ctx context.Context, _ int64, _ time.Time) error {
	f.mu.Lock()
	hold := f.touchHold
	f.touches++
	f.mu.Unlock()
	if hold != nil {
		select {
		case <-hold:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}
func (f *fakeStore) Quota(_ context.Context, app string) (auth.Quota, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.quotas[app], nil
}
func (f *fakeStore) SetQuota(_ context.Context, q auth.Quota, now time.Time) (auth.Quota, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	q.UpdatedAt = now
	f.quotas[q.Application] = q
	return q, nil
}
func (f *fakeStore) LiveClocks(_ context.Context, app string) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.counts++
	return f.live[app], nil
}

type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

func TestAuthenticateCaches(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, clk := newFake(), &clock{t: time.Unix(1e9, 0)}
	a := auth.New(st, auth.Config{Mode: auth.ModeTokens, CacheTTL: 5 * time.Second, Now: clk.now, AdminToken: "the-bootstrap-admin"})
	tok, secret, err := a.CreateToken(ctx, auth.NewToken{Application: "order", Scopes: []auth.Scope{auth.ScopeRead}})
	if err != nil || tok.ID == 0 || len(secret) < 40 || tok.Prefix != secret[:10] {
		t.Fatalf("CreateToken: %+v %q %v", tok, secret, err)
	}
	for range 100 {
		p, err := a.Authenticate(ctx, "Bearer "+secret)
		if err != nil || p.Application != "order" || p.Admin || p.TokenID != tok.ID {
			t.Fatalf("Authenticate: %+v %v", p, err)
		}
	}
	unknown, _ := auth.NewSecret()
	for range 10 {
		if _, err := a.Authenticate(ctx, "Bearer "+unknown); !errors.Is(err, auth.ErrUnauthenticated) {
			t.Fatalf("unknown token: %v", err)
		}
	}
	if st.lookups != 2 {
		t.Errorf("%d store lookups for 110 requests with 2 tokens, want 2 (cached)", st.lookups)
	}
	// what NewSecret cannot have made is refused without a lookup
	for _, bad := range []string{"clk_unknown", unknown[:len(unknown)-1], unknown + "A", "xyz" + unknown[3:], unknown[:20] + "!" + unknown[21:]} {
		if _, err := a.Authenticate(ctx, "Bearer "+bad); !errors.Is(err, auth.ErrUnauthenticated) {
			t.Fatalf("made-up token %q: %v", bad, err)
		}
	}
	if st.lookups != 2 {
		t.Errorf("%d store lookups after made-up tokens, want still 2", st.lookups)
	}
	clk.add(6 * time.Second)
	if _, err := a.Authenticate(ctx, "bearer "+secret); err != nil || st.lookups != 3 {
		t.Errorf("after the TTL: %v, %d lookups, want one more", err, st.lookups)
	}
	if _, err := a.RevokeToken(ctx, tok.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Authenticate(ctx, "Bearer "+secret); !errors.Is(err, auth.ErrUnauthenticated) {
		t.Errorf("revoked here: %v, want unauthenticated at once", err)
	}
	p, err := a.Authenticate(ctx, "Bearer the-bootstrap-admin")
	if err != nil || !p.Admin {
		t.Errorf("bootstrap admin: %+v %v", p, err)
	}
	for _, h := range []string{"", "Basic abc", "Bearer", "Bearer   ", "the-bootstrap-admin"} {
		if _, err := a.Authenticate(ctx, h); !errors.Is(err, auth.ErrUnauthenticated) {
			t.Errorf("header %q: %v", h, err)
		}
	}
	st.down = true
	clk.add(time.Minute)
	other, _ := auth.NewSecret()
	if _, err := a.Authenticate(ctx, "Bearer "+other); !errors.Is(err, alarm.ErrUnavailable) || errors.Is(err, auth.ErrUnauthenticated) {
		t.Errorf("store down: %v, want unavailable (503), not 401", err)
	}
	off := auth.New(st, auth.Config{Mode: auth.ModeOff})
	if p, err := off.Authenticate(ctx, ""); err != nil || !p.Admin {
		t.Errorf("auth off: %+v %v", p, err)
	}
}

func TestPrincipalAllow(t *testing.T) {
	t.Parallel()
	rw := auth.Principal{TokenID: 1, Application: "order", Scopes: []auth.Scope{auth.ScopeRead, auth.ScopeWrite}}
	ro := auth.Principal{TokenID: 2, Application: "order", Scopes: []auth.Scope{auth.ScopeRead}}
	for _, tt := range []struct {
		p     auth.Principal
		app   string
		scope auth.Scope
		ok    bool
	}{
		{rw, "order", auth.ScopeRead, true},
		{rw, "order", auth.ScopeWrite, true},
		{rw, "member", auth.ScopeRead, false},
		{ro, "order", auth.ScopeRead, true},
		{ro, "order", auth.ScopeWrite, false},
		{auth.Principal{Admin: true}, "member", auth.ScopeWrite, true},
		{auth.Anyone, "x", auth.ScopeWrite, true},
	} {
		err := tt.p.Allow(tt.app, tt.scope)
		if (err == nil) != tt.ok || (err != nil && !errors.Is(err, auth.ErrPermissionDenied)) {
			t.Errorf("%+v on %s/%s: %v, want ok=%v", tt.p, tt.app, tt.scope, err, tt.ok)
		}
	}
	if rw.RequireAdmin() == nil || (auth.Principal{Admin: true}).RequireAdmin() != nil {
		t.Error("RequireAdmin")
	}
}

func TestNewTokenCheck(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		n     auth.NewToken
		field string // "" = valid
	}{
		{auth.NewToken{Admin: true}, ""},
		{auth.NewToken{Application: "order", Scopes: []auth.Scope{"read", "write"}}, ""},
		{auth.NewToken{Application: "order", Scopes: []auth.Scope{"write"}}, ""},
		{auth.NewToken{}, "application"},
		{auth.NewToken{Application: "order"}, "scopes"},
		{auth.NewToken{Application: "order", Scopes: []auth.Scope{"admin"}}, "scopes"},
		{auth.NewToken{Application: "order", Scopes: []auth.Scope{"read", "read"}}, "scopes"},
		{auth.NewToken{Application: "bad app", Scopes: []auth.Scope{"read"}}, "application"},
		{auth.NewToken{Admin: true, Application: "order"}, "application"},
		{auth.NewToken{Admin: true, Scopes: []auth.Scope{"read"}}, "scopes"},
		{auth.NewToken{Admin: true, Name: "ops — on call ☎"}, ""},
		// names are shown in terminals and the console (found by review)
		{auth.NewToken{Admin: true, Name: "ops\x1b[2J"}, "name"},
		{auth.NewToken{Admin: true, Name: "a\nb"}, "name"},
		{auth.NewToken{Admin: true, Name: "nul\x00"}, "name"},
		{auth.NewToken{Admin: true, Name: "bad \xff utf-8"}, "name"},
	} {
		err := tt.n.Check()
		var fe *alarm.FieldError
		switch {
		case tt.field == "" && err != nil:
			t.Errorf("%+v: %v", tt.n, err)
		case tt.field != "" && (!errors.As(err, &fe) || fe.Field != tt.field):
			t.Errorf("%+v: %v, want an error on %s", tt.n, err, tt.field)
		}
	}
}

func TestQuotaAdmit(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, clk := newFake(), &clock{t: time.Unix(1e9, 0)}
	q := auth.NewQuotas(st, auth.QuotaConfig{Now: clk.now, LiveTTL: time.Second})
	if errs, err := q.Admit(ctx, "order", []int{1 << 20}); err != nil || errs[0] != nil {
		t.Fatalf("no quota: %v %v", errs, err)
	}
	if _, err := q.Set(ctx, auth.Quota{Application: "order", CreatesPerSecond: 4, MaxLiveClocks: 6, MaxPayloadBytes: 100}); err != nil {
		t.Fatal(err)
	}
	quota := func(err error) string {
		var qe *auth.QuotaError
		if !errors.As(err, &qe) {
			return ""
		}
		if !errors.Is(err, auth.ErrResourceExhausted) || qe.RetryAfter <= 0 {
			t.Errorf("quota error %v", err)
		}
		return qe.Quota
	}
	errs, err := q.Admit(ctx, "order", []int{10, 101, 10, 10, 10, 10})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"", "max_payload_bytes", "", "", "", "creates_per_second"}
	for i, e := range errs {
		if got := quota(e); got != want[i] {
			t.Errorf("item %d: %q, want %q", i, got, want[i])
		}
	}
	clk.add(500 * time.Millisecond) // two more tokens
	errs, _ = q.Admit(ctx, "order", []int{1, 1, 1})
	if quota(errs[0]) != "" || quota(errs[1]) != "" || quota(errs[2]) != "creates_per_second" {
		t.Errorf("after half a second: %v", errs)
	}
	clk.add(2 * time.Second) // bucket full again; 6 admitted so far, all live
	st.live["order"] = 6
	errs, _ = q.Admit(ctx, "order", []int{1})
	if quota(errs[0]) != "max_live_clocks" {
		t.Errorf("at max_live_clocks: %v", errs)
	}
	st.live["order"] = 5 // one rang
	errs, _ = q.Admit(ctx, "order", []int{1, 1})
	if quota(errs[0]) != "max_live_clocks" {
		t.Errorf("count not refreshed before LiveTTL: %v", errs)
	}
	clk.add(1100 * time.Millisecond)
	errs, _ = q.Admit(ctx, "order", []int{1, 1})
	if quota(errs[0]) != "" || quota(errs[1]) != "max_live_clocks" {
		t.Errorf("after the count is refreshed: %v", errs)
	}
	if errs, _ := q.Admit(ctx, "member", []int{1000}); errs[0] != nil {
		t.Errorf("another application: %v", errs)
	}
}

// Two instances on one store: a revocation through one is told (OnRevoke)
// and the other forgets the token (Forget), so it stops working there at
// once, not when the other's cache entry expires.
func TestRevokeIsToldAndForgotten(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, clk := newFake(), &clock{t: time.Unix(1e9, 0)}
	var other *auth.Authenticator
	var told []int64
	one := auth.New(st, auth.Config{Mode: auth.ModeTokens, CacheTTL: 5 * time.Second, Now: clk.now,
		OnRevoke: func(_ context.Context, id int64) { told = append(told, id); other.Forget(id) }})
	other = auth.New(st, auth.Config{Mode: auth.ModeTokens, CacheTTL: 5 * time.Second, Now: clk.now})
	tok, secret, err := one.CreateToken(ctx, auth.NewToken{Application: "order", Scopes: []auth.Scope{auth.ScopeRead}})
	if err != nil {
		t.Fatal(err)
	}
	keep, keepSecret, err := one.CreateToken(ctx, auth.NewToken{Application: "order", Scopes: []auth.Scope{auth.ScopeRead}})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{secret, keepSecret} {
		if _, err := other.Authenticate(ctx, "Bearer "+s); err != nil { // cached there now
			t.Fatal(err)
		}
	}
	lookups := st.lookups
	if _, err := one.RevokeToken(ctx, tok.ID); err != nil {
		t.Fatal(err)
	}
	if len(told) != 1 || told[0] != tok.ID {
		t.Fatalf("told %v, want [%d]", told, tok.ID)
	}
	if _, err := other.Authenticate(ctx, "Bearer "+secret); !errors.Is(err, auth.ErrUnauthenticated) {
		t.Errorf("revoked through the other instance, within its cache TTL: %v, want unauthenticated at once", err)
	}
	if p, err := other.Authenticate(ctx, "Bearer "+keepSecret); err != nil || p.TokenID != keep.ID {
		t.Errorf("another token: %+v %v", p, err)
	}
	if st.lookups != lookups+1 {
		t.Errorf("%d lookups after the revocation, want 1 (the forgotten token only)", st.lookups-lookups)
	}
}

// lostRevoke revokes, then answers that the store did not answer.
type lostRevoke struct{ *fakeStore }

func (s lostRevoke) RevokeToken(ctx context.Context, id int64, now time.Time) (auth.Token, error) {
	_, _ = s.fakeStore.RevokeToken(ctx, id, now)
	return auth.Token{}, fmt.Errorf("revoke token %d: %w", id, alarm.ErrUnavailable)
}

// A revocation the store did not answer may have been made: the token is
// forgotten here and told to the others all the same (found by review: it
// worked on for auth.cache_ttl after a 503 whose UPDATE landed).
func TestRevokeUnansweredIsForgottenAllTheSame(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := newFake()
	var told []int64
	a := auth.New(lostRevoke{st}, auth.Config{Mode: auth.ModeTokens, CacheTTL: time.Hour,
		OnRevoke: func(_ context.Context, id int64) { told = append(told, id) }})
	tok, secret, err := a.CreateToken(ctx, auth.NewToken{Application: "order", Scopes: []auth.Scope{auth.ScopeRead}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Authenticate(ctx, "Bearer "+secret); err != nil { // cached for an hour
		t.Fatal(err)
	}
	if _, err := a.RevokeToken(ctx, tok.ID); !errors.Is(err, alarm.ErrUnavailable) {
		t.Fatalf("revoke: %v, want the store's unavailable", err)
	}
	if len(told) != 1 || told[0] != tok.ID {
		t.Errorf("told %v, want [%d]", told, tok.ID)
	}
	if _, err := a.Authenticate(ctx, "Bearer "+secret); !errors.Is(err, auth.ErrUnauthenticated) {
		t.Errorf("a token revoked by an unanswered revocation, cached before: %v, want unauthenticated", err)
	}
}

// While MySQL cannot be reached, a token this instance found valid within
// the last hour is still taken by a caller that asks (StaleOK: a scrape of
// /metrics must see clockd_mysql_up 0); every other call keeps the bound on
// a revocation made straight on MySQL, the cache TTL (found by the review
// of the first version, which took it for every call). A token never found
// valid, or found valid too long ago, is not taken, and the token is looked
// up again once MySQL is back.
func TestValidTokenOutlivesItsCacheWhileMySQLIsAway(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	scrape := auth.StaleOK(ctx)
	st, clk := newFake(), &clock{t: time.Unix(1e9, 0)}
	a := auth.New(st, auth.Config{Mode: auth.ModeTokens, CacheTTL: 5 * time.Second, Now: clk.now})
	tok, secret, err := a.CreateToken(ctx, auth.NewToken{Admin: true})
	if err != nil {
		t.Fatal(err)
	}
	_, never, _ := a.CreateToken(ctx, auth.NewToken{Admin: true})
	if _, err := a.Authenticate(ctx, "Bearer "+secret); err != nil {
		t.Fatal(err)
	}
	// revoked straight on MySQL (clockd token revoke), then MySQL away
	if _, err := st.RevokeToken(ctx, tok.ID, clk.now()); err != nil {
		t.Fatal(err)
	}
	st.mu.Lock()
	st.down = true
	st.mu.Unlock()
	clk.add(30 * time.Minute)
	if p, err := a.Authenticate(scrape, "Bearer "+secret); err != nil || !p.Admin {
		t.Errorf("scrape with a token found valid 30 min ago, MySQL away: %+v, %v; want it taken", p, err)
	}
	if _, err := a.Authenticate(ctx, "Bearer "+secret); !errors.Is(err, alarm.ErrUnavailable) {
		t.Errorf("API call with a token found valid 30 min ago (and revoked since), MySQL away: %v; want unavailable", err)
	}
	if _, err := a.Authenticate(scrape, "Bearer "+never); !errors.Is(err, alarm.ErrUnavailable) {
		t.Errorf("token never looked up, MySQL away: %v; want unavailable", err)
	}
	clk.add(31 * time.Minute)
	if _, err := a.Authenticate(scrape, "Bearer "+secret); !errors.Is(err, alarm.ErrUnavailable) {
		t.Errorf("token found valid 61 min ago, MySQL away: %v; want unavailable", err)
	}
	st.mu.Lock()
	st.down = false
	st.mu.Unlock()
	if _, err := a.Authenticate(scrape, "Bearer "+secret); !errors.Is(err, auth.ErrUnauthenticated) {
		t.Errorf("MySQL back: %v; want the token looked up again, and refused as revoked", err)
	}
}

// A token's last_used_at write that MySQL holds (FLUSH TABLES WITH READ
// LOCK during a backup) does not hold the request: the token read answered,
// so the request is answered within touchWait and the token is cached; one
// write per token is under way at a time.
func TestHeldLastUsedWriteHoldsNoRequest(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, clk := newFake(), &clock{t: time.Unix(1e9, 0)}
	a := auth.New(st, auth.Config{Mode: auth.ModeTokens, CacheTTL: 5 * time.Second, Now: clk.now})
	_, secret, err := a.CreateToken(ctx, auth.NewToken{Application: "order", Scopes: []auth.Scope{auth.ScopeRead}})
	if err != nil {
		t.Fatal(err)
	}
	hold := make(chan struct{})
	defer close(hold)
	st.mu.Lock()
	st.touchHold = hold
	st.mu.Unlock()
	for i := range 3 {
		began := time.Now()
		if _, err := a.Authenticate(ctx, "Bearer "+secret); err != nil {
			t.Fatal(err)
		}
		if took := time.Since(began); took > time.Second {
			t.Errorf("request %d with its token's last_used_at write held: answered after %v", i, took)
		}
		clk.add(6 * time.Second) // past the cache TTL: looked up again
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.lookups != 3 || st.touches != 1 {
		t.Errorf("%d lookups, %d last_used_at writes; want 3 lookups and one write (the first, still held)", st.lookups, st.touches)
	}
}
