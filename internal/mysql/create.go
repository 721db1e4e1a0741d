package mysql

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/jmoiron/sqlx"

	"github.com/clockd/clockd/internal/alarm"
)

// The group-commit writer: concurrent creates are coalesced by a few writer
// goroutines into one multi-row INSERT per transaction.
//
// One writer at a time gathers requests (it holds the turn, gathering),
// and a small batch (under a quarter of MaxBatchRows) is not committed
// while another writer is committing: it keeps gathering until that commit
// ends, or for GroupWait at most (a commit stuck in a lock wait must not
// hold every single create back). Single creates from many clients then
// go in few large INSERTs, one after another, instead of many small ones
// side by side, which cost MySQL and clockd more CPU per clock (measured
// on 2 cores: 4 writers each gathering for itself took 39 ms of MySQL CPU
// per 1,000 single creates, one writer 23); large batches still commit
// side by side, which batch creates need (one writer took 10-34 % fewer
// of them).

type createReq struct {
	ctx    context.Context
	clocks []alarm.NewClock
	now    time.Time
	res    []alarm.CreateResult
	taken  int // clocks handed to batches so far (writer-owned)
	done   chan struct{}
}

// item is one clock of a batch with its place in its request.
type item struct {
	req *createReq
	i   int
}

func (it item) clock() *alarm.NewClock { return &it.req.clocks[it.i] }

func (it item) key() alarm.Key {
	c := it.clock()
	return alarm.Key{Application: c.Application, BusinessID: c.BusinessID}
}

// Create hands the clocks to the writers and waits for the commit. A
// request whose context ends before a writer took it changes nothing; once
// taken, it waits for its batch's outcome, which is bounded by the batch's
// deadline (the earliest of its requests') and, when the answer to its
// COMMIT is lost, by the time to find the outcome out.
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
		return fail(fmt.Errorf("create: waiting for a writer: %w", ctxErr(ctx.Err())))
	case <-s.stop:
		return fail(fmt.Errorf("%w: store is shutting down", alarm.ErrUnavailable))
	}
	<-r.done // the batch is committed or failed; never abandon it halfway
	return r.res
}

func (s *Store) writer() {
	defer s.wg.Done()
	wc := &writerConn{s: s}
	defer wc.drop()
	var pending []*createReq // requests not yet fully written, oldest first
	for {
		// A writer with nothing left to write takes the turn to gather
		// (one writer at a time), then waits for a request.
		if len(pending) == 0 {
			select {
			case s.gathering <- struct{}{}:
			case <-s.stop:
				return
			}
			select {
			case r := <-s.reqs:
				pending = append(pending, r)
			case <-s.stop:
				<-s.gathering
				return
			}
			s.gather(&pending)
			s.committing.Add(1) // before the next gatherer looks
			<-s.gathering       // the next writer gathers while this one commits
		} else {
			s.committing.Add(1)
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
		s.commitBatch(wc, batch)
		s.committing.Add(-1)
		select {
		case s.committed <- struct{}{}:
		default: // enough wake-ups are queued
		}
		for _, r := range finished {
			close(r.done)
		}
	}
}

// gather adds to pending what else is waiting, up to one batch worth; while
// the batch is small and another writer is committing, it keeps waiting
// for requests until that commit ends, GroupWait at most (see the top of
// this file). The caller holds the turn to gather.
func (s *Store) gather(pending *[]*createReq) {
	var waitUp <-chan time.Time // GroupWait, from the first wait
	waiting := 0
	for _, r := range *pending {
		waiting += len(r.clocks) - r.taken
	}
	for waiting < s.cfg.MaxBatchRows {
		select {
		case r := <-s.reqs:
			*pending = append(*pending, r)
			waiting += len(r.clocks)
			continue
		default:
		}
		if waiting >= s.cfg.MaxBatchRows/4 || s.committing.Load() == 0 {
			return
		}
		if waitUp == nil {
			t := time.NewTimer(s.cfg.GroupWait)
			defer t.Stop()
			waitUp = t.C
		}
		select {
		case r := <-s.reqs:
			*pending = append(*pending, r)
			waiting += len(r.clocks)
		case <-s.committed: // look again: that commit ended
		case <-waitUp:
			return
		case <-s.stop:
			return
		}
	}
}

// batchDeadline is the earliest deadline of the batch's requests, at most
// WriteTimeout from now and at least a moment from now.
func (s *Store) batchDeadline(batch []item) time.Time {
	now := time.Now()
	d := now.Add(s.cfg.WriteTimeout)
	for _, it := range batch {
		if dl, ok := it.req.ctx.Deadline(); ok && dl.Before(d) {
			d = dl
		}
	}
	if floor := now.Add(100 * time.Millisecond); d.Before(floor) {
		d = floor
	}
	return d
}

// commitBatch writes one batch and fills in the result of each of its items.
func (s *Store) commitBatch(wc *writerConn, batch []item) {
	if len(batch) == 0 {
		return
	}
	start := time.Now()
	ctx, cancel := context.WithDeadline(context.Background(), s.batchDeadline(batch))
	defer cancel()
	token := newToken()
	var err error
	unknown := false // committed or not, MySQL would not say
	checked := false // a key may exist: take the path that locks and compares
	for attempt := 1; attempt <= 8; attempt++ {
		var results []alarm.CreateResult
		if !checked {
			results, err = s.insertFast(ctx, wc, batch, token)
			if isDuplicate(err) {
				checked = true
				continue
			}
		} else {
			results, err = s.insertChecked(ctx, batch, token)
		}
		if err == nil {
			for j, it := range batch {
				it.req.res[it.i] = results[j]
			}
			break
		}
		var lost *unknownError
		if errors.As(err, &lost) {
			// The COMMIT was sent and its answer lost: find out.
			results, applied, rerr := s.resolveCreate(ctx, lost.sess, batch, token)
			if rerr != nil {
				err, unknown = rerr, true
				break
			}
			if applied {
				for j, it := range batch {
					it.req.res[it.i] = results[j]
				}
				err = nil
				break
			}
			checked = true // not applied: run it again
			continue
		}
		if (!isRetryable(err) && !connectionLost(err)) || ctx.Err() != nil {
			break
		}
		checked = true
		time.Sleep(time.Duration(attempt) * 5 * time.Millisecond)
	}
	if err != nil {
		if ctx.Err() == nil || !errors.Is(err, alarm.ErrUnavailable) {
			// at most one line per 10 s for failures of one kind
			if ok, heldBack := s.failLog.Allow(errKind(err), 1); ok {
				s.log.Warn("create batch failed", "rows", len(batch), "err", err, "like_failures_not_logged", heldBack)
			}
		}
		err = fmt.Errorf("create: %w", mapErr(err))
		for _, it := range batch {
			ierr := err
			if unknown {
				// memory may no longer match the row: its shard is read again
				ierr = &alarm.UnknownOutcomeError{Shard: alarm.ShardOf(it.clock().Application, it.clock().BusinessID, s.cfg.Shards), Err: err}
			}
			it.req.res[it.i] = alarm.CreateResult{Err: ierr}
		}
	}
	s.batchRows.Observe(float64(len(batch)))
	s.batchDur.Observe(time.Since(start).Seconds())
}

const insertCols = `(application, business_id, shard, status, payload, content_type, target_ring_at,
latest_ring_at, max_attempts, attempts, next_try_time, create_time, update_time, op_token, claim_token, ` + scheduleCols + `) VALUES `

func (s *Store) insertSQL(batch []item, token int64) (string, []any) {
	// Numbers go into the text as literals (exactly as the driver's
	// interpolation would write them); only the four strings of a row are
	// placeholders, escaped by the driver. For a batch of 500 that is 2,000
	// arguments for database/sql to convert and the driver to splice in,
	// not 6,500.
	var b strings.Builder
	b.Grow(len("INSERT INTO clock ") + len(insertCols) + len(batch)*(160+len(oneShotScheduleValues)))
	b.WriteString("INSERT INTO clock ")
	b.WriteString(insertCols)
	args := make([]any, 0, len(batch)*4)
	unclaimedToken := "," + s.unclaimedToken()
	var num [20]byte
	lit := func(v int64) {
		b.WriteByte(',')
		b.Write(strconv.AppendInt(num[:0], v, 10))
	}
	for j, it := range batch {
		if j > 0 {
			b.WriteByte(',')
		}
		c := it.clock()
		now := ms(it.req.now)
		args = append(args, c.Application, c.BusinessID, c.Payload, c.ContentType)
		b.WriteString("(?,?")
		lit(int64(alarm.ShardOf(c.Application, c.BusinessID, s.cfg.Shards)))
		b.WriteString(",'pending',?,?")
		lit(ms(c.RingAt))
		if c.LatestRingAt.IsZero() {
			b.WriteString(",NULL")
		} else {
			lit(ms(c.LatestRingAt))
		}
		lit(int64(c.MaxAttempts))
		b.WriteString(",0")
		lit(ms(alarm.DueAt(c.RingAt, it.req.now)))
		lit(now)
		lit(now)
		lit(token)
		b.WriteString(unclaimedToken)
		if c.Schedule == nil {
			// a one-shot clock: the schedule columns as literals too
			b.WriteString("," + oneShotScheduleValues + ")")
			continue
		}
		b.WriteString("," + schedulePlaceholders + ")")
		args = append(args, scheduleRowOf(alarm.Clock{Schedule: c.Schedule}).args()...)
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

// commit commits the transaction open on c, MySQL session sess (zero:
// onConn names it); an error that is not MySQL's own answer leaves the
// outcome unknown. The COMMIT is a statement under ctx: Tx.Commit sends it
// with no deadline, and a server that stalled then held the request for
// the driver's readTimeout (30 s), past mysql.request_timeout +
// mysql.resolve_timeout.
func commit(ctx context.Context, c *sqlx.Conn, sess session) error {
	_, err := c.ExecContext(ctx, "COMMIT")
	return commitErr(err, sess)
}

// commitErr is the error of a COMMIT sent on MySQL session sess: MySQL's
// own answer, or, for any other failure (its answer lost), an
// *unknownError.
func commitErr(err error, sess session) error {
	var me *mysql.MySQLError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &me) && interrupted(me.Number):
		// the commit may have been done first: find out
		return &unknownError{err: fmt.Errorf("commit: %w", err), sess: sess}
	case isServerError(err):
		return fmt.Errorf("commit: %w", err)
	default:
		return &unknownError{err: fmt.Errorf("commit: %w", err), sess: sess}
	}
}

// insertFast is the common case: no key exists yet. One INSERT in a
// transaction; the ids follow from LAST_INSERT_ID() when the server hands
// out consecutive ids, else from one SELECT. A duplicate key fails the
// whole statement and sends the batch to insertChecked.
//
// A transaction, not an autocommit INSERT: when the request's deadline
// passes while the INSERT waits (a stalled server), the connection is
// closed and the server rolls the INSERT back whenever it runs it, so a
// 503 never hides a clock that appears later. Only the COMMIT's answer can
// be lost (see resolveCreate). The transaction is the writer's own
// connection's, which runs with autocommit off (writerConn): the INSERT
// opens it, so a batch costs two round trips (INSERT, COMMIT), not three.
func (s *Store) insertFast(ctx context.Context, wc *writerConn, batch []item, token int64) (out []alarm.CreateResult, err error) {
	c, err := wc.get(ctx)
	if err != nil {
		return nil, fmt.Errorf("begin: %w", err)
	}
	out = make([]alarm.CreateResult, len(batch))
	if err := s.insertNew(ctx, c, batch, token, out, nil); err != nil {
		wc.rollback()
		return nil, err
	}
	if err := commit(ctx, c, wc.sess); err != nil {
		wc.drop() // its transaction's state is unknown: never reuse it
		return nil, err
	}
	return out, nil
}

// writerConn is a writer's own connection, taken from the pool with
// autocommit off so that a batch's INSERT starts its transaction without
// a BEGIN round trip (on a busy 2-core machine each round trip waits for
// both processes to be scheduled: BEGIN was a quarter of a batch's time).
// It never goes back to the pool with autocommit off: it is closed when
// the writer lets it go, after an error it could not roll back, after
// writerConnMaxAge (the pool's lifetime rules) and when it was idle for
// writerConnMaxIdle (a server's wait_timeout may have closed it; the
// pool's connections are checked before use, a held one is not).
type writerConn struct {
	s          *Store
	c          *sqlx.Conn
	sess       session // c's MySQL session (see resolve)
	since, use time.Time
}

const (
	writerConnMaxAge  = 10 * time.Minute
	writerConnMaxIdle = 30 * time.Second
)

func (w *writerConn) get(ctx context.Context) (*sqlx.Conn, error) {
	now := time.Now()
	if w.c != nil && (now.Sub(w.since) > writerConnMaxAge || now.Sub(w.use) > writerConnMaxIdle) {
		w.drop()
	}
	if w.c == nil {
		c, err := w.s.db.Connx(ctx)
		if err != nil {
			return nil, err
		}
		if _, err := c.ExecContext(ctx, "SET autocommit = 0"); err != nil {
			discard(c)
			return nil, err
		}
		sess, err := learnSession(ctx, c)
		if err != nil {
			discard(c)
			return nil, err
		}
		w.c, w.sess, w.since = c, sess, now
	}
	w.use = now
	return w.c, nil
}

// rollback ends the transaction a failed statement left open (its locks,
// a duplicate key's shared lock among them, last until then); a
// connection that cannot roll back is dropped, which rolls back too.
func (w *writerConn) rollback() {
	if w.c == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if _, err := w.c.ExecContext(ctx, "ROLLBACK"); err != nil {
		w.drop()
	}
}

// drop closes the connection rather than returning it to the pool.
func (w *writerConn) drop() {
	if w.c != nil {
		discard(w.c)
		w.c = nil
	}
}

// discard closes c's connection instead of giving it back to the pool.
func discard(c *sqlx.Conn) {
	_ = c.Raw(func(any) error { return driver.ErrBadConn })
}

// insertNew inserts new clocks in tx and fills in their results (at pos[j]
// for items[j]; at j when pos is nil). Their ids follow from
// LAST_INSERT_ID() when the server hands out consecutive ids (and every row
// went in), else from one SELECT by key.
func (s *Store) insertNew(ctx context.Context, tx execQueryer, items []item, token int64, out []alarm.CreateResult, pos []int) error {
	q, args := s.insertSQL(items, token)
	res, err := tx.ExecContext(ctx, q, args...)
	if err != nil {
		return fmt.Errorf("insert clocks: %w", err)
	}
	at := func(j int) int {
		if pos == nil {
			return j
		}
		return pos[j]
	}
	if s.consecutiveIDs && !s.cfg.SelectIDs {
		first, err := res.LastInsertId()
		if n, nerr := res.RowsAffected(); err == nil && nerr == nil && n == int64(len(items)) {
			for j, it := range items {
				out[at(j)] = alarm.CreateResult{Clock: newClock(first+int64(j), *it.clock(), it.req.now, s.cfg.Shards), Created: true}
			}
			return nil
		}
	}
	keys := make([]alarm.Key, len(items))
	for j, it := range items {
		keys[j] = it.key()
	}
	ids, err := s.idsOf(ctx, tx, keys)
	if err != nil {
		return err
	}
	for j, it := range items {
		id, ok := ids[keys[j]]
		if !ok {
			return fmt.Errorf("inserted clock %s not found", keys[j])
		}
		out[at(j)] = alarm.CreateResult{Clock: newClock(id, *it.clock(), it.req.now, s.cfg.Shards), Created: true}
	}
	return nil
}

// execQueryer is a transaction or a connection in one.
type execQueryer interface {
	sqlx.ExecerContext
	sqlx.QueryerContext
}

func newClock(id int64, c alarm.NewClock, now time.Time, shards int) alarm.Clock {
	now = fromMS(ms(now))
	return alarm.Clock{
		ID: id, Application: c.Application, BusinessID: c.BusinessID,
		Shard:   alarm.ShardOf(c.Application, c.BusinessID, shards),
		Payload: c.Payload, ContentType: c.ContentType, RingAt: c.RingAt, LatestRingAt: c.LatestRingAt,
		MaxAttempts: c.MaxAttempts, Status: alarm.StatusPending, NextTryAt: alarm.DueAt(c.RingAt, now),
		CreatedAt: now, UpdatedAt: now, Schedule: c.Schedule,
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

// rowsOf reads the clocks of the given keys.
func rowsOf(ctx context.Context, q sqlx.QueryerContext, keys []alarm.Key, lock bool) (map[alarm.Key]row, error) {
	var b strings.Builder
	b.WriteString("SELECT " + clockCols + " FROM clock WHERE ")
	args := keyList(&b, nil, keys)
	if lock {
		b.WriteString(" FOR UPDATE")
	}
	var rows []row
	if err := sqlx.SelectContext(ctx, q, &rows, b.String(), args...); err != nil {
		return nil, fmt.Errorf("read clocks by key: %w", err)
	}
	out := make(map[alarm.Key]row, len(rows))
	for _, r := range rows {
		out[alarm.Key{Application: r.Application, BusinessID: r.BusinessID}] = r
	}
	return out, nil
}

func distinctKeys(batch []item) []alarm.Key {
	seen := make(map[alarm.Key]bool, len(batch))
	keys := make([]alarm.Key, 0, len(batch))
	for _, it := range batch {
		if k := it.key(); !seen[k] {
			seen[k] = true
			keys = append(keys, k)
		}
	}
	return keys
}

// insertChecked handles batches with existing keys: in one transaction it
// locks the existing rows, answers them, and inserts the rest. The rule for
// a key that exists (decide):
//   - a live clock (pending, firing): identical -> 200 with it, different
//     -> 409 saying what to do;
//   - a finished clock (rung, cancelled, expired, dead): an identical
//     create within the idempotency window of the finished clock's creation
//     is a retry of the create that made it -> 200 with it, no second ring;
//     anything else re-arms the key: the finished clock moves to history in
//     this transaction (the key is unique in clock) and a new clock, with a
//     new id, is inserted -> 201.
func (s *Store) insertChecked(ctx context.Context, batch []item, token int64) (out []alarm.CreateResult, err error) {
	err = s.runTx(ctx, func(tx *sqlx.Conn) error {
		out, err = s.checkedTx(ctx, tx, batch, token)
		return err
	}, false)
	return out, err
}

func (s *Store) checkedTx(ctx context.Context, tx *sqlx.Conn, batch []item, token int64) ([]alarm.CreateResult, error) {
	existing, err := rowsOf(ctx, tx, distinctKeys(batch), true)
	if err != nil {
		return nil, fmt.Errorf("lock existing clocks: %w", err)
	}
	out := make([]alarm.CreateResult, len(batch))
	// the first new item per key inserts; later items of the same key compare to it
	firstNew := make(map[alarm.Key]int)
	var inserts []item
	var insertPos, laters []int
	var rearmed []rearmedClock // finished clocks whose key gets a new clock
	archived, err := s.archivedOf(ctx, tx, batch, existing)
	if err != nil {
		return nil, err
	}
	for j, it := range batch {
		k := it.key()
		if _, ok := firstNew[k]; ok {
			laters = append(laters, j)
			continue
		}
		if ex, ok := existing[k]; ok {
			res, rearm := s.answerFor(*it.clock(), ex.clock(), archived[k], it.req.now)
			if !rearm {
				out[j] = res
				continue
			}
			rearmed = append(rearmed, rearmedClock{ex.clock(), it.req.now})
		}
		firstNew[k] = j
		inserts = append(inserts, it)
		insertPos = append(insertPos, j)
	}
	if err := s.moveRearmed(ctx, tx, rearmed); err != nil {
		return nil, fmt.Errorf("re-arm: %w", err)
	}
	if len(inserts) > 0 {
		if err := s.insertNew(ctx, tx, inserts, token, out, insertPos); err != nil {
			return nil, err
		}
		for _, j := range laters {
			first := out[firstNew[batch[j].key()]].Clock
			out[j] = alarm.AnswerExisting(*batch[j].clock(), first)
		}
	}
	return out, nil
}

// rearmedClock is a finished clock whose key a create at now re-arms.
type rearmedClock struct {
	alarm.Clock
	now time.Time
}

// moveRearmed moves the finished clocks of re-armed keys out of clock, to
// clock_history. With history.keep 0 (NoHistory) it keeps there only those
// still within the idempotency window of their creation: a retry of the
// create that made one must find it (archivedOf), or it would set the
// clock again and ring a second time. The key's history rows past the
// window go in the same transaction, and the janitor deletes the rest with
// the key's clock (MoveFinished), so that with keep 0 clock_history holds
// only the clocks of live keys re-armed within the window.
func (s *Store) moveRearmed(ctx context.Context, tx *sqlx.Conn, rearmed []rearmedClock) error {
	if len(rearmed) == 0 {
		return nil
	}
	if !s.cfg.NoHistory {
		ids := make([]int64, len(rearmed))
		for i, c := range rearmed {
			ids[i] = c.ID
		}
		_, err := archive(ctx, tx, ids, true)
		return err
	}
	var recent, old []int64
	keys := make([]alarm.Key, 0, len(rearmed))
	var since time.Time // the earliest window's start: rows created after it may serve a retry
	for _, c := range rearmed {
		from := c.now.Add(-max(s.cfg.IdempotencyWindow, 0))
		if since.IsZero() || from.Before(since) {
			since = from
		}
		if c.CreatedAt.After(from) {
			recent = append(recent, c.ID)
		} else {
			old = append(old, c.ID)
		}
		keys = append(keys, alarm.Key{Application: c.Application, BusinessID: c.BusinessID})
	}
	if err := forgetHistory(ctx, tx, keys, since); err != nil {
		return err
	}
	if _, err := archive(ctx, tx, recent, true); err != nil {
		return err
	}
	_, err := archive(ctx, tx, old, false)
	return err
}

// decide answers a create for a key whose clock ex exists, or says the key
// is to be re-armed (see insertChecked).
func (s *Store) decide(n alarm.NewClock, ex alarm.Clock, now time.Time) (alarm.CreateResult, bool) {
	if !ex.Status.Finished() {
		return alarm.AnswerExisting(n, ex), false
	}
	if n.Same(ex) && now.Sub(ex.CreatedAt) < s.cfg.IdempotencyWindow {
		return alarm.CreateResult{Clock: ex}, false
	}
	return alarm.CreateResult{}, true
}

// archivedOf reads, for the keys of batch that a create would re-arm (their
// clock in clock is finished and not the create's own), the key's clocks
// in clock_history created within the idempotency window: one of them may
// be the one the create is a retry of (retryOfArchived). One statement by
// the key's index for the whole batch, and none when no create re-arms.
func (s *Store) archivedOf(ctx context.Context, tx sqlx.QueryerContext, batch []item, existing map[alarm.Key]row) (map[alarm.Key][]alarm.Clock, error) {
	// with history.keep 0 too: moveRearmed keeps the clocks within the window
	if s.cfg.IdempotencyWindow <= 0 {
		return nil, nil
	}
	var keys []alarm.Key
	seen := map[alarm.Key]bool{}
	var since time.Time
	for _, it := range batch {
		k := it.key()
		ex, ok := existing[k]
		if !ok || seen[k] {
			continue
		}
		if _, rearm := s.decide(*it.clock(), ex.clock(), it.req.now); rearm {
			seen[k] = true
			keys = append(keys, k)
			if from := it.req.now.Add(-s.cfg.IdempotencyWindow); since.IsZero() || from.Before(since) {
				since = from
			}
		}
	}
	if len(keys) == 0 {
		return nil, nil
	}
	var b strings.Builder
	b.WriteString("SELECT " + clockCols + ", finish_time FROM clock_history FORCE INDEX (idx_clock_history_key) WHERE ")
	args := keyList(&b, nil, keys)
	b.WriteString(" AND occurrence_of IS NULL AND create_time > ?")
	args = append(args, ms(since))
	var rows []historyRow
	if err := sqlx.SelectContext(ctx, tx, &rows, b.String(), args...); err != nil {
		return nil, fmt.Errorf("look for the clocks retries made in history: %w", mapErr(err))
	}
	out := make(map[alarm.Key][]alarm.Clock, len(keys))
	for _, r := range rows {
		k := alarm.Key{Application: r.Application, BusinessID: r.BusinessID}
		out[k] = append(out[k], r.clock())
	}
	return out, nil
}

// answerFor is the answer to create n for a key whose clock is ex, and
// whose earlier clocks in history are archived: decide's, or, when decide
// would re-arm the key, that of a clock in history the create is a retry
// of (its key re-armed since). rearm: neither answers, n makes a new clock.
func (s *Store) answerFor(n alarm.NewClock, ex alarm.Clock, archived []alarm.Clock, now time.Time) (alarm.CreateResult, bool) {
	res, rearm := s.decide(n, ex, now)
	if rearm {
		res, rearm = s.retryOfArchived(n, archived, now)
	}
	return res, rearm
}

// retryOfArchived answers a create that would re-arm its key when it is a
// retry of the create of one of the key's earlier clocks, re-armed since
// and so already in clock_history, within the idempotency window of that
// clock's creation: 200 with that clock, and nothing rings again. (A clock
// within the window is still in clock unless its key was re-armed: the
// retentions are at least the window.) archived are the key's clocks
// archivedOf found.
//
// A clock the application cancelled is not among them: its create was
// answered or found, since the application acted on the clock, and a
// create identical to it after the key was set to something else since is
// the application setting it again, as the pending clock's 409 tells it to
// ("cancel it and create it again"); answered with the cancelled clock, it
// set nothing and nothing rang (found by review).
func (s *Store) retryOfArchived(n alarm.NewClock, archived []alarm.Clock, now time.Time) (alarm.CreateResult, bool) {
	for _, c := range archived {
		if c.Status == alarm.StatusCancelled {
			continue
		}
		if n.Same(c) && now.Sub(c.CreatedAt) < s.cfg.IdempotencyWindow {
			return alarm.CreateResult{Clock: c}, false
		}
	}
	return alarm.CreateResult{}, true
}

// Identical answers, for creates that are not valid as new clocks at now
// (a time they name has passed) but may be retries of the create that set
// their key's clock, the clock a create of each would be answered with
// (200) by the rule of insertChecked (decide, then retryOfArchived); nil
// when none, and then the create's own refusal stands. It locks and
// writes nothing: one read of clock for all the keys, and one of
// clock_history only when a key's clock is finished and not the create's.
func (s *Store) Identical(ctx context.Context, clocks []alarm.NewClock, now time.Time) ([]*alarm.Clock, error) {
	req := &createReq{clocks: clocks, now: now}
	batch := make([]item, len(clocks))
	for i := range clocks {
		batch[i] = item{req, i}
	}
	existing, err := rowsOf(ctx, s.db, distinctKeys(batch), false)
	if err != nil {
		return nil, fmt.Errorf("look for identical clocks: %w", mapErr(err))
	}
	archived, err := s.archivedOf(ctx, s.db, batch, existing)
	if err != nil {
		return nil, err
	}
	out := make([]*alarm.Clock, len(clocks))
	for j, it := range batch {
		ex, ok := existing[it.key()]
		if !ok {
			continue
		}
		res, rearm := s.answerFor(*it.clock(), ex.clock(), archived[it.key()], now)
		if !rearm && res.Err == nil { // not a conflict: the create is identical
			c := res.Clock
			out[j] = &c
		}
	}
	return out, nil
}

// resolveCreate finds out whether a batch whose COMMIT answer was lost was
// applied: its rows carry the batch's token. A transaction is all or
// nothing, so one row with the token means every insert of it committed.
func (s *Store) resolveCreate(ctx context.Context, sess session, batch []item, token int64) ([]alarm.CreateResult, bool, error) {
	var rows map[alarm.Key]row
	err := s.resolve(ctx, sess, func(ctx context.Context) (err error) {
		rows, err = rowsOf(ctx, s.db, distinctKeys(batch), false)
		return err
	})
	if err != nil {
		return nil, false, err
	}
	applied := false
	for _, r := range rows {
		if r.OpToken.Valid && r.OpToken.Int64 == token {
			applied = true
			break
		}
	}
	if !applied {
		return nil, false, nil
	}
	out := make([]alarm.CreateResult, len(batch))
	first := map[alarm.Key]bool{}
	for j, it := range batch {
		k := it.key()
		r, ok := rows[k]
		switch {
		case !ok:
			// committed, then already gone (finished and moved to history
			// within the resolve): its id is not known here, so the create
			// is answered 503 and its retry finds it
			out[j] = alarm.CreateResult{Err: fmt.Errorf("%w: clock %s committed but no longer readable", alarm.ErrUnavailable, k)}
		case r.OpToken.Valid && r.OpToken.Int64 == token && !first[k]:
			first[k] = true
			out[j] = alarm.CreateResult{Clock: r.clock(), Created: true}
		default:
			res, rearm := s.decide(*it.clock(), r.clock(), it.req.now)
			if rearm { // the batch would have re-armed it: changed since
				res = alarm.CreateResult{Err: fmt.Errorf("%w: clock %s changed while its create was committed; retry", alarm.ErrUnavailable, k)}
			}
			out[j] = res
		}
	}
	return out, true, nil
}

// errKind names the kind of a failed write for holding back repeated
// warnings: MySQL's error number, or "unavailable" for a connection that
// failed, or "other".
func errKind(err error) string {
	var me *mysql.MySQLError
	switch {
	case errors.As(err, &me):
		return "mysql " + strconv.Itoa(int(me.Number))
	case errors.Is(mapErr(err), alarm.ErrUnavailable):
		return "unavailable"
	}
	return "other"
}
