package mysql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/clockd/clockd/internal/alarm"
)

const clockCols = `id, application, business_id, shard, status, payload, content_type, target_ring_at,
latest_ring_at, max_attempts, attempts, next_try_time, last_error, rung_at, create_time, update_time`

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

func (r row) clock() alarm.Clock {
	return alarm.Clock{
		ID: r.ID, Application: r.Application, BusinessID: r.BusinessID, Shard: r.Shard,
		Status: alarm.Status(r.Status), Payload: r.Payload, ContentType: r.ContentType,
		RingAt: fromMS(r.TargetRingAt), LatestRingAt: fromNullMS(r.LatestRingAt),
		MaxAttempts: r.MaxAttempts, Attempts: r.Attempts, NextTryAt: fromMS(r.NextTryTime),
		LastError: r.LastError.String, RungAt: fromNullMS(r.RungAt),
		CreatedAt: fromMS(r.CreateTime), UpdatedAt: fromMS(r.UpdateTime),
	}
}

// StoreConfig tunes the store.
type StoreConfig struct {
	Shards        int // shard count in force (from SetupShards)
	Writers       int // goroutines committing create batches; default 4
	MaxBatchRows  int // rows per INSERT; default 500
	MaxBatchBytes int // payload bytes per INSERT; default 4 MiB
	Logger        *slog.Logger
	Registerer    prometheus.Registerer
}

// Store is the MySQL implementation of alarm.Store. Concurrent creates are
// coalesced by a few writer goroutines into multi-row INSERTs (group
// commit); a create returns only after its batch is committed.
type Store struct {
	db   *sqlx.DB
	cfg  StoreConfig
	log  *slog.Logger
	reqs chan *createReq

	stop chan struct{}
	wg   sync.WaitGroup
	once sync.Once

	batchRows prometheus.Histogram
	batchDur  prometheus.Histogram

	// consecutiveIDs: the server hands a multi-row INSERT consecutive ids
	// (innodb_autoinc_lock_mode 0 or 1, auto_increment_increment 1), so the
	// ids follow from LAST_INSERT_ID() without a second round trip.
	consecutiveIDs bool
}

type createReq struct {
	ctx    context.Context
	clocks []alarm.NewClock
	now    time.Time
	res    []alarm.CreateResult
	taken  int // clocks handed to batches so far (writer-owned)
	done   chan struct{}
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
	if cfg.MaxBatchBytes <= 0 {
		cfg.MaxBatchBytes = 4 << 20
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	s := &Store{
		db: db, cfg: cfg, log: cfg.Logger,
		reqs: make(chan *createReq),
		stop: make(chan struct{}),
		batchRows: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "clockd_create_batch_rows", Help: "Rows per group-committed create INSERT.",
			Buckets: []float64{1, 2, 4, 8, 16, 32, 64, 128, 256, 500},
		}),
		batchDur: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "clockd_create_batch_seconds", Help: "Time to commit one create batch.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14),
		}),
	}
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

// Create hands the clocks to the writers and waits for the commit.
func (s *Store) Create(ctx context.Context, clocks []alarm.NewClock, now time.Time) []alarm.CreateResult {
	r := &createReq{ctx: ctx, clocks: clocks, now: now, res: make([]alarm.CreateResult, len(clocks)), done: make(chan struct{})}
	fail := func(err error) []alarm.CreateResult {
		for i := range r.res {
			r.res[i].Err = err
		}
		return r.res
	}
	select {
	case s.reqs <- r:
	case <-ctx.Done():
		return fail(ctx.Err())
	case <-s.stop:
		return fail(fmt.Errorf("%w: store is shutting down", alarm.ErrUnavailable))
	}
	<-r.done // the batch is committed or failed; never abandon it halfway
	return r.res
}

// item is one clock of a batch with its place in its request.
type item struct {
	req *createReq
	i   int
}

func (it item) clock() *alarm.NewClock { return &it.req.clocks[it.i] }

func (s *Store) writer() {
	defer s.wg.Done()
	var pending []*createReq // requests not yet fully written, oldest first
	for {
		if len(pending) == 0 {
			select {
			case r := <-s.reqs:
				pending = append(pending, r)
			case <-s.stop:
				return
			}
		}
		// Take what else is waiting right now, up to one batch worth.
		waiting := 0
		for _, r := range pending {
			waiting += len(r.clocks) - r.taken
		}
	gather:
		for waiting < s.cfg.MaxBatchRows {
			select {
			case r := <-s.reqs:
				pending = append(pending, r)
				waiting += len(r.clocks)
			default:
				break gather
			}
		}
		// Cut one batch; a large request may span several.
		var batch []item
		var finished []*createReq
		bytes := 0
		for len(pending) > 0 && len(batch) < s.cfg.MaxBatchRows && bytes < s.cfg.MaxBatchBytes {
			r := pending[0]
			for r.taken < len(r.clocks) && len(batch) < s.cfg.MaxBatchRows && bytes < s.cfg.MaxBatchBytes {
				batch = append(batch, item{r, r.taken})
				bytes += len(r.clocks[r.taken].Payload) + 256
				r.taken++
			}
			if r.taken == len(r.clocks) {
				finished = append(finished, r)
				pending = pending[1:]
			}
		}
		s.commitBatch(batch)
		for _, r := range finished {
			close(r.done)
		}
	}
}

func (s *Store) commitBatch(batch []item) {
	if len(batch) == 0 {
		return
	}
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var err error
	for attempt := 0; attempt < 8; attempt++ {
		if attempt == 0 {
			err = s.insertFast(ctx, batch)
			if err == nil {
				break
			}
			if !isDuplicate(err) {
				continue
			}
		}
		err = s.insertChecked(ctx, batch)
		if err == nil || !isRetryable(err) {
			break
		}
		time.Sleep(time.Duration(attempt+1) * 5 * time.Millisecond)
	}
	if err != nil {
		s.log.Error("create batch failed", "rows", len(batch), "err", err)
		err = mapErr(err)
		for _, it := range batch {
			it.req.res[it.i] = alarm.CreateResult{Err: fmt.Errorf("create: %w", err)}
		}
	}
	s.batchRows.Observe(float64(len(batch)))
	s.batchDur.Observe(time.Since(start).Seconds())
}

const insertCols = `(application, business_id, shard, status, payload, content_type, target_ring_at,
latest_ring_at, max_attempts, attempts, next_try_time, create_time, update_time) VALUES `

func (s *Store) insertSQL(batch []item) (string, []any) {
	var b strings.Builder
	b.WriteString("INSERT INTO clock ")
	b.WriteString(insertCols)
	args := make([]any, 0, len(batch)*13)
	for j, it := range batch {
		if j > 0 {
			b.WriteByte(',')
		}
		b.WriteString("(?,?,?,'pending',?,?,?,?,?,0,?,?,?)")
		c := it.clock()
		now := ms(it.req.now)
		args = append(args, c.Application, c.BusinessID, alarm.ShardOf(c.Application, c.BusinessID, s.cfg.Shards),
			c.Payload, c.ContentType, ms(c.RingAt), nullMS(c.LatestRingAt), c.MaxAttempts,
			ms(alarm.DueAt(c.RingAt, it.req.now)), now, now)
	}
	return b.String(), args
}

func keyList(b *strings.Builder, args []any, keys []alarm.Key) []any {
	b.WriteString("(application, business_id) IN (")
	for j, k := range keys {
		if j > 0 {
			b.WriteByte(',')
		}
		b.WriteString("(?,?)")
		args = append(args, k.Application, k.BusinessID)
	}
	b.WriteByte(')')
	return args
}

// insertFast is the common case: no key exists yet. One autocommit INSERT,
// then one SELECT for the ids. A duplicate key fails the whole statement
// and sends the batch to insertChecked.
func (s *Store) insertFast(ctx context.Context, batch []item) error {
	q, args := s.insertSQL(batch)
	res, err := s.db.ExecContext(ctx, q, args...)
	if err != nil {
		return fmt.Errorf("insert clocks: %w", err)
	}
	if s.consecutiveIDs {
		first, err := res.LastInsertId()
		if n, nerr := res.RowsAffected(); err == nil && nerr == nil && n == int64(len(batch)) {
			for j, it := range batch {
				it.req.res[it.i] = alarm.CreateResult{Clock: newClock(first+int64(j), *it.clock(), it.req.now, s.cfg.Shards), Created: true}
			}
			return nil
		}
	}
	keys := make([]alarm.Key, len(batch))
	for j, it := range batch {
		c := it.clock()
		keys[j] = alarm.Key{Application: c.Application, BusinessID: c.BusinessID}
	}
	ids, err := s.idsOf(ctx, s.db, keys)
	if err != nil {
		return err
	}
	for _, it := range batch {
		c := it.clock()
		id, ok := ids[alarm.Key{Application: c.Application, BusinessID: c.BusinessID}]
		if !ok {
			return fmt.Errorf("inserted clock %s/%s not found", c.Application, c.BusinessID)
		}
		it.req.res[it.i] = alarm.CreateResult{Clock: newClock(id, *c, it.req.now, s.cfg.Shards), Created: true}
	}
	return nil
}

func newClock(id int64, c alarm.NewClock, now time.Time, shards int) alarm.Clock {
	now = fromMS(ms(now))
	return alarm.Clock{
		ID: id, Application: c.Application, BusinessID: c.BusinessID,
		Shard:   alarm.ShardOf(c.Application, c.BusinessID, shards),
		Payload: c.Payload, ContentType: c.ContentType, RingAt: c.RingAt, LatestRingAt: c.LatestRingAt,
		MaxAttempts: c.MaxAttempts, Status: alarm.StatusPending, NextTryAt: alarm.DueAt(c.RingAt, now),
		CreatedAt: now, UpdatedAt: now,
	}
}

func (s *Store) idsOf(ctx context.Context, q sqlx.QueryerContext, keys []alarm.Key) (map[alarm.Key]int64, error) {
	var b strings.Builder
	b.WriteString("SELECT id, application, business_id FROM clock WHERE ")
	args := keyList(&b, make([]any, 0, 2*len(keys)), keys)
	var rs []struct {
		ID          int64  `db:"id"`
		Application string `db:"application"`
		BusinessID  string `db:"business_id"`
	}
	if err := sqlx.SelectContext(ctx, q, &rs, b.String(), args...); err != nil {
		return nil, fmt.Errorf("read new clock ids: %w", err)
	}
	out := make(map[alarm.Key]int64, len(rs))
	for _, r := range rs {
		out[alarm.Key{Application: r.Application, BusinessID: r.BusinessID}] = r.ID
	}
	return out, nil
}

// insertChecked handles batches with existing keys: in one transaction it
// locks the existing rows, answers them (identical -> 200, different ->
// 409), and inserts the rest.
func (s *Store) insertChecked(ctx context.Context, batch []item) (err error) {
	tx, err := s.db.BeginTxx(ctx, nil)
	if err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	defer func() {
		if err != nil {
			_ = tx.Rollback()
		}
	}()
	seen := make(map[alarm.Key]bool, len(batch))
	keys := make([]alarm.Key, 0, len(batch))
	for _, it := range batch {
		c := it.clock()
		k := alarm.Key{Application: c.Application, BusinessID: c.BusinessID}
		if !seen[k] {
			seen[k] = true
			keys = append(keys, k)
		}
	}
	var b strings.Builder
	b.WriteString("SELECT " + clockCols + " FROM clock WHERE ")
	args := keyList(&b, nil, keys)
	b.WriteString(" FOR UPDATE")
	var rows []row
	if err := tx.SelectContext(ctx, &rows, b.String(), args...); err != nil {
		return fmt.Errorf("lock existing clocks: %w", err)
	}
	existing := make(map[alarm.Key]alarm.Clock, len(rows))
	for _, r := range rows {
		existing[alarm.Key{Application: r.Application, BusinessID: r.BusinessID}] = r.clock()
	}
	// first new item per key inserts; later items of the same key compare to it
	firstNew := make(map[alarm.Key]item)
	var inserts []item
	type later struct {
		it    item
		first item
	}
	var laters []later
	results := make(map[item]alarm.CreateResult, len(batch))
	for _, it := range batch {
		c := it.clock()
		k := alarm.Key{Application: c.Application, BusinessID: c.BusinessID}
		if ex, ok := existing[k]; ok {
			results[it] = answerExisting(*c, ex)
			continue
		}
		if f, ok := firstNew[k]; ok {
			laters = append(laters, later{it, f})
			continue
		}
		firstNew[k] = it
		inserts = append(inserts, it)
	}
	if len(inserts) > 0 {
		q, iargs := s.insertSQL(inserts)
		if _, err := tx.ExecContext(ctx, q, iargs...); err != nil {
			return fmt.Errorf("insert clocks: %w", err)
		}
		ikeys := make([]alarm.Key, len(inserts))
		for j, it := range inserts {
			c := it.clock()
			ikeys[j] = alarm.Key{Application: c.Application, BusinessID: c.BusinessID}
		}
		ids, err := s.idsOf(ctx, tx, ikeys)
		if err != nil {
			return err
		}
		for j, it := range inserts {
			id, ok := ids[ikeys[j]]
			if !ok {
				return fmt.Errorf("inserted clock %s not found", ikeys[j])
			}
			results[it] = alarm.CreateResult{Clock: newClock(id, *it.clock(), it.req.now, s.cfg.Shards), Created: true}
		}
		for _, l := range laters {
			first := results[l.first].Clock
			results[l.it] = answerExisting(*l.it.clock(), first)
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	for it, r := range results {
		it.req.res[it.i] = r
	}
	return nil
}

func answerExisting(n alarm.NewClock, ex alarm.Clock) alarm.CreateResult {
	if n.Same(ex) {
		return alarm.CreateResult{Clock: ex}
	}
	return alarm.CreateResult{Clock: ex, Err: &alarm.ConflictError{Clock: ex,
		Message: fmt.Sprintf("clock %s/%s exists with different content (status %s); use PATCH to change it",
			ex.Application, ex.BusinessID, ex.Status)}}
}

func (s *Store) get(ctx context.Context, q sqlx.QueryerContext, k alarm.Key, lock bool) (alarm.Clock, error) {
	query := "SELECT " + clockCols + " FROM clock WHERE application = ? AND business_id = ?"
	if lock {
		query += " FOR UPDATE"
	}
	var r row
	if err := sqlx.GetContext(ctx, q, &r, query, k.Application, k.BusinessID); err != nil {
		if errors.Is(err, sql.ErrNoRows) {
			return alarm.Clock{}, fmt.Errorf("clock %s: %w", k, alarm.ErrNotFound)
		}
		return alarm.Clock{}, fmt.Errorf("get clock %s: %w", k, mapErr(err))
	}
	return r.clock(), nil
}

// Get reads one clock.
func (s *Store) Get(ctx context.Context, k alarm.Key) (alarm.Clock, error) {
	return s.get(ctx, s.db, k, false)
}

// transition changes a clock with a single conditional UPDATE and reads it
// back; when no row changed it tells not-found from wrong-state.
func (s *Store) transition(ctx context.Context, k alarm.Key, verb, set string, setArgs []any, from ...alarm.Status) (alarm.Clock, error) {
	q := "UPDATE clock SET " + set + " WHERE application = ? AND business_id = ? AND status IN (" +
		strings.TrimSuffix(strings.Repeat("?,", len(from)), ",") + ")"
	args := append(append([]any{}, setArgs...), k.Application, k.BusinessID)
	for _, st := range from {
		args = append(args, string(st))
	}
	res, err := s.db.ExecContext(ctx, q, args...)
	if err != nil {
		return alarm.Clock{}, fmt.Errorf("%s clock %s: %w", verb, k, mapErr(err))
	}
	n, err := res.RowsAffected()
	if err != nil {
		return alarm.Clock{}, fmt.Errorf("%s clock %s: %w", verb, k, mapErr(err))
	}
	c, err := s.get(ctx, s.db, k, false)
	if err != nil {
		return alarm.Clock{}, err
	}
	if n == 0 {
		return c, &alarm.ConflictError{Clock: c, Message: fmt.Sprintf("cannot %s clock %s: it is %s", verb, k, c.Status)}
	}
	return c, nil
}

// Cancel moves a pending clock to cancelled. Claims change rows only while
// pending too, so exactly one of a cancel and a claim wins.
func (s *Store) Cancel(ctx context.Context, k alarm.Key, now time.Time) (alarm.Clock, error) {
	return s.transition(ctx, k, "cancel", "status = 'cancelled', update_time = ?", []any{ms(now)}, alarm.StatusPending)
}

// Replay puts an expired or dead clock back to pending, due now, with a
// fresh attempt count and no latest_ring_at that is already past.
func (s *Store) Replay(ctx context.Context, k alarm.Key, now time.Time) (alarm.Clock, error) {
	n := ms(now)
	return s.transition(ctx, k, "replay",
		`status = 'pending', next_try_time = ?, attempts = 0, claim_token = NULL, claim_epoch = NULL,
		 latest_ring_at = IF(latest_ring_at <= ?, NULL, latest_ring_at), update_time = ?`,
		[]any{n, n, n}, alarm.StatusExpired, alarm.StatusDead)
}

// Reschedule changes a pending clock inside a transaction.
func (s *Store) Reschedule(ctx context.Context, k alarm.Key, now time.Time, apply func(alarm.Clock) (alarm.Clock, error)) (c alarm.Clock, err error) {
	tx, err := s.db.BeginTxx(ctx, nil)
	if err != nil {
		return alarm.Clock{}, fmt.Errorf("reschedule clock %s: %w", k, mapErr(err))
	}
	defer func() {
		if err != nil {
			_ = tx.Rollback()
		}
	}()
	cur, err := s.get(ctx, tx, k, true)
	if err != nil {
		return alarm.Clock{}, err
	}
	if cur.Status != alarm.StatusPending {
		return cur, &alarm.ConflictError{Clock: cur, Message: fmt.Sprintf("cannot reschedule clock %s: it is %s", k, cur.Status)}
	}
	c, err = apply(cur)
	if err != nil {
		return alarm.Clock{}, err
	}
	c.UpdatedAt = fromMS(ms(now))
	_, err = tx.ExecContext(ctx, `UPDATE clock SET payload = ?, target_ring_at = ?, latest_ring_at = ?, max_attempts = ?,
		next_try_time = ?, update_time = ? WHERE id = ? AND status = 'pending'`,
		c.Payload, ms(c.RingAt), nullMS(c.LatestRingAt), c.MaxAttempts, ms(c.NextTryAt), ms(now), c.ID)
	if err != nil {
		return alarm.Clock{}, fmt.Errorf("reschedule clock %s: %w", k, mapErr(err))
	}
	if err := tx.Commit(); err != nil {
		return alarm.Clock{}, fmt.Errorf("reschedule clock %s: commit: %w", k, mapErr(err))
	}
	return c, nil
}

// List returns clocks newest first, below q.BeforeID when set.
func (s *Store) List(ctx context.Context, q alarm.ListQuery) ([]alarm.Clock, error) {
	var where []string
	var args []any
	if q.Application != "" {
		where = append(where, "application = ?")
		args = append(args, q.Application)
	}
	if q.Status != "" {
		where = append(where, "status = ?")
		args = append(args, string(q.Status))
	}
	if q.BeforeID > 0 {
		where = append(where, "id < ?")
		args = append(args, q.BeforeID)
	}
	query := "SELECT " + clockCols + " FROM clock"
	if len(where) > 0 {
		query += " WHERE " + strings.Join(where, " AND ")
	}
	query += " ORDER BY id DESC LIMIT " + strconv.Itoa(q.Limit)
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
