package auth

import (
	"context"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/clockd/clockd/internal/alarm"
)

// DefaultLiveCountTTL is how long a count of an application's live clocks
// is used (plus the creates admitted since) before it is counted again.
const DefaultLiveCountTTL = time.Second

// Quotas enforces the per-application quotas:
//   - max_payload_bytes: exact;
//   - creates_per_second: a token bucket per application and instance that
//     holds one second of creates;
//   - max_live_clocks: the count of pending and firing clocks, read from the
//     store at most once per LiveTTL, plus the creates this instance
//     admitted since. Several instances creating for one application at the
//     same moment can overshoot it by what they admit within that time.
//
// Quotas are cached for CacheTTL: a change through another instance applies
// here within it; a change through this one at once.
type Quotas struct {
	store   Store
	ttl     time.Duration
	liveTTL time.Duration
	now     func() time.Time

	mu   sync.Mutex
	apps map[string]*appState
}

type appState struct {
	mu      sync.Mutex
	quota   Quota
	quotaAt time.Time // zero: not read yet

	tokens float64 // creates_per_second bucket
	filled time.Time

	live    int // pending + firing at liveAt
	liveAt  time.Time
	since   int // creates admitted since liveAt
	counted bool
}

// QuotaConfig configures Quotas.
type QuotaConfig struct {
	CacheTTL time.Duration // default DefaultCacheTTL
	LiveTTL  time.Duration // default DefaultLiveCountTTL
	Now      func() time.Time
}

// NewQuotas returns the quota keeper over store.
func NewQuotas(store Store, cfg QuotaConfig) *Quotas {
	if cfg.CacheTTL <= 0 {
		cfg.CacheTTL = DefaultCacheTTL
	}
	if cfg.LiveTTL <= 0 {
		cfg.LiveTTL = DefaultLiveCountTTL
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Quotas{store: store, ttl: cfg.CacheTTL, liveTTL: cfg.LiveTTL, now: cfg.Now, apps: map[string]*appState{}}
}

func (q *Quotas) state(app string) *appState {
	q.mu.Lock()
	defer q.mu.Unlock()
	st := q.apps[app]
	if st == nil {
		if len(q.apps) >= maxCached {
			clear(q.apps)
		}
		st = &appState{}
		q.apps[app] = st
	}
	return st
}

// Get reads an application's quota (the zero quota, with the application,
// when none is set).
func (q *Quotas) Get(ctx context.Context, app string) (Quota, error) {
	qu := Quota{Application: app}
	if err := qu.Check(); err != nil {
		return Quota{}, err
	}
	got, err := q.store.Quota(ctx, app)
	if err != nil {
		return Quota{}, err
	}
	got.Application = app
	return got, nil
}

// Set stores an application's quota; it applies here at once.
func (q *Quotas) Set(ctx context.Context, qu Quota) (Quota, error) {
	if err := qu.Check(); err != nil {
		return Quota{}, err
	}
	now := q.now()
	got, err := q.store.SetQuota(ctx, qu, now)
	if err != nil {
		return Quota{}, err
	}
	st := q.state(qu.Application)
	st.mu.Lock()
	st.setQuota(got, now)
	st.mu.Unlock()
	return got, nil
}

func (st *appState) setQuota(qu Quota, now time.Time) {
	if qu.CreatesPerSecond != st.quota.CreatesPerSecond || st.quotaAt.IsZero() {
		st.tokens, st.filled = float64(qu.CreatesPerSecond), now // a full bucket
	}
	st.quota, st.quotaAt = qu, now
}

// Admit decides, for creates of application app with the given payload
// sizes, which may go ahead: one error per create, nil or a *QuotaError.
// Admitted creates are counted as live clocks until the next count.
func (q *Quotas) Admit(ctx context.Context, app string, payloads []int) ([]error, error) {
	errs := make([]error, len(payloads))
	if alarm.CheckApplication(app) != nil {
		return errs, nil // refused by validation, which names the field
	}
	st := q.state(app)
	st.mu.Lock()
	defer st.mu.Unlock()
	now := q.now()
	if st.quotaAt.IsZero() || now.Sub(st.quotaAt) > q.ttl {
		qu, err := q.store.Quota(ctx, app)
		if err != nil {
			return nil, fmt.Errorf("read quota of %s: %w", app, err)
		}
		qu.Application = app
		st.setQuota(qu, now)
	}
	qu := st.quota
	if qu.None() {
		return errs, nil
	}
	if qu.MaxLiveClocks > 0 && (!st.counted || now.Sub(st.liveAt) > q.liveTTL) {
		n, err := q.store.LiveClocks(ctx, app)
		if err != nil {
			return nil, fmt.Errorf("count live clocks of %s: %w", app, err)
		}
		st.live, st.liveAt, st.since, st.counted = n, now, 0, true
	}
	if qu.CreatesPerSecond > 0 {
		rate := float64(qu.CreatesPerSecond)
		st.tokens = math.Min(rate, st.tokens+now.Sub(st.filled).Seconds()*rate)
		st.filled = now
	}
	for i, size := range payloads {
		if qu.MaxPayloadBytes > 0 && size > qu.MaxPayloadBytes {
			errs[i] = &QuotaError{Application: app, Quota: "max_payload_bytes", RetryAfter: time.Minute,
				Message: fmt.Sprintf("payload: %d bytes is more than application %s's quota max_payload_bytes of %d", size, app, qu.MaxPayloadBytes)}
			continue
		}
		if qu.CreatesPerSecond > 0 && st.tokens < 1 {
			wait := time.Duration((1 - st.tokens) / float64(qu.CreatesPerSecond) * float64(time.Second))
			errs[i] = &QuotaError{Application: app, Quota: "creates_per_second", RetryAfter: wait,
				Message: fmt.Sprintf("application %s creates more than its quota creates_per_second of %d; retry later", app, qu.CreatesPerSecond)}
			continue
		}
		if qu.MaxLiveClocks > 0 && st.live+st.since >= qu.MaxLiveClocks {
			errs[i] = &QuotaError{Application: app, Quota: "max_live_clocks", RetryAfter: q.liveTTL,
				Message: fmt.Sprintf("application %s has reached its quota max_live_clocks of %d (pending or firing clocks)", app, qu.MaxLiveClocks)}
			continue
		}
		if qu.CreatesPerSecond > 0 {
			st.tokens--
		}
		st.since++
	}
	return errs, nil
}
