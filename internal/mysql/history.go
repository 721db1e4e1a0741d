package mysql

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/clockd/clockd/internal/alarm"
)

// Finished clocks and their history: the moves from clock to clock_history
// (the janitor's, and a re-armed key's), reads of the history, its day
// partitions, the janitor's lease and the per-status counts.

// copyCols are the columns clock and clock_history share.
const copyCols = `id, application, business_id, shard, status, payload, content_type, target_ring_at,
latest_ring_at, max_attempts, attempts, next_try_time, last_error, claim_epoch, claim_token, rung_at,
create_time, update_time, op_token, claim_time, replayed_attempts, ` + scheduleCols

// finishTime is the finish_time of a clock moved to history (see archive):
// its update_time, or for a recurring clock, after its occurrences' rows
// (read only for recurring clocks: one index dive per partition).
const finishTime = `IF(schedule_cron IS NULL AND schedule_every_ms IS NULL, update_time,
GREATEST(update_time, (SELECT COALESCE(MAX(h.finish_time), 0) + 1 FROM clock_history h WHERE h.id = clock.id)))`

// finishedStatuses as SQL, for IN lists.
const finishedSQL = "'rung', 'cancelled', 'expired', 'dead'"

// archive moves the clocks with the given ids out of clock: into
// clock_history (history) or nowhere. The caller's transaction holds their
// row locks, so that the copy is the row it deletes (under READ COMMITTED
// the INSERT ... SELECT reads without locking). A finished clock's
// update_time is the time it finished.
//
// A recurring clock has rows in history already, one per finished
// occurrence, keyed (id, finish_time = the occurrence's time): its own row
// finishes after the last of them (finishTime). API changes keep
// update_time after it; a row an older version finished in the very
// millisecond of an occurrence would otherwise fail the copy (a duplicate
// key) at every janitor run, and every create re-arming its key.
func archive(ctx context.Context, tx sqlx.ExecerContext, ids []int64, history bool) (int64, error) {
	if len(ids) == 0 {
		return 0, nil
	}
	match, args := idMatch(sortedIDs(ids))
	if history {
		if _, err := tx.ExecContext(ctx, "INSERT INTO clock_history ("+copyCols+", finish_time) SELECT "+copyCols+
			", "+finishTime+" FROM "+byID+" WHERE "+match, args...); err != nil {
			return 0, fmt.Errorf("copy %d clocks to history: %w", len(ids), err)
		}
	}
	res, err := tx.ExecContext(ctx, "DELETE FROM clock WHERE "+match, args...)
	if err != nil {
		return 0, fmt.Errorf("delete %d finished clocks: %w", len(ids), err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return 0, fmt.Errorf("delete %d finished clocks: %w", len(ids), err)
	}
	return n, nil
}

// forgetHistory deletes the clocks of keys from clock_history (history.keep
// 0): those created at or before `before`, or all of them when before is
// zero. It reads the keys' rows by (application, business_id,
// occurrence_of) in each partition; the caller's transaction holds the
// keys' rows in clock.
func forgetHistory(ctx context.Context, tx sqlx.ExecerContext, keys []alarm.Key, before time.Time) error {
	if len(keys) == 0 {
		return nil
	}
	var b strings.Builder
	b.WriteString("DELETE FROM clock_history WHERE ")
	args := keyList(&b, nil, keys)
	if !before.IsZero() {
		b.WriteString(" AND create_time <= ?")
		args = append(args, ms(before))
	}
	if _, err := tx.ExecContext(ctx, b.String(), args...); err != nil {
		return fmt.Errorf("delete the history of %d keys: %w", len(keys), err)
	}
	return nil
}

// historyRow is a row of clock_history.
type historyRow struct {
	row
	FinishTime int64 `db:"finish_time"`
}

func (h historyRow) clock() alarm.Clock {
	c := h.row.clock()
	c.Archived, c.FinishedAt = true, fromMS(h.FinishTime)
	return c
}

// getHistory reads the newest clock of k in clock_history: the key's rows
// that are not occurrences (one per time it was armed), found by
// (application, business_id, occurrence_of) in each partition (migration
// 00013). The index is forced: with more than a few rows for the key (a
// recurring clock's occurrences, a key re-armed often) MariaDB chose a
// backward scan of the primary key for the ORDER BY ... LIMIT 1, reading
// the history of every clock created after this one.
func (s *Store) getHistory(ctx context.Context, q sqlx.QueryerContext, k alarm.Key) (alarm.Clock, error) {
	var r historyRow
	err := sqlx.GetContext(ctx, q, &r, "SELECT "+clockCols+", finish_time FROM clock_history FORCE INDEX (idx_clock_history_key)"+
		" WHERE application = ? AND business_id = ? AND occurrence_of IS NULL ORDER BY id DESC, finish_time DESC LIMIT 1", k.Application, k.BusinessID)
	if err != nil {
		if errors.Is(err, sql.ErrNoRows) {
			return alarm.Clock{}, fmt.Errorf("clock %s: %w", k, alarm.ErrNotFound)
		}
		return alarm.Clock{}, fmt.Errorf("get clock %s from history: %w", k, mapErr(err))
	}
	return r.clock(), nil
}

// FinishedBefore returns up to limit ids of clocks in status st (a finished
// one) whose update_time is before `before`, in (update_time, id) order
// after the cursor (afterAt, afterID), and the update_time of the last one:
// an index range of idx_clock_status_update, read without locks. The cursor
// keeps a run from stepping again over the index entries it has just
// deleted (InnoDB purges them later).
func (s *Store) FinishedBefore(ctx context.Context, st alarm.Status, before, afterAt time.Time, afterID int64, limit int) ([]int64, time.Time, error) {
	var rows []struct {
		ID         int64 `db:"id"`
		UpdateTime int64 `db:"update_time"`
	}
	a := ms(afterAt)
	err := s.db.SelectContext(ctx, &rows, `SELECT id, update_time FROM `+byStatus+`
		WHERE status = ? AND update_time < ? AND (update_time > ? OR (update_time = ? AND id > ?))
		ORDER BY update_time, id LIMIT ?`, string(st), ms(before), a, a, afterID, limit)
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("find %s clocks finished before %s: %w", st, before.UTC().Format(time.RFC3339), mapErr(err))
	}
	if len(rows) == 0 {
		return nil, afterAt, nil
	}
	ids := make([]int64, len(rows))
	for i, r := range rows {
		ids[i] = r.ID
	}
	return ids, fromMS(rows[len(rows)-1].UpdateTime), nil
}

// MoveFinished moves, in one transaction, those of ids that are still in
// status st and finished before `before` out of clock: those that finished
// before dropBefore are deleted (their history would be dropped already),
// the others go to clock_history, or are deleted too when history is off.
// The rows are locked by primary key, in id order, first: a clock replayed
// or re-armed meanwhile stays. A deadlock or lock-wait victim runs again.
func (s *Store) MoveFinished(ctx context.Context, st alarm.Status, ids []int64, before, dropBefore time.Time, history bool) (archived, deleted int64, err error) {
	if len(ids) == 0 {
		return 0, 0, nil
	}
	ids = sortedIDs(ids)
	err = s.inBackgroundTx(ctx, func(tx *sqlx.Conn) error {
		archived, deleted = 0, 0
		var rows []struct {
			ID          int64  `db:"id"`
			UpdateTime  int64  `db:"update_time"`
			Application string `db:"application"`
			BusinessID  string `db:"business_id"`
		}
		match, args := idMatch(ids)
		args = append(args, string(st), ms(before))
		if err := tx.SelectContext(ctx, &rows, "SELECT id, update_time, application, business_id FROM "+byID+" WHERE "+match+
			" AND status = ? AND update_time < ? FOR UPDATE", args...); err != nil {
			return fmt.Errorf("lock finished clocks: %w", err)
		}
		var keep, drop []int64
		var keys []alarm.Key
		for _, r := range rows {
			if history && r.UpdateTime >= ms(dropBefore) {
				keep = append(keep, r.ID)
			} else {
				drop = append(drop, r.ID)
				if !history {
					keys = append(keys, alarm.Key{Application: r.Application, BusinessID: r.BusinessID})
				}
			}
		}
		// With history.keep 0 the key's earlier clocks go with it: those a
		// re-arm kept for retries (moveRearmed), or archived while history
		// was kept, in a day not dropped yet; GET would answer one of them
		// as the key's clock. (With a keep, a clock is deleted only when its
		// day is dropped, and its key's earlier clocks are in that day or
		// before.)
		if !history {
			if err := forgetHistory(ctx, tx, keys, time.Time{}); err != nil {
				return err
			}
		}
		n, err := archive(ctx, tx, keep, true)
		if err != nil {
			return err
		}
		archived = n
		n, err = archive(ctx, tx, drop, false)
		if err != nil {
			return err
		}
		deleted = n
		return nil
	})
	if err != nil {
		return 0, 0, fmt.Errorf("move %d %s clocks: %w", len(ids), st, mapErr(err))
	}
	return archived, deleted, nil
}

// History partitions: pYYYYMMDD holds the clocks that finished on that day
// (UTC), bounded by the next midnight; pmax catches the rest.

const dayLayout = "20060102"

func partitionName(day time.Time) string { return "p" + day.UTC().Format(dayLayout) }

// HistoryDays lists the days clock_history has a partition for, oldest
// first (midnight UTC each).
func (s *Store) HistoryDays(ctx context.Context) ([]time.Time, error) {
	var parts []struct {
		Name  string         `db:"PARTITION_NAME"`
		Bound sql.NullString `db:"PARTITION_DESCRIPTION"`
	}
	if err := s.db.SelectContext(ctx, &parts, `SELECT PARTITION_NAME, PARTITION_DESCRIPTION FROM information_schema.PARTITIONS
		WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = 'clock_history' AND PARTITION_NAME IS NOT NULL
		ORDER BY PARTITION_ORDINAL_POSITION`); err != nil {
		return nil, fmt.Errorf("list history partitions: %w", mapErr(err))
	}
	var days []time.Time
	for _, p := range parts {
		if p.Name == "pmax" {
			continue
		}
		day, err := time.Parse(dayLayout, strings.TrimPrefix(p.Name, "p"))
		if err != nil {
			return nil, fmt.Errorf("history partition %s: not a day (pYYYYMMDD)", p.Name)
		}
		bound, err := strconv.ParseInt(p.Bound.String, 10, 64)
		if err != nil || bound != ms(day.AddDate(0, 0, 1)) {
			return nil, fmt.Errorf("history partition %s: bound %q is not the next midnight UTC", p.Name, p.Bound.String)
		}
		days = append(days, day)
	}
	return days, nil
}

// ddlLockWait bounds how long a partition change waits for the table's
// metadata lock (a long query on clock_history holds it): statements
// queue behind a waiting ALTER, so it must not wait long.
const ddlLockWait = 1 * time.Second

// alterHistory runs one ALTER TABLE clock_history on a connection whose
// metadata lock wait is short.
func (s *Store) alterHistory(ctx context.Context, q string) error {
	conn, err := s.db.Connx(ctx)
	if err != nil {
		return fmt.Errorf("connect: %w", mapErr(err))
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, "SET SESSION lock_wait_timeout = "+strconv.Itoa(int(ddlLockWait/time.Second))); err != nil {
		return mapErr(err)
	}
	_, err = conn.ExecContext(ctx, q)
	if _, rerr := conn.ExecContext(context.WithoutCancel(ctx), "SET SESSION lock_wait_timeout = DEFAULT"); rerr != nil {
		_ = conn.Raw(func(any) error { return driver.ErrBadConn }) // do not pool a session left changed
	}
	return mapErr(err)
}

// AddHistoryDays splits partitions for the given days (each after every
// existing day, ascending) off pmax, in one statement. pmax is normally
// empty, but each new partition is a file created and synced: the janitor
// passes one day at a time, so that no statement holds the table long.
func (s *Store) AddHistoryDays(ctx context.Context, days []time.Time) error {
	if len(days) == 0 {
		return nil
	}
	var b strings.Builder
	b.WriteString("ALTER TABLE clock_history REORGANIZE PARTITION pmax INTO (")
	for _, d := range days {
		fmt.Fprintf(&b, "PARTITION %s VALUES LESS THAN (%d), ", partitionName(d), ms(d.AddDate(0, 0, 1)))
	}
	b.WriteString("PARTITION pmax VALUES LESS THAN MAXVALUE)")
	if err := s.alterHistory(ctx, b.String()); err != nil {
		return fmt.Errorf("add history partitions %s..%s: %w", partitionName(days[0]), partitionName(days[len(days)-1]), err)
	}
	return nil
}

// DropHistoryDays drops the partitions of the given days, rows and all.
func (s *Store) DropHistoryDays(ctx context.Context, days []time.Time) error {
	if len(days) == 0 {
		return nil
	}
	names := make([]string, len(days))
	for i, d := range days {
		names[i] = partitionName(d)
	}
	if err := s.alterHistory(ctx, "ALTER TABLE clock_history DROP PARTITION "+strings.Join(names, ", ")); err != nil {
		return fmt.Errorf("drop history partitions %s: %w", strings.Join(names, ","), err)
	}
	return nil
}

// HoldLease takes the lease named name for owner, or renews it, when it is
// free, expired or the owner's already, and reports whether owner holds it
// now. Expiry is judged by the database clock.
func (s *Store) HoldLease(ctx context.Context, name, owner string, ttl time.Duration) (bool, error) {
	err := s.execRetry(ctx, `UPDATE clock_lease SET epoch = IF(owner <=> ?, epoch, epoch + 1), owner = ?,
		lease_until = `+dbNowMS+` + ?, update_time = `+dbNowMS+`
		WHERE name = ? AND (owner = ? OR owner IS NULL OR lease_until <= `+dbNowMS+`)`,
		owner, owner, ttl.Milliseconds(), name, owner)
	if err != nil {
		return false, fmt.Errorf("hold lease %s: %w", name, mapErr(err))
	}
	var held bool
	err = s.db.GetContext(ctx, &held, "SELECT owner <=> ? AND lease_until > "+dbNowMS+" FROM clock_lease WHERE name = ?",
		owner, name)
	if errors.Is(err, sql.ErrNoRows) {
		// Its row was deleted (by hand: migrations make it): without it
		// nobody would ever hold the lease, and nothing would say so. Make
		// it again, free; the next round takes it.
		if err := s.execRetry(ctx, "INSERT IGNORE INTO clock_lease (name) VALUES (?)", name); err != nil {
			return false, fmt.Errorf("make lease %s again: %w", name, mapErr(err))
		}
		s.log.Warn("the lease's row was missing from clock_lease: made again", "lease", name)
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("read lease %s: %w", name, mapErr(err))
	}
	return held, nil
}

// ReleaseLease gives the lease up, if owner holds it, so that another
// instance can take it at once.
func (s *Store) ReleaseLease(ctx context.Context, name, owner string) error {
	if err := s.execRetry(ctx, "UPDATE clock_lease SET owner = NULL, lease_until = 0, update_time = "+dbNowMS+
		" WHERE name = ? AND owner = ?", name, owner); err != nil {
		return fmt.Errorf("release lease %s: %w", name, mapErr(err))
	}
	return nil
}

// LeaseHolder returns who holds the lease now ("" when nobody does).
func (s *Store) LeaseHolder(ctx context.Context, name string) (string, error) {
	var owner sql.NullString
	err := s.db.GetContext(ctx, &owner, "SELECT owner FROM clock_lease WHERE name = ? AND lease_until > "+dbNowMS, name)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return "", fmt.Errorf("read lease %s: %w", name, mapErr(err))
	}
	return owner.String, nil
}

// exactCountUpTo bounds the firing clocks counted (see countClaimed) and
// the console's exact counts per application.
const exactCountUpTo = 10_000

// countChunk is how many index entries of idx_clock_status_update one
// counting statement reads (20-40 ms here), and countBudget how many
// statements a status gets per CountClocks: a status of N clocks is
// counted anew every N / (countChunk * countBudget) calls.
var (
	countChunk  = 50_000
	countBudget = 20
)

// countForget: a pass left alone this long (the janitor lease was
// elsewhere) starts again, and its last count is forgotten.
const countForget = 2 * time.Minute

// countPass is a count of one status under way: the clocks counted so far,
// up to the cursor (update_time, id) in idx_clock_status_update.
type countPass struct {
	n      int64
	at, id int64
}

// counts is the state of CountClocks: the pass under way per status, and
// the last complete count (-1 before the first).
type counts struct {
	mu   sync.Mutex
	pass map[alarm.Status]*countPass
	last map[alarm.Status]int64
	at   time.Time // of the last call
}

// CountClocks counts the clocks in clock per status exactly, without
// reading a large table at once: each status is counted along
// idx_clock_status_update in statements of countChunk index entries, at
// most countBudget of them per call; a count that needs more goes on at the
// next call (the janitor's, every 30 s) from where it stopped, and until it
// is complete the status's last complete count stands (the clocks counted
// so far, before the first; and after countForget without a call). A
// count over several calls is not a snapshot: a clock that changes within
// its status meanwhile (a retry, a reschedule: update_time moves past the
// cursor) can be counted twice, one that leaves it after being counted is
// still counted. InnoDB's row estimate, the figure before, was
// twice the real count on MariaDB 10.11 for statuses of 20,000 to 50,000
// clocks. The status column holds 'pending' for pending and firing clocks
// alike (a claim sets only claim_token): the firing ones are counted among
// the pending clocks already due (a claim is made at most ring.claim_ahead
// early), reading at most exactCountUpTo of them (a backlog of more makes
// the firing count a lower bound), and taken off the pending count.
func (s *Store) CountClocks(ctx context.Context) (map[alarm.Status]int64, error) {
	s.counts.mu.Lock()
	defer s.counts.mu.Unlock()
	if s.counts.pass == nil || time.Since(s.counts.at) > countForget {
		s.counts.pass = map[alarm.Status]*countPass{}
		s.counts.last = map[alarm.Status]int64{}
	}
	s.counts.at = time.Now()
	out := map[alarm.Status]int64{}
	for _, st := range []alarm.Status{alarm.StatusPending, alarm.StatusFiring, alarm.StatusRung, alarm.StatusCancelled, alarm.StatusExpired, alarm.StatusDead} {
		p := s.counts.pass[st]
		if p == nil {
			p = &countPass{at: -1}
			s.counts.pass[st] = p
		}
		done := false
		for range countBudget {
			n, at, id, end, err := s.countFrom(ctx, st, p.at, p.id)
			if err != nil {
				return nil, fmt.Errorf("count %s clocks: %w", st, err)
			}
			p.n, p.at, p.id = p.n+n, at, id
			if end {
				done = true
				break
			}
		}
		if done {
			s.counts.last[st] = p.n
			*p = countPass{at: -1}
		}
		if last, ok := s.counts.last[st]; ok {
			out[st] = last
		} else {
			out[st] = p.n
		}
	}
	claimed, err := s.countClaimed(ctx, "", time.Now())
	if err != nil {
		return nil, err
	}
	out[alarm.StatusFiring] += claimed
	out[alarm.StatusPending] = max(0, out[alarm.StatusPending]-claimed)
	return out, nil
}

// byStatus is clock read along idx_clock_status_update from a cursor
// (update_time, id). The index is forced: when many clocks share the
// cursor's millisecond (a batch of creates or of rung marks), MariaDB's
// estimates sometimes chose a ref access on (status) or (status,
// update_time), which reads every entry of that millisecond before the
// cursor's id (0.13 s and 800,000 entries for one counting statement of
// 50,000 in the 10 M drain bench). Forced, the range starts at the cursor,
// through the index's primary-key suffix.
const byStatus = "clock FORCE INDEX (idx_clock_status_update)"

// countFrom counts up to countChunk clocks in status st after the cursor
// (afterAt, afterID) in idx_clock_status_update order, and returns the
// cursor after them; end when that was the last of the status. Two index
// ranges at most, no row read: the countChunk-th entry, then (when there
// is none) the count of the rest.
func (s *Store) countFrom(ctx context.Context, st alarm.Status, afterAt, afterID int64) (n, at, id int64, end bool, err error) {
	const after = "status = ? AND (update_time > ? OR (update_time = ? AND id > ?))"
	var last struct {
		At int64 `db:"update_time"`
		ID int64 `db:"id"`
	}
	err = s.db.GetContext(ctx, &last, "SELECT update_time, id FROM "+byStatus+" WHERE "+after+
		" ORDER BY update_time, id LIMIT 1 OFFSET ?", string(st), afterAt, afterAt, afterID, countChunk-1)
	switch {
	case err == nil:
		return int64(countChunk), last.At, last.ID, false, nil
	case !errors.Is(err, sql.ErrNoRows):
		return 0, 0, 0, false, mapErr(err)
	}
	if err := s.db.GetContext(ctx, &n, "SELECT COUNT(*) FROM "+byStatus+" WHERE "+after, string(st), afterAt, afterAt, afterID); err != nil {
		return 0, 0, 0, false, mapErr(err)
	}
	return n, afterAt, afterID, true, nil
}

// countClaimed counts the claimed pending clocks (firing, see claimedBy) of
// app (all when empty) among the first exactCountUpTo pending clocks due
// by now + ring.claim_ahead: all of them unless a backlog is due.
func (s *Store) countClaimed(ctx context.Context, app string, now time.Time) (int64, error) {
	shards, args := s.everyShard()
	args = append(args, ms(now.Add(s.cfg.ClaimAhead)))
	cond := ""
	if app != "" {
		cond = " AND application = ?"
		args = append(args, app)
	}
	args = append(args, exactCountUpTo)
	var n int64
	if err := s.db.GetContext(ctx, &n, "SELECT COUNT(NULLIF(claim_token, 0)) FROM (SELECT claim_token FROM clock WHERE "+shards+
		" AND status = 'pending' AND next_try_time <= ?"+cond+" LIMIT ?) t", args...); err != nil {
		return 0, fmt.Errorf("count firing clocks: %w", mapErr(err))
	}
	return n, nil
}

// estimateRows is the optimizer's row estimate of a single-table query
// (EXPLAIN's rows column, which MySQL and MariaDB both have).
func (s *Store) estimateRows(ctx context.Context, q string, args ...any) (int64, error) {
	rows, err := s.db.QueryContext(ctx, "EXPLAIN "+q, args...)
	if err != nil {
		return 0, mapErr(err)
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		return 0, mapErr(err)
	}
	at := -1
	for i, c := range cols {
		if strings.EqualFold(c, "rows") {
			at = i
		}
	}
	if at < 0 || !rows.Next() {
		return 0, errors.New("EXPLAIN has no rows column")
	}
	vals := make([]sql.NullString, len(cols))
	ptrs := make([]any, len(cols))
	for i := range vals {
		ptrs[i] = &vals[i]
	}
	if err := rows.Scan(ptrs...); err != nil {
		return 0, mapErr(err)
	}
	n, err := strconv.ParseInt(vals[at].String, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("EXPLAIN rows %q: %w", vals[at].String, err)
	}
	return n, nil
}
