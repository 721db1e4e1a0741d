package mysql

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/clockd/clockd/internal/alarm"
)

// The queries of the preloader and the ring loop. Each carries many clocks
// per round trip.

func placeholders(n int) string {
	return strings.TrimSuffix(strings.Repeat("?,", n), ",")
}

func idArgs(ids []int64) []any {
	args := make([]any, len(ids))
	for i, id := range ids {
		args[i] = id
	}
	return args
}

// LoadDue returns up to limit pending clocks of a shard with next_try_time in
// (after, until], ordered by (next_try_time, id) after the cursor. It reads
// the index only and writes nothing. Claimed (firing) clocks are among them:
// leaving them out would read every row (claim_token is not in the index);
// a claim of one of them claims nothing (see Claim).
func (s *Store) LoadDue(ctx context.Context, shard int, afterAt time.Time, afterID int64, until time.Time, limit int) ([]alarm.Due, error) {
	var rows []struct {
		ID   int64 `db:"id"`
		Next int64 `db:"next_try_time"`
	}
	a, u := ms(afterAt), ms(until)
	err := s.db.SelectContext(ctx, &rows, `SELECT id, next_try_time FROM clock
		WHERE shard = ? AND status = 'pending' AND next_try_time <= ?
		  AND (next_try_time > ? OR (next_try_time = ? AND id > ?))
		ORDER BY next_try_time, id LIMIT ?`, shard, u, a, a, afterID, limit)
	if err != nil {
		return nil, fmt.Errorf("load shard %d: %w", shard, mapErr(err))
	}
	out := make([]alarm.Due, len(rows))
	for i, r := range rows {
		out[i] = alarm.Due{ID: r.ID, Shard: shard, At: fromMS(r.Next)}
	}
	return out, nil
}

// leasePairs is the (shard, epoch) pairs of leases as an IN list, and its
// arguments.
func leasePairs(leases []alarm.Lease) (string, []any) {
	args := make([]any, 0, 2*len(leases))
	for _, l := range leases {
		args = append(args, l.Shard, l.Epoch)
	}
	return strings.TrimSuffix(strings.Repeat("(?,?),", len(leases)), ","), args
}

// idMatch is the condition "id is one of ids" (sorted ascending) and its
// arguments. A list of many ids close together (a burst created together
// and due together: a hot second) is read as one primary-key range with the
// list as a filter; MariaDB descends the B-tree once per listed id
// otherwise, which cost about as much as the row update itself
// (docs/benchmarks.md). Scattered ids keep the plain list.
func idMatch(ids []int64) (string, []any) {
	n := len(ids)
	if n >= 16 && ids[n-1]-ids[0]+1 <= int64(2*n) {
		return "id BETWEEN ? AND ? AND (id + 0) IN (" + placeholders(n) + ")",
			append([]any{ids[0], ids[n-1]}, idArgs(ids)...)
	}
	return "id IN (" + placeholders(n) + ")", idArgs(ids)
}

// byID names the clock table for the statements that change or read given
// clocks by id (claims and their outcome writes): their rows are found by
// primary key, never through a status index. With few firing clocks, the
// optimizer otherwise took (status, update_time) for "status = 'firing'"
// and walked, and locked, every firing clock of the table for each write
// (seen at 0.3-1.4 s per claim while recurring clocks rang).
const byID = "clock FORCE INDEX (PRIMARY)"

// sortedIDs returns the ids in ascending order (a copy): statements that
// change many clocks lock their rows by primary key in one order, so that
// two of them never wait for each other crosswise.
func sortedIDs(ids []int64) []int64 {
	out := append([]int64(nil), ids...)
	slices.Sort(out)
	return out
}

// A claimed clock is firing: status stays 'pending' and claim_token is set,
// not 0 (claimed below). A claim writes no indexed column, so it moves no index
// entry: setting status = 'firing' moved the clock's entries in the three
// status-bearing indexes, and the rung mark moved them again, about half of
// MySQL's work per ring (docs/benchmarks.md, migration 00008). Rows claimed
// by earlier versions have status = 'firing'; recovery handles both.
const (
	unclaimed = "status = 'pending' AND " + notClaimed
	// notClaimed: no claim. A pending clock's claim_token is 0 or NULL
	// when it is not claimed (see unclaimedToken).
	notClaimed = "COALESCE(claim_token, 0) = 0"
	// claimedBy is followed by the list of claim tokens
	claimedBy = "status = 'pending' AND claim_token IN ("
	// firingRow is any firing clock, either form
	firingRow = "(status = 'firing' OR status = 'pending' AND claim_token <> 0)"
	// mayBeFiring narrows the search for firing clocks to an index range
	// of (shard, status, next_try_time): rows of the status 'firing', and
	// pending clocks due by the bound (?) that a claim can have reached
	mayBeFiring = "(status = 'firing' OR status = 'pending' AND next_try_time <= ?)"
)

// everyShard is the condition "shard is one of the schema's shards" and its
// arguments: with it, a search by status and next_try_time is one range of
// (shard, status, next_try_time) per shard.
func (s *Store) everyShard() (string, []any) {
	args := make([]any, s.cfg.Shards)
	for i := range args {
		args[i] = i
	}
	return "shard IN (" + placeholders(s.cfg.Shards) + ")", args
}

// ringCols are the columns a ring needs: the clock's, and the attempts
// made before its last replay, which the attempt number of a ring counts.
const ringCols = clockCols + ", replayed_attempts"

// Claim claims the given clocks (pending -> firing), but only in shards
// that owner still holds with the given epochs (fencing), and returns the
// clocks it claimed. Clocks cancelled, changed or claimed meanwhile are not
// claimed. The claim counts the attempt about to be made (attempts + 1), so
// that a clock rung again after a takeover says attempt 2 or more.
//
// The rows are found and locked by primary key only (the shard fence is a
// subquery on clock_shard, not a join that could drive the scan through the
// (shard, status, next_try_time) index and lock ranges of it).
func (s *Store) Claim(ctx context.Context, owner string, leases []alarm.Lease, ids []int64, token int64, until, now time.Time) ([]alarm.Clock, error) {
	if len(ids) == 0 || len(leases) == 0 {
		return nil, nil
	}
	ids = sortedIDs(ids)
	var b strings.Builder
	args := make([]any, 0, 6+4*len(leases)+len(ids))
	b.WriteString("UPDATE " + byID + ` SET attempts = attempts + 1, claim_token = ?, claim_time = ?, claim_epoch = CASE shard`)
	args = append(args, token, ms(now))
	for _, l := range leases {
		b.WriteString(" WHEN ? THEN ?")
		args = append(args, l.Shard, l.Epoch)
	}
	match, margs := idMatch(ids)
	b.WriteString(" END WHERE " + match + " AND " + unclaimed + " AND next_try_time <= ?")
	args = append(args, margs...)
	args = append(args, ms(until))
	pairs, pargs := leasePairs(leases)
	b.WriteString(" AND shard IN (SELECT shard FROM clock_shard WHERE owner = ? AND lease_until > " + dbNowMS + " AND (shard, epoch) IN (" + pairs + "))")
	args = append(args, owner)
	args = append(args, pargs...)
	if err := s.execRetry(ctx, b.String(), args...); err != nil {
		return nil, fmt.Errorf("claim %d clocks: %w", len(ids), mapErr(err))
	}
	q := "SELECT " + ringCols + " FROM " + byID + " WHERE " + match + " AND " + claimedBy + "?)"
	out, err := s.ringClocks(ctx, q, append(margs, token)...)
	if err != nil {
		return nil, fmt.Errorf("read claimed clocks: %w", mapErr(err))
	}
	return out, nil
}

// ringClocks runs a SELECT of ringCols and returns its clocks. Each row is
// scanned into its fields directly (ringDests), not by sqlx's reflection
// over the struct, which cost about 0.6 µs of clockd's CPU per claimed
// clock on top of the scan itself (BenchmarkClaim500's self-cpu, 4.2 ->
// 3.6 µs; docs/benchmarks.md).
func (s *Store) ringClocks(ctx context.Context, q string, args ...any) ([]alarm.Clock, error) {
	rows, err := s.db.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []alarm.Clock
	var r row
	dests := r.ringDests()
	for rows.Next() {
		r = row{}
		if err := rows.Scan(dests...); err != nil {
			return nil, err
		}
		out = append(out, r.clock())
	}
	return out, rows.Err()
}

// ringDests are the scan destinations of ringCols, in its order (a test
// checks them against the columns' db tags).
func (r *row) ringDests() []any {
	return []any{&r.ID, &r.Application, &r.BusinessID, &r.Shard, &r.Status, &r.Payload, &r.ContentType,
		&r.TargetRingAt, &r.LatestRingAt, &r.MaxAttempts, &r.Attempts, &r.NextTryTime, &r.LastError, &r.RungAt,
		&r.CreateTime, &r.UpdateTime, &r.OpToken, &r.ClaimToken,
		&r.Cron, &r.TimeZone, &r.EveryMS, &r.Start, &r.End, &r.MaxOccur, &r.Occurrences, &r.Misfire,
		&r.CatchUpLimit, &r.DeadlineMS, &r.Paused,
		&r.ReplayedAttempts}
}

// notAttempted undoes the attempt a claim counted, for a clock that was
// never published.
const notAttempted = "attempts = GREATEST(attempts, 1) - 1"

// Waiting returns those of ids that are pending, not claimed and due after
// until (by primary key): the clocks a claim did not take because their
// row was moved later than the time the ring loop had for them. Only
// later: a clock the claim missed for any other reason (its shard's lease,
// another instance's claim) is not offered back to be claimed in vain
// again at once.
func (s *Store) Waiting(ctx context.Context, ids []int64, until time.Time) ([]alarm.Due, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	match, args := idMatch(sortedIDs(ids))
	var rows []struct {
		ID    int64 `db:"id"`
		Shard int   `db:"shard"`
		Next  int64 `db:"next_try_time"`
	}
	err := s.db.SelectContext(ctx, &rows, "SELECT id, shard, next_try_time FROM "+byID+" WHERE "+match+
		" AND "+unclaimed+" AND next_try_time > ?", append(args, ms(until))...)
	if err != nil {
		return nil, fmt.Errorf("read %d clocks a claim missed: %w", len(ids), mapErr(err))
	}
	out := make([]alarm.Due, len(rows))
	for i, r := range rows {
		out[i] = alarm.Due{ID: r.ID, Shard: r.Shard, At: fromMS(r.Next)}
	}
	return out, nil
}

// Release unclaims those of ids that a claim with the given token left
// firing. A claim whose answer was lost (connection cut, timeout)
// may still have been applied; its clocks must not wait for the firing
// timeout.
func (s *Store) Release(ctx context.Context, token int64, ids []int64, now time.Time) error {
	if len(ids) == 0 {
		return nil
	}
	match, margs := idMatch(sortedIDs(ids))
	q := `UPDATE ` + byID + ` SET ` + notAttempted + `, claim_token = ` + s.unclaimedToken() + `
		WHERE ` + match + " AND " + claimedBy + "?)"
	if err := s.execRetry(ctx, q, append(margs, token)...); err != nil {
		return fmt.Errorf("release %d clocks of a lost claim: %w", len(ids), mapErr(err))
	}
	return nil
}

// The writes below record what became of claimed clocks. They are fenced
// by claim token: a write applies only to rows still firing under one of
// the given claims, so that an instance that lost a shard, recording late,
// cannot overwrite the claim of the shard's new owner (which would leave a
// clock rung by the new owner pending, or put its claimed clock back).

// fence is the WHERE clause of a fenced write and its arguments; the ids
// are sorted so that rows are locked in primary-key order.
func fence(ids, tokens []int64) (string, []any) {
	if len(tokens) == 0 {
		tokens = []int64{-1} // matches nothing
	}
	match, args := idMatch(sortedIDs(ids))
	args = append(args, idArgs(tokens)...)
	return " WHERE " + match + " AND " + claimedBy + placeholders(len(tokens)) + ")", args
}

// idValue is one clock's value of a column an outcome write sets.
type idValue struct {
	id int64
	v  any // int64 or string: comparable
}

// byIDTree writes the value of each of rows (sorted by id) as a balanced
// tree of CASE expressions: MySQL finds a row's value in about log2(n)
// comparisons, where a flat CASE id WHEN ... THEN ... of 500 clocks made
// it compare each row with half the list (a rung mark of 500 clocks took
// 19-20 us a clock with 500 confirm times; 13-15 with 5, the same as the
// per-time IN lists this tree replaced). A subtree whose clocks share a
// value is that value alone. Rows not listed get some
// leaf's value or NULL: the writes' WHERE lists the ids.
func byIDTree(b *strings.Builder, args []any, rows []idValue) []any {
	same := true
	for _, r := range rows[1:] {
		if r.v != rows[0].v {
			same = false
			break
		}
	}
	switch {
	case same:
		b.WriteString("?")
		return append(args, rows[0].v)
	case len(rows) <= 8:
		b.WriteString("CASE id")
		for _, r := range rows {
			b.WriteString(" WHEN ? THEN ?")
			args = append(args, r.id, r.v)
		}
		b.WriteString(" END")
		return args
	}
	mid := len(rows) / 2
	b.WriteString("CASE WHEN id < ? THEN ")
	args = append(args, rows[mid].id)
	args = byIDTree(b, args, rows[:mid])
	b.WriteString(" ELSE ")
	args = byIDTree(b, args, rows[mid:])
	b.WriteString(" END")
	return args
}

// sortByID sorts rows by id for byIDTree.
func sortByID(rows []idValue) []idValue {
	slices.SortFunc(rows, func(a, b idValue) int { return cmp.Compare(a.id, b.id) })
	return rows
}

// MarkRung records confirmed rings of clocks claimed with the given tokens,
// each with the time its own confirm arrived, and clears the error of the
// failed attempts before it.
func (s *Store) MarkRung(ctx context.Context, rungs []alarm.Rung, tokens []int64) error {
	if len(rungs) == 0 {
		return nil
	}
	var b strings.Builder
	args := make([]any, 0, 2*len(rungs)+len(rungs)+len(tokens)+1)
	b.WriteString("UPDATE " + byID + " SET status = 'rung', last_error = NULL, claim_token = NULL, rung_at = ")
	// each clock's own confirm time; one value when the mark's clocks share
	// it (the rings of one publish), a tree by id otherwise
	ids := make([]int64, len(rungs))
	rows := make([]idValue, len(rungs))
	var last int64
	for i, r := range rungs {
		ids[i] = r.ID
		rows[i] = idValue{r.ID, ms(r.At)}
		last = max(last, ms(r.At))
	}
	args = byIDTree(&b, args, sortByID(rows))
	b.WriteString(", update_time = ?")
	args = append(args, last)
	where, wargs := fence(ids, tokens)
	b.WriteString(where)
	if err := s.execRetry(ctx, b.String(), append(args, wargs...)...); err != nil {
		return fmt.Errorf("mark %d clocks rung: %w", len(rungs), mapErr(err))
	}
	return nil
}

// Fail records failed attempts of clocks claimed with the given tokens:
// each goes back to pending with its next try, or becomes expired or dead.
// (The attempt was counted when the clock was claimed.)
func (s *Store) Fail(ctx context.Context, outs []alarm.Outcome, tokens []int64, now time.Time) error {
	if len(outs) == 0 {
		return nil
	}
	var b strings.Builder
	args := make([]any, 0, 6*len(outs)+len(tokens)+2)
	// status, next try and error of each clock: trees by id (byIDTree);
	// a column all of whose clocks share a value is that value
	status := make([]idValue, len(outs))
	next := make([]idValue, len(outs))
	errs := make([]idValue, len(outs))
	for i, o := range outs {
		at := o.NextTryAt
		if at.IsZero() {
			at = now
		}
		status[i] = idValue{o.ID, string(o.Status)}
		next[i] = idValue{o.ID, ms(at)}
		errs[i] = idValue{o.ID, alarm.TrimError(o.Error)}
	}
	b.WriteString("UPDATE " + byID + " SET status = ")
	args = byIDTree(&b, args, sortByID(status))
	b.WriteString(", next_try_time = ")
	args = byIDTree(&b, args, sortByID(next))
	b.WriteString(", last_error = ")
	args = byIDTree(&b, args, sortByID(errs))
	b.WriteString(", claim_token = " + s.unclaimedToken() + ", update_time = ?")
	args = append(args, ms(now))
	ids := make([]int64, len(outs))
	for i, o := range outs {
		ids[i] = o.ID
	}
	where, wargs := fence(ids, tokens)
	b.WriteString(where)
	args = append(args, wargs...)
	if err := s.execRetry(ctx, b.String(), args...); err != nil {
		return fmt.Errorf("record %d failed attempts: %w", len(outs), mapErr(err))
	}
	return nil
}

// Expire marks firing clocks expired without an attempt: their
// latest_ring_at passed before they could be published.
func (s *Store) Expire(ctx context.Context, ids, tokens []int64, now time.Time) error {
	return s.setFiring(ctx, "expire", ids, tokens, "status = 'expired', "+notAttempted+", last_error = 'latest_ring_at passed before it could ring'", now)
}

// Unclaim puts firing clocks back to pending untouched (no attempt was
// made: the broker was unavailable or the lease was lost before publish).
func (s *Store) Unclaim(ctx context.Context, ids, tokens []int64, now time.Time) error {
	if len(ids) == 0 {
		return nil
	}
	where, args := fence(ids, tokens)
	if err := s.execRetry(ctx, "UPDATE "+byID+" SET "+notAttempted+", claim_token = "+s.unclaimedToken()+where, args...); err != nil {
		return fmt.Errorf("unclaim %d clocks: %w", len(ids), mapErr(err))
	}
	return nil
}

func (s *Store) setFiring(ctx context.Context, verb string, ids, tokens []int64, set string, now time.Time) error {
	if len(ids) == 0 {
		return nil
	}
	where, args := fence(ids, tokens)
	q := "UPDATE " + byID + " SET " + set + ", claim_token = NULL, update_time = ?" + where
	if err := s.execRetry(ctx, q, append([]any{ms(now)}, args...)...); err != nil {
		return fmt.Errorf("%s %d clocks: %w", verb, len(ids), mapErr(err))
	}
	return nil
}

// RecoverFiring puts back to pending the firing clocks of a shard that were
// claimed under an older epoch (a previous owner that died mid-flight) or
// whose claim is older than staleBefore, except those claimed with one of
// the held tokens: this process still holds them (a ring in flight, or a
// confirmed ring whose outcome is not written yet) and will record them.
// The attempt stays counted: the ring may have reached the broker, so the
// next one says attempt 2 or more. It returns how many it recovered.
//
// A claimed clock was due by its claim time + ring.claim_ahead, so the
// search covers the shard's pending clocks due by now + ClaimAhead (the
// preloader's own range) and the rows of earlier versions left with
// status 'firing'; it reads them without locking and changes only what it
// found, by primary key, with the same conditions.
func (s *Store) RecoverFiring(ctx context.Context, shard int, epoch int64, staleBefore time.Time, held []int64, now time.Time) (int64, error) {
	cond := firingRow + " AND (claim_epoch IS NULL OR claim_epoch < ? OR COALESCE(NULLIF(claim_time, 0), update_time) < ?)"
	args := []any{epoch, ms(staleBefore)}
	if len(held) > 0 {
		cond += " AND claim_token NOT IN (" + placeholders(len(held)) + ")"
		args = append(args, idArgs(held)...)
	}
	const chunk = 5000
	var total int64
	for {
		var ids []int64
		if err := s.db.SelectContext(ctx, &ids, `SELECT id FROM clock
			WHERE shard = ? AND `+mayBeFiring+" AND "+cond+" LIMIT "+fmt.Sprint(chunk),
			append([]any{shard, ms(now.Add(s.cfg.ClaimAhead))}, args...)...); err != nil {
			return total, fmt.Errorf("find firing clocks of shard %d: %w", shard, mapErr(err))
		}
		if len(ids) == 0 {
			return total, nil
		}
		match, margs := idMatch(sortedIDs(ids))
		q := "UPDATE " + byID + " SET status = 'pending', claim_token = " + s.unclaimedToken() + ", update_time = ? WHERE " + match + " AND " + cond
		var n int64
		err := retryLocked(ctx, func() error {
			res, err := s.db.ExecContext(ctx, q, append(append([]any{ms(now)}, margs...), args...)...)
			if err != nil {
				return err
			}
			n, _ = res.RowsAffected()
			return nil
		})
		if err != nil {
			return total, fmt.Errorf("recover firing clocks of shard %d: %w", shard, mapErr(err))
		}
		total += n
		if len(ids) < chunk {
			return total, nil
		}
	}
}
