package janitor_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/clockd/clockd/internal/alarm"
	"github.com/clockd/clockd/internal/janitor"
	"github.com/clockd/clockd/internal/mysql"
	"github.com/clockd/clockd/internal/testenv"
)

func day(s string) time.Time {
	d, err := time.Parse(time.DateOnly, s)
	if err != nil {
		panic(err)
	}
	return d
}

func days(ss ...string) []time.Time {
	var out []time.Time
	for _, s := range ss {
		out = append(out, day(s))
	}
	return out
}

func fmtDays(ds []time.Time) string {
	var s []string
	for _, d := range ds {
		s = append(s, d.Format(time.DateOnly))
	}
	return strings.Join(s, ",")
}

func TestPlanPartitions(t *testing.T) {
	t.Parallel()
	now := time.Date(2030, 1, 10, 15, 0, 0, 0, time.UTC)
	tests := []struct {
		name      string
		existing  []time.Time
		keep      time.Duration
		noHistory bool
		ahead     int
		add, drop string
	}{
		{"first run: from the oldest kept day to today+ahead", nil, 3 * 24 * time.Hour, false, 2, "2030-01-07,2030-01-08,2030-01-09,2030-01-10,2030-01-11,2030-01-12", ""},
		{"up to date", days("2030-01-07", "2030-01-08", "2030-01-09", "2030-01-10", "2030-01-11", "2030-01-12"), 3 * 24 * time.Hour, false, 2, "", ""},
		{"a day later", days("2030-01-06", "2030-01-07", "2030-01-08", "2030-01-09", "2030-01-10", "2030-01-11"), 3 * 24 * time.Hour, false, 2, "2030-01-12", "2030-01-06"},
		// 2030-01-07 ends at 01-08 00:00, after now-keep (01-07 15:00): kept
		{"a day is dropped only once all of it is past keep", days("2030-01-07"), 3 * 24 * time.Hour, false, 0, "2030-01-08,2030-01-09,2030-01-10", ""},
		{"after a long stop: everything old dropped, restart at the horizon", days("2029-11-01", "2029-11-02"), 3 * 24 * time.Hour, false, 1, "2030-01-07,2030-01-08,2030-01-09,2030-01-10,2030-01-11", "2029-11-01,2029-11-02"},
		{"no history: past days dropped, none added", days("2030-01-09", "2030-01-10", "2030-01-11"), 0, true, 3, "", "2030-01-09"},
		{"keep shortened", days("2030-01-01", "2030-01-02", "2030-01-09", "2030-01-10", "2030-01-11"), 24 * time.Hour, false, 1, "", "2030-01-01,2030-01-02"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			add, drop := janitor.PlanPartitions(tt.existing, now, tt.keep, tt.noHistory, tt.ahead)
			if got := fmtDays(add); got != tt.add {
				t.Errorf("add %s, want %s", got, tt.add)
			}
			if got := fmtDays(drop); got != tt.drop {
				t.Errorf("drop %s, want %s", got, tt.drop)
			}
		})
	}
}

// world is a migrated database with a store on it.
type world struct {
	db    *sqlx.DB
	store *mysql.Store
}

func newWorld(t *testing.T) world {
	t.Helper()
	dsn := testenv.MySQLDSN(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	db, err := mysql.Open(ctx, dsn, 12)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	if err := mysql.Migrate(ctx, db, slog.New(slog.DiscardHandler)); err != nil {
		t.Fatal(err)
	}
	n, err := mysql.SetupShards(ctx, db, 4)
	if err != nil {
		t.Fatal(err)
	}
	s := mysql.NewStore(db, mysql.StoreConfig{Shards: n})
	t.Cleanup(s.Close)
	return world{db: db, store: s}
}

// insert adds clocks of a status finished (last changed) at `at`.
func (w world) insert(t *testing.T, prefix string, n int, status alarm.Status, at time.Time) {
	t.Helper()
	if _, err := w.db.Exec(`INSERT INTO clock (application, business_id, shard, status, payload, content_type,
		target_ring_at, next_try_time, create_time, update_time) SELECT 'app', CONCAT(?, seq), seq % 4, ?, 'p', 'text/plain', ?, ?, ?, ?
		FROM seq_1_to_`+fmt.Sprint(n), prefix, string(status), at.UnixMilli(), at.UnixMilli(), at.UnixMilli()-1000, at.UnixMilli()); err != nil {
		t.Fatal(err)
	}
}

func (w world) count(t *testing.T, q string, args ...any) int {
	t.Helper()
	var n int
	if err := w.db.Get(&n, q, args...); err != nil {
		t.Fatal(err)
	}
	return n
}

func (w world) days(t *testing.T) string {
	t.Helper()
	ds, err := w.store.HistoryDays(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return fmtDays(ds)
}

type fakeNow struct {
	mu sync.Mutex
	t  time.Time
}

func (f *fakeNow) Now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.t
}

func (f *fakeNow) Set(t time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.t = t
}

// Retention per kind: rung and cancelled clocks leave after Retention,
// expired and dead ones after RetentionFailed, live ones never; what
// leaves goes to history with the time it finished, in batches.
func TestRetention(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	now := &fakeNow{t: time.Date(2030, 1, 10, 12, 0, 0, 0, time.UTC)}
	h := time.Hour
	w.insert(t, "rung-old-", 25, alarm.StatusRung, now.Now().Add(-25*h))
	w.insert(t, "rung-new-", 5, alarm.StatusRung, now.Now().Add(-23*h))
	w.insert(t, "cancelled-old-", 7, alarm.StatusCancelled, now.Now().Add(-48*h))
	w.insert(t, "dead-2d-", 4, alarm.StatusDead, now.Now().Add(-48*h))
	w.insert(t, "dead-8d-", 6, alarm.StatusDead, now.Now().Add(-8*24*h))
	w.insert(t, "expired-8d-", 3, alarm.StatusExpired, now.Now().Add(-8*24*h))
	w.insert(t, "pending-", 9, alarm.StatusPending, now.Now().Add(-100*24*h))
	w.insert(t, "firing-", 2, alarm.StatusFiring, now.Now().Add(-100*24*h))
	// a clock that finished past the history's keep goes nowhere
	w.insert(t, "rung-ancient-", 3, alarm.StatusRung, now.Now().Add(-40*24*h))

	reg := prometheus.NewRegistry()
	j := janitor.New(janitor.Config{InstanceID: "a", Batch: 4, Pause: time.Millisecond, Now: now.Now, Registerer: reg}, w.store)
	if err := j.RunOnce(context.Background()); err != nil {
		t.Fatal(err)
	}
	left := map[string]int{}
	var rows []string
	if err := w.db.Select(&rows, "SELECT business_id FROM clock"); err != nil {
		t.Fatal(err)
	}
	for _, r := range rows {
		left[r[:strings.LastIndex(r, "-")]]++
	}
	want := map[string]int{"rung-new": 5, "dead-2d": 4, "pending": 9, "firing": 2}
	if fmt.Sprint(left) != fmt.Sprint(want) {
		t.Errorf("left in clock %v, want %v", left, want)
	}
	if n := w.count(t, "SELECT COUNT(*) FROM clock_history WHERE finish_time = update_time"); n != 25+7+6+3 {
		t.Errorf("history holds %d clocks, want %d", n, 25+7+6+3)
	}
	if n := w.count(t, "SELECT COUNT(*) FROM clock_history WHERE business_id LIKE 'rung-ancient-%'"); n != 0 {
		t.Errorf("clocks finished before history.keep went to history: %d", n)
	}
	if got := testenv.Metric(t, reg, "clockd_janitor_rows_total", "action", "archived"); got != 41 {
		t.Errorf("archived counter %v", got)
	}
	if got := testenv.Metric(t, reg, "clockd_janitor_rows_total", "action", "deleted"); got != 3 {
		t.Errorf("deleted counter %v", got)
	}
	// clockd_clocks is exported by the holder only: this janitor did not
	// take the lease (RunOnce alone), so nothing.
	if n := series(t, reg, "clockd_clocks"); n != 0 {
		t.Errorf("clockd_clocks exported without the lease: %d series", n)
	}
	// A day later the rest follows; a second run finds nothing.
	now.Set(now.Now().Add(7 * 24 * h))
	if err := j.RunOnce(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n := w.count(t, "SELECT COUNT(*) FROM clock WHERE status NOT IN ('pending', 'firing')"); n != 0 {
		t.Errorf("%d finished clocks left", n)
	}
}

// series counts the series of a metric the registry exports.
func series(t *testing.T, reg *prometheus.Registry, name string) int {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return len(mf.GetMetric())
		}
	}
	return 0
}

// Partitions: created ahead from the oldest kept day, dropped whole (with
// their clocks) once past keep, added again as days pass.
func TestHistoryPartitions(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	ctx := context.Background()
	now := &fakeNow{t: time.Date(2030, 1, 10, 12, 0, 0, 0, time.UTC)}
	reg := prometheus.NewRegistry()
	ddl := &dayDDL{Store: w.store}
	j := janitor.New(janitor.Config{InstanceID: "a", HistoryKeep: 2 * 24 * time.Hour, PartitionsAhead: 2, Retention: time.Hour, Now: now.Now, Registerer: reg}, ddl)
	if err := j.RunOnce(ctx); err != nil {
		t.Fatal(err)
	}
	if got := w.days(t); got != "2030-01-08,2030-01-09,2030-01-10,2030-01-11,2030-01-12" {
		t.Fatalf("days after the first run: %s", got)
	}
	// one statement per day: five, not one for all five
	if fmt.Sprint(ddl.sizes) != "[1 1 1 1 1]" {
		t.Errorf("partition changes carried %v days each, want one day each", ddl.sizes)
	}
	if got := testenv.Metric(t, reg, "clockd_janitor_history_partitions"); got != 5 {
		t.Errorf("clockd_janitor_history_partitions %v, want 5", got)
	}
	if got := testenv.Metric(t, reg, "clockd_janitor_partitions_total", "action", "created"); got != 5 {
		t.Errorf("clockd_janitor_partitions_total{action=created} %v, want 5", got)
	}
	// clocks finishing on the 9th and the 10th land in their days
	w.insert(t, "ninth-", 5, alarm.StatusRung, time.Date(2030, 1, 9, 8, 0, 0, 0, time.UTC))
	w.insert(t, "tenth-", 3, alarm.StatusRung, time.Date(2030, 1, 10, 8, 0, 0, 0, time.UTC))
	if err := j.RunOnce(ctx); err != nil {
		t.Fatal(err)
	}
	if n := w.count(t, "SELECT COUNT(*) FROM clock_history PARTITION (p20300109)"); n != 5 {
		t.Errorf("p20300109 holds %d, want 5", n)
	}
	if n := w.count(t, "SELECT COUNT(*) FROM clock_history PARTITION (p20300110)"); n != 3 {
		t.Errorf("p20300110 holds %d, want 3", n)
	}
	// Two days later: the 8th and the 9th (ended before now-keep) are
	// dropped, clocks and all; the 13th and 14th are added.
	now.Set(time.Date(2030, 1, 12, 1, 0, 0, 0, time.UTC))
	if err := j.RunOnce(ctx); err != nil {
		t.Fatal(err)
	}
	if got := w.days(t); got != "2030-01-10,2030-01-11,2030-01-12,2030-01-13,2030-01-14" {
		t.Errorf("days two days later: %s", got)
	}
	if got := testenv.Metric(t, reg, "clockd_janitor_partitions_total", "action", "dropped"); got != 2 {
		t.Errorf("clockd_janitor_partitions_total{action=dropped} %v, want 2", got)
	}
	if got := testenv.Metric(t, reg, "clockd_janitor_history_partitions"); got != 5 {
		t.Errorf("clockd_janitor_history_partitions %v after two days, want 5", got)
	}
	for _, n := range ddl.sizes {
		if n != 1 {
			t.Errorf("partition changes carried %v days each, want one day each", ddl.sizes)
			break
		}
	}
	if n := w.count(t, "SELECT COUNT(*) FROM clock_history"); n != 3 {
		t.Errorf("history holds %d after the drop, want the 3 of the 10th", n)
	}
	// GET no longer finds a clock whose day was dropped.
	if _, err := w.store.Get(ctx, alarm.Key{Application: "app", BusinessID: "ninth-1"}); !errors.Is(err, alarm.ErrNotFound) {
		t.Errorf("get of a dropped clock: %v", err)
	}
	if c, err := w.store.Get(ctx, alarm.Key{Application: "app", BusinessID: "tenth-1"}); err != nil || !c.Archived {
		t.Errorf("get of an archived clock: %+v %v", c, err)
	}
}

// With history.keep 0 finished clocks are deleted, and old days dropped.
func TestNoHistory(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	ctx := context.Background()
	now := &fakeNow{t: time.Date(2030, 1, 10, 12, 0, 0, 0, time.UTC)}
	keep := janitor.New(janitor.Config{InstanceID: "a", HistoryKeep: 2 * 24 * time.Hour, Now: now.Now}, w.store)
	if err := keep.RunOnce(ctx); err != nil {
		t.Fatal(err)
	}
	w.insert(t, "old-", 3, alarm.StatusRung, now.Now().Add(-30*time.Hour))
	if err := keep.RunOnce(ctx); err != nil { // with history, they go there
		t.Fatal(err)
	}
	w.insert(t, "gone-", 4, alarm.StatusCancelled, now.Now().Add(-30*time.Hour))
	none := janitor.New(janitor.Config{InstanceID: "a", NoHistory: true, Now: now.Now}, w.store)
	if err := none.RunOnce(ctx); err != nil {
		t.Fatal(err)
	}
	if n := w.count(t, "SELECT COUNT(*) FROM clock"); n != 0 {
		t.Errorf("%d clocks left in clock", n)
	}
	if n := w.count(t, "SELECT COUNT(*) FROM clock_history WHERE business_id LIKE 'gone-%'"); n != 0 {
		t.Errorf("%d clocks went to history without history", n)
	}
	if got := w.days(t); got != "2030-01-10,2030-01-11,2030-01-12,2030-01-13" {
		t.Errorf("days without history: %s (past days dropped, the rest left to empty)", got)
	}
}

// flaky is a store that can die: every call fails, as when the process is
// gone or cut off, so its lease is neither renewed nor released.
type flaky struct {
	janitor.Store
	dead     atomic.Bool
	failNext atomic.Int32 // fail this many HoldLease calls, then work again
}

var errDead = errors.New("dead")

func (f *flaky) HoldLease(ctx context.Context, name, owner string, ttl time.Duration) (bool, error) {
	if f.dead.Load() || f.failNext.Add(-1) >= 0 {
		return false, errDead
	}
	return f.Store.HoldLease(ctx, name, owner, ttl)
}

func (f *flaky) ReleaseLease(ctx context.Context, name, owner string) error {
	if f.dead.Load() {
		return errDead
	}
	return f.Store.ReleaseLease(ctx, name, owner)
}

// A renewal that fails once (a slow MySQL under load) drops the lease and
// the counts; when the lease is back, the counts are back at the next run,
// not a whole CountEvery later.
func TestCountsBackAfterOneFailedRenewal(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	reg := prometheus.NewRegistry()
	s := &flaky{Store: w.store}
	j := janitor.New(janitor.Config{InstanceID: "a", Interval: 100 * time.Millisecond, LeaseTTL: 900 * time.Millisecond, Registerer: reg}, s)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = j.Run(ctx) }()
	defer func() { cancel(); <-done }()
	waitFor(t, "clockd_clocks exported", 10*time.Second, func() bool { return series(t, reg, "clockd_clocks") == 6 })
	s.failNext.Store(1)
	waitFor(t, "the lease dropped after the failed renewal", 5*time.Second, func() bool { return series(t, reg, "clockd_clocks") == 0 })
	waitFor(t, "clockd_clocks back after the lease", 5*time.Second, func() bool { return series(t, reg, "clockd_clocks") == 6 })
}

// slowDDL is a store whose first partition change takes longer than the
// lease TTL, as one can on a busy server.
type slowDDL struct {
	janitor.Store
	delay time.Duration
	slow  *atomic.Bool // set once the slow change began
}

func (s slowDDL) AddHistoryDays(ctx context.Context, days []time.Time) error {
	if s.slow.CompareAndSwap(false, true) {
		select {
		case <-time.After(s.delay):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return s.Store.AddHistoryDays(ctx, days)
}

// dayDDL records how many days each partition change of a store carries.
type dayDDL struct {
	janitor.Store
	mu    sync.Mutex
	sizes []int
}

func (s *dayDDL) AddHistoryDays(ctx context.Context, days []time.Time) error {
	s.record(len(days))
	return s.Store.AddHistoryDays(ctx, days)
}

func (s *dayDDL) DropHistoryDays(ctx context.Context, days []time.Time) error {
	s.record(len(days))
	return s.Store.DropHistoryDays(ctx, days)
}

func (s *dayDDL) record(n int) {
	s.mu.Lock()
	s.sizes = append(s.sizes, n)
	s.mu.Unlock()
}

// A step that takes longer than the lease TTL keeps the lease: it is
// renewed while the step runs, so no second janitor takes over midway.
func TestLeaseKeptThroughSlowStep(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	cfg := func(id string, reg prometheus.Registerer) janitor.Config {
		return janitor.Config{InstanceID: id, Interval: 100 * time.Millisecond, LeaseTTL: 600 * time.Millisecond, Registerer: reg,
			Logger: testenv.Logger(t).With("instance", id)}
	}
	regA := prometheus.NewRegistry()
	a := janitor.New(cfg("a", regA), slowDDL{Store: w.store, delay: 2 * time.Second, slow: new(atomic.Bool)})
	b := janitor.New(cfg("b", nil), w.store)
	run := func(j *janitor.Janitor) (stop func()) {
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { defer close(done); _ = j.Run(ctx) }()
		return func() { cancel(); <-done }
	}
	stopA := run(a)
	defer stopA()
	waitFor(t, "a holds the lease", 5*time.Second, a.Held)
	stopB := run(b)
	defer stopB()
	// The step takes 2 s more than the partition changes themselves, which
	// on a busy CI disk took another 12 s: b must not take the lease at any
	// point before a's run ends (a minute, as in TestLeaseMovesBetweenInstances).
	for end := time.Now().Add(time.Minute); series(t, regA, "clockd_clocks") != 6; time.Sleep(20 * time.Millisecond) {
		if b.Held() {
			t.Fatal("b took the lease while a's slow partition step ran")
		}
		if time.Now().After(end) {
			t.Fatal("a exports no clockd_clocks a minute after its slow run began")
		}
	}
	if !a.Held() || b.Held() {
		t.Errorf("after the slow step: a holds %v, b holds %v", a.Held(), b.Held())
	}
}

// One janitor at a time: of two, one holds the lease and works; when it
// stops, the other takes over at once; when it dies, after the lease TTL.
func TestLeaseMovesBetweenInstances(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	cfg := func(id string, reg prometheus.Registerer) janitor.Config {
		return janitor.Config{InstanceID: id, Interval: 100 * time.Millisecond, LeaseTTL: 900 * time.Millisecond, Registerer: reg,
			Logger: testenv.Logger(t).With("instance", id)}
	}
	regA, regB := prometheus.NewRegistry(), prometheus.NewRegistry()
	a := janitor.New(cfg("a", regA), w.store)
	sb := &flaky{Store: w.store}
	b := janitor.New(cfg("b", regB), sb)
	run := func(j *janitor.Janitor) (stop func()) {
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { defer close(done); _ = j.Run(ctx) }()
		return func() { cancel(); <-done }
	}
	holder := func() string {
		h, err := w.store.LeaseHolder(context.Background(), janitor.LeaseName)
		if err != nil {
			t.Fatal(err)
		}
		return h
	}
	stopA := run(a)
	waitFor(t, "a holds the lease", 5*time.Second, a.Held)
	stopB := run(b)
	defer stopB()
	time.Sleep(500 * time.Millisecond)
	if b.Held() || holder() != "a" {
		t.Fatalf("b holds the lease while a does (row names %q)", holder())
	}
	// Only the holder exports clockd_clocks, from its first run on (which
	// creates a month of history partitions: slow on a busy disk).
	waitFor(t, "a exports clockd_clocks", time.Minute, func() bool { return series(t, regA, "clockd_clocks") == 6 })
	if n := series(t, regB, "clockd_clocks"); n != 0 {
		t.Errorf("b exports %d clockd_clocks series without the lease", n)
	}

	// a stops: it releases the lease and b takes it at its next round,
	// well before the lease would have expired.
	stopA()
	start := time.Now()
	waitFor(t, "b takes the lease after a stopped", 3*time.Second, b.Held)
	t.Logf("b took over %v after a stopped", time.Since(start).Round(time.Millisecond))
	if h := holder(); h != "b" {
		t.Errorf("lease row names %q, want b", h)
	}
	waitFor(t, "b exports clockd_clocks", 5*time.Second, func() bool { return series(t, regB, "clockd_clocks") == 6 })
	if n := series(t, regA, "clockd_clocks"); n != 0 {
		t.Errorf("a exports %d clockd_clocks series after it stopped", n)
	}

	// a comes back and waits; then b dies (it neither renews nor releases
	// its lease): a takes over once the lease has expired.
	a2 := janitor.New(cfg("a", nil), w.store)
	stopA2 := run(a2)
	defer stopA2()
	time.Sleep(400 * time.Millisecond)
	if a2.Held() {
		t.Fatal("a holds the lease while b does")
	}
	sb.dead.Store(true)
	start = time.Now()
	waitFor(t, "a takes the lease after its holder died", 5*time.Second, a2.Held)
	took := time.Since(start)
	t.Logf("a took over %v after b died (lease TTL 900ms, renewed every 300ms)", took.Round(time.Millisecond))
	if took < 400*time.Millisecond {
		t.Errorf("taken over %v after the holder died, before its lease could expire", took)
	}
	if h := holder(); h != "a" {
		t.Errorf("lease row names %q, want a", h)
	}
}

func waitFor(t *testing.T, what string, limit time.Duration, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, limit)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Counts are exact for small tables.
func TestCountClocks(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	now := time.Now()
	w.insert(t, "p-", 7, alarm.StatusPending, now)
	w.insert(t, "d-", 2, alarm.StatusDead, now)
	counts, err := w.store.CountClocks(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if counts[alarm.StatusPending] != 7 || counts[alarm.StatusDead] != 2 || counts[alarm.StatusRung] != 0 || len(counts) != 6 {
		t.Errorf("counts %v", counts)
	}
}

// failingMoves fails every move after the first `ok` ones.
type failingMoves struct {
	janitor.Store
	calls    atomic.Int64
	ok       int64
	archived atomic.Int64 // by the moves that committed
}

var errMove = errors.New("move failed")

func (f *failingMoves) MoveFinished(ctx context.Context, st alarm.Status, ids []int64, before, dropBefore time.Time, history bool) (int64, int64, error) {
	if f.calls.Add(1) > f.ok {
		return 0, 0, errMove
	}
	a, d, err := f.Store.MoveFinished(ctx, st, ids, before, dropBefore, history)
	if err == nil {
		f.archived.Add(a)
	}
	return a, d, err
}

// Several movers drain one status together: every clock is moved exactly
// once (the batches are disjoint); a mover's failure ends the run with its
// error, and what was moved before it is whole (in clock or in history,
// never both, never neither).
func TestMoversInParallel(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	now := &fakeNow{t: time.Date(2030, 1, 10, 12, 0, 0, 0, time.UTC)}
	w.insert(t, "rung-", 3000, alarm.StatusRung, now.Now().Add(-25*time.Hour))
	w.insert(t, "dead-", 500, alarm.StatusDead, now.Now().Add(-8*24*time.Hour))

	f := &failingMoves{Store: w.store, ok: 20}
	j := janitor.New(janitor.Config{InstanceID: "a", Batch: 50, Movers: 4, Now: now.Now}, f)
	err := j.RunOnce(context.Background())
	if !errors.Is(err, errMove) {
		t.Fatalf("run with a failing mover: %v, want %v", err, errMove)
	}
	inClock := w.count(t, "SELECT COUNT(*) FROM clock")
	inHistory := w.count(t, "SELECT COUNT(*) FROM clock_history")
	both := w.count(t, "SELECT COUNT(*) FROM clock c JOIN clock_history h ON h.id = c.id")
	// the moves in flight when one failed were cancelled (rolled back);
	// batches are whole, of the sizes the pace chose (at most 50; a
	// slow move halves the next, see pace.go)
	if inClock+inHistory != 3500 || both != 0 || int64(inHistory) != f.archived.Load() || inHistory > 20*50 {
		t.Errorf("after a failed run: %d in clock, %d in history, %d in both; want 3500 in all, 0 in both, the %d that committed moves archived, at most %d moved",
			inClock, inHistory, both, f.archived.Load(), 20*50)
	}

	j = janitor.New(janitor.Config{InstanceID: "a", Batch: 50, Movers: 4, Now: now.Now}, w.store)
	if err := j.RunOnce(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n := w.count(t, "SELECT COUNT(*) FROM clock"); n != 0 {
		t.Errorf("%d clocks left in clock", n)
	}
	if n := w.count(t, "SELECT COUNT(DISTINCT id) FROM clock_history"); n != 3500 {
		t.Errorf("history holds %d distinct clocks, want 3500", n)
	}
	if n := w.count(t, "SELECT COUNT(*) FROM clock_history"); n != 3500 {
		t.Errorf("history holds %d rows, want 3500 (none twice)", n)
	}
}
