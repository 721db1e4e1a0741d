package ring

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/clockd/clockd/internal/alarm"
)

// fakeStore keeps clock rows in memory and applies the loop's writes with
// the semantics of the SQL in internal/mysql/ring.go.
type fakeStore struct {
	clk *fakeClock

	mu        sync.Mutex
	rows      map[int64]*alarm.Clock
	tokens    map[int64]int64 // claim token of firing rows
	claims    []claimCall
	released  [][]int64
	fails     []alarm.Outcome
	rung      []int64
	rungCalls int // MarkRung round trips
	expired   []int64
	unclaimed []int64
	advanced  []alarm.Advance // recurring occurrences recorded, in order
	firing    int             // rows firing now
	maxFiring int

	claimTakes time.Duration // each Claim takes this long (fake time)
	claimErr   error         // Claim fails with it...
	applyOnErr bool          // ...after applying the claim (the answer was lost)
	writeErr   error         // MarkRung/Fail/Expire/Unclaim/Release fail with it
}

type claimCall struct {
	at  time.Time
	ids []int64
	got []int64
}

func newFakeStore(clk *fakeClock) *fakeStore {
	return &fakeStore{clk: clk, rows: map[int64]*alarm.Clock{}, tokens: map[int64]int64{}}
}

func (s *fakeStore) put(c alarm.Clock) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if c.Status == "" {
		c.Status = alarm.StatusPending
	}
	s.rows[c.ID] = &c
}

func (s *fakeStore) row(id int64) alarm.Clock {
	s.mu.Lock()
	defer s.mu.Unlock()
	return *s.rows[id]
}

func (s *fakeStore) setStatus(c *alarm.Clock, st alarm.Status) {
	if c.Status == alarm.StatusFiring {
		s.firing--
		delete(s.tokens, c.ID)
	}
	if st == alarm.StatusFiring {
		s.firing++
		s.maxFiring = max(s.maxFiring, s.firing)
	}
	c.Status = st
}

func (s *fakeStore) Claim(_ context.Context, owner string, leases []alarm.Lease, ids []int64, token int64, until, now time.Time) ([]alarm.Clock, error) {
	s.mu.Lock()
	takes := s.claimTakes
	s.mu.Unlock()
	began := s.clk.Now()
	if takes > 0 {
		<-s.clk.NewTimer(takes).C()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	call := claimCall{at: began, ids: slices.Clone(ids)}
	var out []alarm.Clock
	if s.claimErr == nil || s.applyOnErr {
		held := map[int]bool{}
		for _, l := range leases {
			held[l.Shard] = true
		}
		for _, id := range ids {
			c, ok := s.rows[id]
			if !ok || c.Status != alarm.StatusPending || c.NextTryAt.After(until) || !held[c.Shard] || owner != "me" {
				continue
			}
			s.setStatus(c, alarm.StatusFiring)
			c.Attempts++ // the claim counts the attempt
			s.tokens[id] = token
			out = append(out, *c)
			call.got = append(call.got, id)
		}
	}
	s.claims = append(s.claims, call)
	if s.claimErr != nil {
		return nil, s.claimErr
	}
	return out, nil
}

func (s *fakeStore) Waiting(_ context.Context, ids []int64, until time.Time) ([]alarm.Due, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.claimErr != nil {
		return nil, s.claimErr
	}
	var out []alarm.Due
	for _, id := range ids {
		if c, ok := s.rows[id]; ok && c.Status == alarm.StatusPending && c.NextTryAt.After(until) {
			out = append(out, alarm.Due{ID: id, Shard: c.Shard, At: c.NextTryAt})
		}
	}
	return out, nil
}

func (s *fakeStore) Release(_ context.Context, token int64, ids []int64, now time.Time) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.writeErr != nil {
		return s.writeErr
	}
	s.released = append(s.released, slices.Clone(ids))
	for _, id := range ids {
		if c := s.rows[id]; c != nil && c.Status == alarm.StatusFiring && s.tokens[id] == token {
			s.setStatus(c, alarm.StatusPending)
			c.Attempts = max(c.Attempts, 1) - 1
		}
	}
	return nil
}

// fenced reports whether row id is firing under one of the tokens.
func (s *fakeStore) fenced(id int64, tokens []int64) bool {
	c := s.rows[id]
	return c != nil && c.Status == alarm.StatusFiring && slices.Contains(tokens, s.tokens[id])
}

func (s *fakeStore) MarkRung(_ context.Context, rungs []alarm.Rung, tokens []int64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.writeErr != nil {
		return s.writeErr
	}
	s.rungCalls++
	for _, r := range rungs {
		if c := s.rows[r.ID]; s.fenced(r.ID, tokens) {
			s.setStatus(c, alarm.StatusRung)
			c.RungAt = r.At
			c.LastError = ""
			s.rung = append(s.rung, r.ID)
		}
	}
	return nil
}

func (s *fakeStore) Fail(_ context.Context, outs []alarm.Outcome, tokens []int64, now time.Time) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.writeErr != nil {
		return s.writeErr
	}
	for _, o := range outs {
		if c := s.rows[o.ID]; s.fenced(o.ID, tokens) {
			s.setStatus(c, o.Status)
			c.LastError = o.Error
			c.NextTryAt = o.NextTryAt
			if o.NextTryAt.IsZero() {
				c.NextTryAt = now
			}
			s.fails = append(s.fails, o)
		}
	}
	return nil
}

// Advance moves recurring clocks to their next occurrence, as the MySQL
// store does in one transaction.
func (s *fakeStore) Advance(_ context.Context, advs []alarm.Advance, tokens []int64, now time.Time) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.writeErr != nil {
		return s.writeErr
	}
	for _, a := range advs {
		c := s.rows[a.ID]
		if !s.fenced(a.ID, tokens) {
			continue
		}
		s.advanced = append(s.advanced, a)
		c.Occurrences = a.Occurrences
		if a.Status == alarm.StatusRung {
			c.RungAt, c.LastError = a.At, ""
		} else {
			c.LastError = a.Error
		}
		if a.Next.IsZero() {
			s.setStatus(c, a.Status)
			continue
		}
		s.setStatus(c, alarm.StatusPending)
		c.RingAt, c.NextTryAt, c.Attempts = a.Next, a.NextTryAt, 0
	}
	return nil
}

func (s *fakeStore) Expire(_ context.Context, ids, tokens []int64, now time.Time) error {
	return s.set(ids, tokens, alarm.StatusExpired, &s.expired)
}

func (s *fakeStore) Unclaim(_ context.Context, ids, tokens []int64, now time.Time) error {
	return s.set(ids, tokens, alarm.StatusPending, &s.unclaimed)
}

func (s *fakeStore) set(ids, tokens []int64, st alarm.Status, log *[]int64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.writeErr != nil {
		return s.writeErr
	}
	for _, id := range ids {
		if c := s.rows[id]; s.fenced(id, tokens) {
			s.setStatus(c, st)
			c.Attempts = max(c.Attempts, 1) - 1 // expire, unclaim: no attempt was made
			*log = append(*log, id)
		}
	}
	return nil
}

func (s *fakeStore) claimCalls() []claimCall {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.claims)
}

// claimedIDs lists every id some claim moved to firing.
func (s *fakeStore) claimedIDs() []int64 {
	var out []int64
	for _, c := range s.claimCalls() {
		out = append(out, c.got...)
	}
	return out
}

func (s *fakeStore) with(f func(s *fakeStore)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f(s)
}

// fakePub records what it publishes. result decides each ring's fate; gate,
// when set, holds every Publish call until the test sends on it.
type fakePub struct {
	clk *fakeClock

	mu     sync.Mutex
	ready  error
	calls  []pubCall
	result func(Ring) error
	gate   chan struct{}
}

type pubCall struct {
	at    time.Time
	rings []Ring
	ended error // why ctx ended the wait at the gate (nil: the gate opened)
}

func (p *fakePub) Ready() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.ready
}

func (p *fakePub) setReady(err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.ready = err
}

func (p *fakePub) Publish(ctx context.Context, rings []Ring) []Result {
	p.mu.Lock()
	call := pubCall{at: p.clk.Now(), rings: slices.Clone(rings)}
	p.calls = append(p.calls, call)
	n := len(p.calls) - 1
	gate, result := p.gate, p.result
	p.mu.Unlock()
	var ended error
	if gate != nil {
		// the broker's confirms: until the gate opens, or the caller ends the wait
		select {
		case <-gate:
		case <-ctx.Done():
			ended = context.Cause(ctx)
			p.mu.Lock()
			p.calls[n].ended = ended
			p.mu.Unlock()
		}
	}
	res := make([]Result, len(rings))
	at := p.clk.Now()
	for i, r := range rings {
		res[i].At = at
		switch {
		case ended != nil:
			res[i].Err = ended
		case result != nil:
			res[i].Err = result(r)
		}
	}
	return res
}

func (p *fakePub) published() []pubCall {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.calls)
}

// publishedIDs lists the clock ids of every ring published, in order.
func (p *fakePub) publishedIDs() []int64 {
	var out []int64
	for _, c := range p.published() {
		for _, r := range c.rings {
			out = append(out, r.Clock.ID)
		}
	}
	return out
}

// fakeFeed holds every shard (epoch 1) unless told it lost one. Offered
// clocks of held shards go back into the queue, as the preloader does.
type fakeFeed struct {
	q *Queue

	mu     sync.Mutex
	lost   map[int]bool
	offers []alarm.Due
	until  time.Time // lease end of every held shard (far ahead unless a test sets it)
}

func (f *fakeFeed) Owner() string { return "me" }

func (f *fakeFeed) Leases(shards []int) []alarm.Lease {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []alarm.Lease
	for _, s := range shards {
		if !f.lost[s] {
			out = append(out, alarm.Lease{Shard: s, Epoch: 1})
		}
	}
	return out
}

func (f *fakeFeed) ValidUntil(shard int, epoch int64) time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.lost[shard] || epoch != 1 {
		return time.Time{}
	}
	return f.until
}

func (f *fakeFeed) setUntil(t time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.until = t
}

func (f *fakeFeed) Offer(d alarm.Due) {
	f.mu.Lock()
	f.offers = append(f.offers, d)
	held := !f.lost[d.Shard]
	f.mu.Unlock()
	if held {
		f.q.Add(Live, d)
	}
}

func (f *fakeFeed) Drained([]int) {}

func (f *fakeFeed) lose(shard int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.lost == nil {
		f.lost = map[int]bool{}
	}
	f.lost[shard] = true
}

func (f *fakeFeed) regain(shard int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.lost, shard)
}

func (f *fakeFeed) offered() []alarm.Due {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.offers)
}

// harness is a Loop on fakes inside a synctest bubble: synctest.Wait
// returns once every goroutine of the loop is blocked (on a fake timer, the
// wake channels or the publish gate), so after an Advance the test sees
// everything the loop did at that instant, and nothing more will happen
// until the next Advance.
type harness struct {
	t     *testing.T
	clk   *fakeClock
	q     *Queue
	store *fakeStore
	pub   *fakePub
	feed  *fakeFeed
	loop  *Loop

	cancel context.CancelFunc
	done   chan struct{}
}

const claimAhead = 100 * time.Millisecond

// newHarness starts a loop; call it inside synctest.Test.
func newHarness(t *testing.T, cfg Config) *harness {
	t.Helper()
	clk := newFakeClock(t0)
	h := &harness{t: t, clk: clk, q: NewQueue(), store: newFakeStore(clk), pub: &fakePub{clk: clk}}
	h.feed = &fakeFeed{q: h.q, until: h.clk.Now().Add(24 * time.Hour)}
	if cfg.ClaimAhead == 0 {
		cfg.ClaimAhead = claimAhead
	}
	if cfg.ClaimAheadMax == 0 {
		cfg.ClaimAheadMax = time.Second // ring.claim_ahead_max's default
	}
	if cfg.Retry.Min == 0 {
		cfg.Retry = Retry{Min: time.Second, Max: time.Minute, Rand: fixed(0.5)}
	}
	if sk, ok := cfg.Clock.(*skewedClock); ok {
		sk.fakeClock = clk // the ring times are the fake clock's
	} else {
		cfg.Clock = clk
	}
	h.loop = New(cfg, h.q, h.store, h.pub, h.feed)
	ctx, cancel := context.WithCancel(context.Background())
	h.cancel, h.done = cancel, make(chan struct{})
	go func() {
		defer close(h.done)
		if err := h.loop.Run(ctx); err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	t.Cleanup(h.stop)
	synctest.Wait()
	return h
}

// stop cancels Run and waits for it to return.
func (h *harness) stop() {
	h.cancel()
	<-h.done
}

// add stores pending clocks and puts them in the queue, due at NextTryAt
// (RingAt when not set).
func (h *harness) add(cs ...alarm.Clock) {
	for _, c := range cs {
		if c.NextTryAt.IsZero() {
			c.NextTryAt = c.RingAt
		}
		if c.Application == "" {
			c.Application = "app"
		}
		h.store.put(c)
		h.q.Add(Live, alarm.Due{ID: c.ID, Shard: c.Shard, At: c.NextTryAt})
	}
	synctest.Wait()
}

// advance moves the fake time by d and lets the loop react.
func (h *harness) advance(d time.Duration) {
	h.clk.Advance(d)
	synctest.Wait()
}

// step advances to until in steps of d, calling check at every instant
// (including the first, before any step).
func (h *harness) step(until time.Time, d time.Duration, check func(now time.Time)) {
	h.t.Helper()
	for {
		check(h.clk.Now())
		if h.t.Failed() || !h.clk.Now().Before(until) {
			return
		}
		h.advance(min(d, until.Sub(h.clk.Now())))
	}
}

func clockAt(id int64, at time.Time) alarm.Clock {
	return alarm.Clock{ID: id, Shard: int(id % 4), RingAt: at}
}

var (
	errBroker = errors.New("message unroutable")
	errMySQL  = errors.New("mysql: invalid connection")
)
