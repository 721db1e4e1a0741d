package mysql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/clockd/clockd/internal/alarm"
	"github.com/clockd/clockd/internal/lograte"
)

const clockCols = `id, application, business_id, shard, status, payload, content_type, target_ring_at,
latest_ring_at, max_attempts, attempts, next_try_time, last_error, rung_at, create_time, update_time, op_token,
claim_token, ` + scheduleCols

// row is a clock as the table holds it.
type row struct {
	ID           int64          `db:"id"`
	Application  string         `db:"application"`
	BusinessID   string         `db:"business_id"`
	Shard        int            `db:"shard"`
	Status       string         `db:"status"`
	Payload      string         `db:"payload"`
	ContentType  string         `db:"content_type"`
	TargetRingAt int64          `db:"target_ring_at"`
	LatestRingAt sql.NullInt64  `db:"latest_ring_at"`
	MaxAttempts  int            `db:"max_attempts"`
	Attempts     int            `db:"attempts"`
	NextTryTime  int64          `db:"next_try_time"`
	LastError    sql.NullString `db:"last_error"`
	RungAt       sql.NullInt64  `db:"rung_at"`
	CreateTime   int64          `db:"create_time"`
	UpdateTime   int64          `db:"update_time"`
	OpToken      sql.NullInt64  `db:"op_token"`
	ClaimToken   sql.NullInt64  `db:"claim_token"`
	// ReplayedAttempts is read by the ring path and by Change only
	// (ringCols): elsewhere it stays 0.
	ReplayedAttempts int `db:"replayed_attempts"`
	scheduleRow
}

func ms(t time.Time) int64 { return t.UnixMilli() }

func fromMS(v int64) time.Time { return time.UnixMilli(v).UTC() }

func nullMS(t time.Time) sql.NullInt64 {
	if t.IsZero() {
		return sql.NullInt64{}
	}
	return sql.NullInt64{Int64: t.UnixMilli(), Valid: true}
}

func fromNullMS(v sql.NullInt64) time.Time {
	if !v.Valid {
		return time.Time{}
	}
	return fromMS(v.Int64)
}

// status is the clock's status as the API tells it: a pending clock with a
// claim is firing (see claimedBy).
func (r row) status() alarm.Status {
	if r.Status == string(alarm.StatusPending) && r.ClaimToken.Valid && r.ClaimToken.Int64 != 0 {
		return alarm.StatusFiring
	}
	return alarm.Status(r.Status)
}

func (r row) clock() alarm.Clock {
	return alarm.Clock{
		ID: r.ID, Application: r.Application, BusinessID: r.BusinessID, Shard: r.Shard,
		Status: r.status(), Payload: r.Payload, ContentType: r.ContentType,
		RingAt: fromMS(r.TargetRingAt), LatestRingAt: fromNullMS(r.LatestRingAt),
		MaxAttempts: r.MaxAttempts, Attempts: r.Attempts, NextTryAt: fromMS(r.NextTryTime),
		LastError: r.LastError.String, RungAt: fromNullMS(r.RungAt),
		CreatedAt: fromMS(r.CreateTime), UpdatedAt: fromMS(r.UpdateTime),
		Schedule: r.spec(), Paused: r.Paused != 0, Occurrences: r.Occurrences,
		ReplayedAttempts: r.ReplayedAttempts,
	}
}

// StoreConfig tunes the store.
type StoreConfig struct {
	Shards int // shard count in force (from SetupShards)
	// RingExchange, when set, is the exchange this instance rings to:
	// every heartbeat checks it is still the database's (SetupExchange),
	// and answers alarm.ErrExchangeChanged when another instance recorded
	// another since.
	RingExchange  string
	Writers       int // goroutines committing create batches; default 4
	MaxBatchRows  int // rows per INSERT; default 500
	MaxBatchBytes int // payload bytes per INSERT; default 4 MiB
	// GroupWait: the longest a small create batch waits for the commit in
	// flight before it commits beside it (see create.go); default 25 ms,
	// so that one slow commit (a lock wait) never holds single creates
	// back for longer.
	GroupWait time.Duration
	// WriteTimeout bounds a create batch that no request deadline bounds
	// sooner; default 5 s.
	WriteTimeout time.Duration
	// ResolveTimeout is how long clockd tries to find out the outcome of a
	// change whose COMMIT was sent but not answered, before it gives up
	// and says the outcome is unknown; default 30 s.
	ResolveTimeout time.Duration
	// SelectIDs makes creates read the new ids with a SELECT even when the
	// server hands out consecutive ids: the path MySQL 8 takes
	// (innodb_autoinc_lock_mode=2), forced so that it can be tested on
	// MariaDB.
	SelectIDs bool
	// IdempotencyWindow: an identical create for a key whose clock is
	// finished answers 200 with that clock when it was created less than
	// this long ago (a retry of the create that made it); otherwise it sets
	// a new clock. 0: DefaultIdempotencyWindow; negative: none (always a
	// new clock).
	IdempotencyWindow time.Duration
	// NoHistory: finished clocks leaving clock (a re-armed key's) are
	// deleted rather than moved to clock_history (history.keep 0).
	NoHistory bool
	// ClaimAhead is ring.claim_ahead: a claimed clock was due by its claim
	// time + ClaimAhead (RecoverFiring searches that far). 0: 1 minute.
	ClaimAhead time.Duration
	Logger     *slog.Logger
	Registerer prometheus.Registerer
}

// DefaultIdempotencyWindow is clock.idempotency_window's default: longer
// than any client's retries of one create (clockd answers within
// mysql.request_timeout + mysql.resolve_timeout, 35 s by default), shorter
// than the delay of most clocks, so that re-creating a clock that has rung
// sets it again.
const DefaultIdempotencyWindow = 10 * time.Minute

// Store is the MySQL implementation of alarm.Store. Concurrent creates are
// coalesced by a few writer goroutines into multi-row INSERTs (group
// commit, create.go); a create returns only after its batch is committed.
// Every change made through the API is a transaction that marks the row
// with a random op_token, so that a change whose COMMIT answer was lost can
// be recognised when the row is read again.
type Store struct {
	db  *sqlx.DB
	cfg StoreConfig
	log *slog.Logger
	// failLog holds back repeats of the group commit's warning: during an
	// outage every batch fails alike
	failLog *lograte.Limiter
	reqs    chan *createReq

	stop chan struct{}
	wg   sync.WaitGroup
	once sync.Once

	// gathering holds a token while a writer gathers requests;
	// committing counts the writers committing a batch now, and each tells
	// committed (non-blocking) when its commit ends. See create.go.
	gathering  chan struct{}
	committing atomic.Int32
	committed  chan struct{}

	batchRows prometheus.Histogram
	batchDur  prometheus.Histogram

	counts counts // CountClocks' passes

	// consecutiveIDs: the server hands a multi-row INSERT consecutive ids
	// (innodb_autoinc_lock_mode 0 or 1, auto_increment_increment 1), so the
	// ids follow from LAST_INSERT_ID() without a second round trip.
	consecutiveIDs bool

	// olderLive is the number of live instances that do not read
	// claim_token 0 as "not claimed" (earlier versions), learnt at each
	// heartbeat; -1 before the first (see unclaimedToken).
	olderLive atomic.Int64
}

// unclaimedToken is what clockd writes to claim_token for a pending clock
// that is not claimed: 0 once every live instance reads 0 as "not
// claimed" (versions since migration 00012), NULL before. A claim sets
// claim_token, claim_epoch and claim_time; when none of them is NULL (0
// takes the same room in an InnoDB record as any other value), the record
// keeps its size and InnoDB updates it in place: half the server's work of
// a claim (docs/benchmarks.md). With NULL, earlier versions running side
// by side still read the clock as pending and can claim it.
func (s *Store) unclaimedToken() string {
	if s.olderLive.Load() == 0 {
		return "0"
	}
	return "NULL"
}

// newToken returns a random, positive, non-zero token (BIGINT UNSIGNED
// columns, compared as int64).
func newToken() int64 { return rand.Int64N(1<<62) + 1 }

// ctxErr turns a context's end into the error a request answers: its
// deadline passed (503), or its client went away.
func ctxErr(err error) error {
	if errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("%w: %w", alarm.ErrUnavailable, err)
	}
	return err
}

var _ alarm.Store = (*Store)(nil)

// NewStore starts the writers. Close stops them.
func NewStore(db *sqlx.DB, cfg StoreConfig) *Store {
	if cfg.Writers <= 0 {
		cfg.Writers = 4
	}
	if cfg.MaxBatchRows <= 0 {
		cfg.MaxBatchRows = 500
	}
	if cfg.GroupWait <= 0 {
		cfg.GroupWait = 25 * time.Millisecond
	}
	if cfg.MaxBatchBytes <= 0 {
		cfg.MaxBatchBytes = 4 << 20
	}
	if cfg.WriteTimeout <= 0 {
		cfg.WriteTimeout = 5 * time.Second
	}
	if cfg.ClaimAhead <= 0 {
		cfg.ClaimAhead = time.Minute
	}
	if cfg.ResolveTimeout <= 0 {
		cfg.ResolveTimeout = 30 * time.Second
	}
	if cfg.IdempotencyWindow == 0 {
		cfg.IdempotencyWindow = DefaultIdempotencyWindow
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	s := &Store{
		db: db, cfg: cfg, log: cfg.Logger, failLog: lograte.New(10*time.Second, time.Now),
		reqs:      make(chan *createReq),
		stop:      make(chan struct{}),
		gathering: make(chan struct{}, 1), committed: make(chan struct{}, cfg.Writers),
		batchRows: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "clockd_create_batch_rows", Help: "Rows per group-committed create INSERT.",
			Buckets: []float64{1, 2, 4, 8, 16, 32, 64, 128, 256, 500},
		}),
		batchDur: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "clockd_create_batch_seconds", Help: "Time to commit one create batch.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14),
		}),
	}
	s.olderLive.Store(-1)
	if cfg.Registerer != nil {
		cfg.Registerer.MustRegister(s.batchRows, s.batchDur)
	}
	var mode, incr int
	if err := db.QueryRowx("SELECT @@innodb_autoinc_lock_mode, @@auto_increment_increment").Scan(&mode, &incr); err == nil {
		s.consecutiveIDs = mode <= 1 && incr == 1
	}
	for i := 0; i < cfg.Writers; i++ {
		s.wg.Add(1)
		go s.writer()
	}
	return s
}

// DB returns the handle the store uses.
func (s *Store) DB() *sqlx.DB { return s.db }

// Close stops the writers after the batches in progress are committed.
func (s *Store) Close() {
	s.once.Do(func() { close(s.stop) })
	s.wg.Wait()
}

// Ping checks the database answers.
func (s *Store) Ping(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if err := s.db.PingContext(ctx); err != nil {
		return fmt.Errorf("%w: mysql: %v", alarm.ErrUnavailable, err)
	}
	return nil
}

// getRow reads the row of k: cols are clockCols, or ringCols where the
// caller needs replayed_attempts.
func (s *Store) getRow(ctx context.Context, q sqlx.QueryerContext, k alarm.Key, cols string, lock bool) (row, error) {
	query := "SELECT " + cols + " FROM clock WHERE application = ? AND business_id = ?"
	if lock {
		query += " FOR UPDATE"
	}
	var r row
	if err := sqlx.GetContext(ctx, q, &r, query, k.Application, k.BusinessID); err != nil {
		if errors.Is(err, sql.ErrNoRows) {
			return row{}, fmt.Errorf("clock %s: %w", k, alarm.ErrNotFound)
		}
		return row{}, fmt.Errorf("get clock %s: %w", k, mapErr(err))
	}
	return r, nil
}

// InClock reads the clocks of app's business ids that are in clock, by
// the (application, business_id) key, up to 1,000 ids a statement.
func (s *Store) InClock(ctx context.Context, app string, businessIDs []string) ([]alarm.Clock, error) {
	var out []alarm.Clock
	for rest := businessIDs; len(rest) > 0; {
		n := min(len(rest), 1000)
		args := make([]any, 0, n+1)
		args = append(args, app)
		for _, id := range rest[:n] {
			args = append(args, id)
		}
		var rows []row
		if err := sqlx.SelectContext(ctx, s.db, &rows, "SELECT "+clockCols+" FROM clock WHERE application = ? AND business_id IN ("+
			placeholders(n)+")", args...); err != nil {
			return nil, fmt.Errorf("get %d clocks of %s: %w", n, app, mapErr(err))
		}
		for _, r := range rows {
			out = append(out, r.clock())
		}
		rest = rest[n:]
	}
	return out, nil
}

func (s *Store) get(ctx context.Context, q sqlx.QueryerContext, k alarm.Key, lock bool) (alarm.Clock, error) {
	r, err := s.getRow(ctx, q, k, clockCols, lock)
	if err != nil {
		return alarm.Clock{}, err
	}
	return r.clock(), nil
}

// Get reads one clock: from clock, else the newest of its key in
// clock_history (Archived set).
func (s *Store) Get(ctx context.Context, k alarm.Key) (alarm.Clock, error) {
	c, err := s.get(ctx, s.db, k, false)
	if errors.Is(err, alarm.ErrNotFound) {
		return s.getHistory(ctx, s.db, k)
	}
	return c, err
}

// refusal says why a change of clock c was refused, and what to do when
// it is finished: a create sets a new clock, except, within the
// idempotency window, one identical to the create that set c (answered
// with c: nothing would ring), which the advice must not leave out.
func (s *Store) refusal(verb string, k alarm.Key, c alarm.Clock) error {
	msg := fmt.Sprintf("cannot %s clock %s: it is %s", verb, k, c.Status)
	if c.Archived {
		msg += " and archived (moved to history)"
	}
	if c.Status.Finished() {
		msg += "; a create (POST /v1/clocks) for the key sets a new clock"
		if w := s.cfg.IdempotencyWindow; w > 0 && time.Now().Before(c.CreatedAt.Add(w)) {
			// a recurring clock's create has no ring time: its schedule
			// tells it apart (see alarm.NewClock.Same)
			changeable := "ring time"
			if c.Schedule != nil {
				changeable = "schedule"
			}
			msg += fmt.Sprintf(", but until %s (clock.idempotency_window) one identical to the create that set this clock "+
				"is taken for its retry and answered with this clock: change its %s or payload to set it again now",
				c.CreatedAt.Add(w).UTC().Format("2006-01-02T15:04:05.000Z"), changeable)
		}
	}
	return &alarm.ConflictError{Clock: c, Message: msg}
}

// unknownError: a COMMIT was sent and its answer lost (connection cut,
// deadline): the change may or may not be applied. sess is the MySQL
// session it was sent on (zero: not known), which resolve ends before it
// reads the outcome.
type unknownError struct {
	err  error
	sess session
}

func (e *unknownError) Error() string { return e.err.Error() }
func (e *unknownError) Unwrap() error { return e.err }

// errUnchanged ends a transaction that found nothing to change.
var errUnchanged = errors.New("nothing to change")

// inTx runs fn in a transaction and commits it, again when it was chosen as
// a deadlock or lock-wait victim. An error before the COMMIT means nothing
// was applied (the transaction is rolled back, by us or, when the
// connection is gone, by the server); an *unknownError from the COMMIT
// means the outcome is unknown.
func (s *Store) inTx(ctx context.Context, fn func(tx *sqlx.Conn) error) error {
	return retryLocked(ctx, func() error { return s.runTx(ctx, fn, false) })
}

// inBackgroundTx is inTx for the work of no request (the janitor's moves,
// recurring clocks' advances): its COMMIT, once sent, is not cut off when
// ctx is cancelled (a run stopped with one mover's failure), only after
// WriteTimeout. Cut off, its outcome would be unknown and work that was
// committed would be counted as failed.
func (s *Store) inBackgroundTx(ctx context.Context, fn func(tx *sqlx.Conn) error) error {
	return retryLocked(ctx, func() error { return s.runTx(ctx, fn, true) })
}

// runTx runs fn in one transaction: rolled back when fn fails, committed
// otherwise (see commit for a COMMIT whose answer is lost). fn gets the
// transaction's connection. BEGIN, ROLLBACK and COMMIT are statements
// under ctx, not database/sql's Tx: its Commit and Rollback take no
// context, so a server that stalled held a refused change (409) or a
// committed one for the driver's readTimeout (30 s) at the ROLLBACK
// database/sql sends to close its Tx (found by review).
func (s *Store) runTx(ctx context.Context, fn func(tx *sqlx.Conn) error, background bool) error {
	return onConn(ctx, s.db, func(c *sqlx.Conn) error {
		if _, err := c.ExecContext(ctx, "BEGIN"); err != nil {
			discard(c) // whether it began is not known
			return fmt.Errorf("begin: %w", err)
		}
		if err := fn(c); err != nil {
			if _, rerr := c.ExecContext(ctx, "ROLLBACK"); rerr != nil {
				discard(c) // closed, the server rolls it back
			}
			return err
		}
		cctx := ctx
		if background {
			var cancel context.CancelFunc
			cctx, cancel = context.WithTimeout(context.WithoutCancel(ctx), s.cfg.WriteTimeout)
			defer cancel()
		}
		return commit(cctx, c, session{})
	})
}

// onConn runs fn on a connection of its own whose MySQL thread is known.
// When fn's error is an *unknownError (a change sent, its answer lost),
// the connection is closed rather than given back to the pool and the
// error names its thread, which resolve ends: it must then be no one
// else's.
func onConn(ctx context.Context, db *sqlx.DB, fn func(c *sqlx.Conn) error) error {
	c, err := db.Connx(ctx)
	if err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	sess, err := learnSession(ctx, c)
	if err != nil {
		c.Close()
		return fmt.Errorf("begin: %w", err)
	}
	err = fn(c)
	var unknown *unknownError
	if errors.As(err, &unknown) {
		unknown.sess = sess
		discard(c)
		return err
	}
	c.Close()
	return err
}

// resolve runs read, on fresh connections, until MySQL answers it or
// ResolveTimeout passes: it finds out the outcome of a change whose COMMIT
// answer was lost. First it ends the MySQL session the change was sent on
// (endSession), when known: until then its transaction may still be open,
// with its COMMIT on the way, and no read can tell. It is not bound to the
// request's context: memory must follow the row even when the client went
// away.
func (s *Store) resolve(ctx context.Context, sess session, read func(ctx context.Context) error) error {
	return resolveOn(ctx, s.db, s.cfg.ResolveTimeout, s.log, "clock", sess, read)
}

// resolveOn is resolve on db; what names what the change was to ("clock")
// in its error.
func resolveOn(ctx context.Context, db *sqlx.DB, timeout time.Duration, log *slog.Logger, what string, sess session, read func(ctx context.Context) error) error {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), timeout)
	defer cancel()
	var err error
	ended := sess.thread == 0
	for attempt := 1; ; attempt++ {
		actx, acancel := context.WithTimeout(rctx, 2*time.Second)
		if !ended {
			err = endSession(actx, db, sess)
			ended = err == nil
		}
		if ended {
			err = read(actx)
		}
		acancel()
		if err == nil || errors.Is(err, alarm.ErrNotFound) {
			return err
		}
		d := min(time.Duration(attempt)*100*time.Millisecond, time.Second)
		select {
		case <-rctx.Done():
			log.Error("outcome of a change unknown: MySQL did not answer", "waited", timeout.String(), "err", err)
			return fmt.Errorf("%w: the change was sent but MySQL did not confirm it and did not answer for %s: its outcome is unknown; read the %s, then retry: %v",
				alarm.ErrUnavailable, timeout, what, err)
		case <-time.After(d):
		}
	}
}

// change applies one API change to the clock k inside a transaction marked
// with a fresh op_token: update runs the change and reports whether it
// changed the row (false: refused for the clock's state, in which case the
// clock is read for the answer). When the COMMIT's answer is lost the row is
// read again: the token tells whether this change was applied; if it was
// not, it runs again.
func (s *Store) change(ctx context.Context, k alarm.Key, verb string, update func(tx *sqlx.Conn, token int64) (bool, error)) (alarm.Clock, error) {
	for attempt := 1; ; attempt++ {
		token := newToken()
		var c alarm.Clock
		var refused error
		err := s.inTx(ctx, func(tx *sqlx.Conn) error {
			// not in clock: moved to history, finished, so refused
			archived := func(err error) error {
				if !errors.Is(err, alarm.ErrNotFound) {
					return err
				}
				h, herr := s.getHistory(ctx, tx, k)
				if herr != nil {
					return herr
				}
				c, refused = h, s.refusal(verb, k, h)
				return errUnchanged
			}
			changed, err := update(tx, token)
			if err != nil {
				return archived(err)
			}
			c, err = s.get(ctx, tx, k, false)
			if err != nil {
				return archived(err)
			}
			if !changed {
				refused = s.refusal(verb, k, c)
				return errUnchanged
			}
			return nil
		})
		switch {
		case err == nil:
			return c, nil
		case errors.Is(err, errUnchanged):
			return c, refused
		}
		var unknown *unknownError
		if !errors.As(err, &unknown) {
			if connectionLost(err) && attempt < 3 && ctx.Err() == nil {
				continue // before the COMMIT: rolled back, so run it again
			}
			if errors.Is(err, alarm.ErrNotFound) { // said once: not "cancel clock a/b: clock a/b: not found"
				return alarm.Clock{}, fmt.Errorf("%s clock %s: %w", verb, k, alarm.ErrNotFound)
			}
			return alarm.Clock{}, fmt.Errorf("%s clock %s: %w", verb, k, mapErr(err))
		}
		var r row
		rerr := s.resolve(ctx, unknown.sess, func(ctx context.Context) (err error) {
			r, err = s.getRow(ctx, s.db, k, clockCols, false)
			return err
		})
		if rerr != nil && !errors.Is(rerr, alarm.ErrNotFound) {
			return alarm.Clock{}, &alarm.UnknownOutcomeError{Shard: alarm.ShardOf(k.Application, k.BusinessID, s.cfg.Shards),
				Err: fmt.Errorf("%s clock %s: %w", verb, k, rerr)}
		}
		if rerr == nil && r.OpToken.Valid && r.OpToken.Int64 == token {
			return r.clock(), nil // applied: its answer was lost, not the change
		}
		if attempt == 3 || ctx.Err() != nil {
			return alarm.Clock{}, fmt.Errorf("%w: %s clock %s: not applied: %v", alarm.ErrUnavailable, verb, k, err)
		}
		// not applied: MySQL answers again, so run it again
	}
}

// transition changes a clock with a conditional UPDATE (only from the given
// statuses) and reads it back, in one transaction.
//
// update_time only moves on (GREATEST(now, update_time + 1), here and in
// Change): the API's clock may be a few ms behind the instance that
// recorded an occurrence, and a recurring clock's row must finish after
// its occurrences' rows in clock_history (they are keyed by id and finish
// time).
func (s *Store) transition(ctx context.Context, k alarm.Key, verb, set string, setArgs []any, now time.Time, from ...alarm.Status) (alarm.Clock, error) {
	// a claimed clock (firing) has status 'pending' and a claim_token, not 0
	q := "UPDATE clock SET " + set + ", op_token = ?, update_time = GREATEST(?, update_time + 1) WHERE application = ? AND business_id = ? AND status IN (" +
		placeholders(len(from)) + ") AND " + notClaimed
	return s.change(ctx, k, verb, func(tx *sqlx.Conn, token int64) (bool, error) {
		args := append(append([]any{}, setArgs...), token, ms(now), k.Application, k.BusinessID)
		for _, st := range from {
			args = append(args, string(st))
		}
		res, err := tx.ExecContext(ctx, q, args...)
		if err != nil {
			return false, fmt.Errorf("%s clock %s: %w", verb, k, err)
		}
		n, err := res.RowsAffected()
		if err != nil {
			return false, fmt.Errorf("%s clock %s: %w", verb, k, err)
		}
		return n > 0, nil
	})
}

// Cancel moves a pending clock to cancelled. Claims change rows only while
// pending too, so exactly one of a cancel and a claim wins.
func (s *Store) Cancel(ctx context.Context, k alarm.Key, now time.Time) (alarm.Clock, error) {
	return s.transition(ctx, k, "cancel", "status = 'cancelled'", nil, now, alarm.StatusPending)
}

// Replay puts an expired or dead clock back to pending, due now, with a
// fresh attempt count and no latest_ring_at that is already past. The
// attempts made so far move to replayed_attempts (assigned first: it reads
// attempts before it is reset, whether or not the server assigns
// simultaneously), so that its next ring does not say attempt 1 again.
//
// A recurring clock's replayed occurrence keeps its time (and message_id);
// its occurrence_deadline counts from the replay: latest_ring_at holds it
// (now + the deadline) until the clock moves on (see alarm.Clock.RingBy).
// Counted from the occurrence's time, it had passed: the replay answered
// 200 and the clock expired again without a ring.
func (s *Store) Replay(ctx context.Context, k alarm.Key, now time.Time) (alarm.Clock, error) {
	n := ms(now)
	return s.transition(ctx, k, "replay",
		`replayed_attempts = replayed_attempts + attempts, status = 'pending', next_try_time = ?, attempts = 0,
		 claim_token = `+s.unclaimedToken()+`, claim_epoch = 0, claim_time = 0,
		 latest_ring_at = IF(`+recurringSQL+`, ? + occurrence_deadline_ms, IF(latest_ring_at <= ?, NULL, latest_ring_at))`,
		[]any{n, n, n}, now, alarm.StatusExpired, alarm.StatusDead)
}

// Reschedule changes a pending clock inside a transaction.
func (s *Store) Reschedule(ctx context.Context, k alarm.Key, now time.Time, apply func(alarm.Clock) (alarm.Clock, error)) (alarm.Clock, error) {
	return s.Change(ctx, k, "reschedule", now, apply)
}

// Change changes a pending clock inside a transaction: apply turns the
// current clock into the new one (or refuses it); verb names the change.
// It writes what a reschedule, a pause or a resume may change.
func (s *Store) Change(ctx context.Context, k alarm.Key, verb string, now time.Time, apply func(alarm.Clock) (alarm.Clock, error)) (alarm.Clock, error) {
	var invalid error
	c, err := s.change(ctx, k, verb, func(tx *sqlx.Conn, token int64) (bool, error) {
		// with replayed_attempts: apply keeps them where the occurrence
		// stays (a payload PATCH of a replayed one), so that its next ring
		// counts on from them, and sets 0 where it moves on
		r, err := s.getRow(ctx, tx, k, ringCols, true)
		if err != nil {
			return false, err
		}
		cur := r.clock()
		if cur.Status != alarm.StatusPending {
			return false, nil
		}
		c, err := apply(cur)
		if err != nil {
			invalid = err
			return false, errUnchanged
		}
		sr := scheduleRowOf(c)
		_, err = tx.ExecContext(ctx, `UPDATE clock SET payload = ?, target_ring_at = ?, latest_ring_at = ?, max_attempts = ?,
			next_try_time = ?, attempts = ?, replayed_attempts = ?,
			`+scheduleSet+`, op_token = ?, update_time = GREATEST(?, update_time + 1) WHERE id = ? AND `+unclaimed,
			append(append([]any{c.Payload, ms(c.RingAt), nullMS(c.LatestRingAt), c.MaxAttempts, ms(c.NextTryAt), c.Attempts, c.ReplayedAttempts},
				sr.args()...), token, ms(now), c.ID)...)
		if err != nil {
			return false, fmt.Errorf("%s clock %s: %w", verb, k, err)
		}
		return true, nil
	})
	if invalid != nil {
		return alarm.Clock{}, invalid
	}
	return c, err
}

// List returns clocks newest first, below q.BeforeID when set.
func (s *Store) List(ctx context.Context, q alarm.ListQuery) ([]alarm.Clock, error) {
	apps, err := s.listApps(ctx, q)
	if err != nil {
		return nil, err
	}
	query, args := listSQL(q, clockCols, apps, s.statusWhere(time.Now()))
	var rows []row
	if err := s.db.SelectContext(ctx, &rows, query, args...); err != nil {
		return nil, fmt.Errorf("list clocks: %w", mapErr(err))
	}
	out := make([]alarm.Clock, len(rows))
	for i, r := range rows {
		out[i] = r.clock()
	}
	return out, nil
}

// maxUnionApps: up to this many applications, a list by status alone is
// one index range per application, merged.
const maxUnionApps = 256

// listApps returns, for a list by status alone, the applications to merge
// (nil otherwise, or when there are too many of them to merge).
func (s *Store) listApps(ctx context.Context, q alarm.ListQuery) ([]string, error) {
	if q.Status == "" || q.Application != "" {
		return nil, nil
	}
	apps, err := s.Applications(ctx, maxUnionApps+1)
	if err != nil || len(apps) > maxUnionApps {
		return nil, err
	}
	if len(apps) == 0 {
		apps = []string{""} // no clocks at all: one empty range
	}
	return apps, nil
}

// statusWhere returns the condition "the clock's status is st" (as the API
// tells it, see row.status) and its arguments.
func (s *Store) statusWhere(now time.Time) func(alarm.Status) (string, []any) {
	return func(st alarm.Status) (string, []any) {
		switch st {
		case alarm.StatusPending:
			return unclaimed, nil
		case alarm.StatusFiring:
			// a claimed clock was due by its claim + ring.claim_ahead: the
			// shard index finds the few due ones instead of every pending
			// clock (those of an application, in the list's id order)
			shards, args := s.everyShard()
			return shards + " AND " + mayBeFiring + " AND " + firingRow, append(args, ms(now.Add(s.cfg.ClaimAhead)))
		}
		return "status = ?", []any{string(st)}
	}
}

// listSQL is the list query, newest first, each case an index range read
// backwards: by application and status, idx_clock_application_status_id;
// by application alone, one range of it per status, merged; by status
// alone, one range per application (apps, when there are not too many of
// them), merged, else idx_clock_status_update or the primary key as the
// optimizer sees fit; neither, the primary key.
func listSQL(q alarm.ListQuery, cols string, apps []string, statusWhere func(alarm.Status) (string, []any)) (string, []any) {
	limit := strconv.Itoa(q.Limit)
	// union merges the newest ids of each (application, status) range.
	// Every status of an application: the status column's own values (a
	// pending clock is pending or firing); else the condition of q.Status.
	union := func(pairs [][2]string) (string, []any) {
		var b strings.Builder
		var args []any
		b.WriteString("SELECT " + cols + " FROM (SELECT id FROM (")
		for i, p := range pairs {
			if i > 0 {
				b.WriteString(" UNION ALL ")
			}
			stCond, stArgs := "status = ?", []any{p[1]}
			if q.Status != "" {
				stCond, stArgs = statusWhere(q.Status)
			}
			args = append(append(args, p[0]), stArgs...)
			cond := recurringCond(q.Recurring)
			if q.BeforeID > 0 {
				cond += " AND id < ?"
				args = append(args, q.BeforeID)
			}
			b.WriteString("(SELECT id FROM clock WHERE application = ? AND " + stCond + cond + " ORDER BY id DESC LIMIT " + limit + ")")
		}
		b.WriteString(") u ORDER BY id DESC LIMIT " + limit + ") t JOIN clock USING (id) ORDER BY id DESC")
		return b.String(), args
	}
	if q.Application != "" && q.Status == "" {
		var pairs [][2]string
		for _, st := range []alarm.Status{alarm.StatusPending, alarm.StatusFiring, alarm.StatusRung, alarm.StatusCancelled, alarm.StatusExpired, alarm.StatusDead} {
			pairs = append(pairs, [2]string{q.Application, string(st)})
		}
		return union(pairs)
	}
	if q.Application == "" && q.Status != "" && len(apps) > 0 {
		pairs := make([][2]string, len(apps))
		for i, a := range apps {
			pairs[i] = [2]string{a, string(q.Status)}
		}
		return union(pairs)
	}
	var where []string
	var args []any
	if q.Application != "" {
		where = append(where, "application = ?")
		args = append(args, q.Application)
	}
	if q.Status != "" {
		c, a := statusWhere(q.Status)
		where = append(where, c)
		args = append(args, a...)
	}
	if q.BeforeID > 0 {
		where = append(where, "id < ?")
		args = append(args, q.BeforeID)
	}
	if c := recurringCond(q.Recurring); c != "" {
		where = append(where, strings.TrimPrefix(c, " AND "))
	}
	query := "SELECT " + cols + " FROM clock"
	if len(where) > 0 {
		query += " WHERE " + strings.Join(where, " AND ")
	}
	return query + " ORDER BY id DESC LIMIT " + limit, args
}

// DBTime reads MySQL's clock, to the microsecond.
func (s *Store) DBTime(ctx context.Context) (time.Time, error) {
	var us int64
	if err := s.db.QueryRowContext(ctx, "SELECT CAST(UNIX_TIMESTAMP(NOW(6)) * 1000000 AS SIGNED)").Scan(&us); err != nil {
		return time.Time{}, fmt.Errorf("read the database clock: %w", mapErr(err))
	}
	return time.UnixMicro(us), nil
}
