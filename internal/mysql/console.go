package mysql

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/clockd/clockd/internal/alarm"
)

// Reads for the operator console. Each is bounded by an index range or a
// LIMIT, never a scan of the whole table: a page must answer quickly with
// ten million clocks in `clock`.

// Applications lists up to limit applications that have clocks in the
// clock table, in name order (a loose scan of the application index).
func (s *Store) Applications(ctx context.Context, limit int) ([]string, error) {
	var apps []string
	if err := s.db.SelectContext(ctx, &apps, "SELECT DISTINCT application FROM clock ORDER BY application LIMIT ?", limit); err != nil {
		return nil, fmt.Errorf("applications: %w", mapErr(err))
	}
	return apps, nil
}

var consoleStatuses = []alarm.Status{alarm.StatusPending, alarm.StatusFiring, alarm.StatusRung,
	alarm.StatusCancelled, alarm.StatusExpired, alarm.StatusDead}

// StatusCounts counts the clocks of an application per status, exactly up
// to limit: one round trip, each count an index range of (application,
// status, id) that stops at the cap. Past the cap, the count is InnoDB's
// estimate of the same range (EXPLAIN: a few index dives, whatever the
// range's size), marked Estimated; should the estimate fail or fall below
// the cap, it is the cap, marked AtLeast.
func (s *Store) StatusCounts(ctx context.Context, app string, limit int) ([]alarm.StatusCount, error) {
	parts := make([]string, len(consoleStatuses))
	args := make([]any, 0, 3*len(consoleStatuses))
	for i, st := range consoleStatuses {
		parts[i] = "SELECT ? AS status, (SELECT COUNT(*) FROM (SELECT 1 FROM clock WHERE application = ? AND status = ? LIMIT ?) t" + fmt.Sprint(i) + ") AS n"
		args = append(args, string(st), app, string(st), limit+1)
	}
	var rows []struct {
		Status string `db:"status"`
		N      int64  `db:"n"`
	}
	if err := s.db.SelectContext(ctx, &rows, strings.Join(parts, " UNION ALL "), args...); err != nil {
		return nil, fmt.Errorf("count clocks of %s: %w", app, mapErr(err))
	}
	// pending clocks with a claim are firing (see countClaimed)
	claimed, err := s.countClaimed(ctx, app, time.Now())
	if err != nil {
		return nil, fmt.Errorf("count clocks of %s: %w", app, err)
	}
	for i := range rows {
		switch alarm.Status(rows[i].Status) {
		case alarm.StatusPending:
			rows[i].N = max(0, rows[i].N-claimed)
		case alarm.StatusFiring:
			rows[i].N += claimed
		}
	}
	out := make([]alarm.StatusCount, len(rows))
	for i, r := range rows {
		c := alarm.StatusCount{Application: app, Status: alarm.Status(r.Status), Count: r.N}
		if r.N > int64(limit) {
			est, err := s.estimateRows(ctx, "SELECT 1 FROM clock WHERE application = ? AND status = ?", app, r.Status)
			if err == nil && est > int64(limit) {
				c.Count, c.Estimated = est, true
			} else {
				c.Count, c.AtLeast = int64(limit), true
			}
		}
		out[i] = c
	}
	return out, nil
}

// DueHistogram counts the pending clocks whose next try falls in each of n
// buckets of the given width from `from`. It reads one range of (shard,
// status, next_try_time) per shard, the shards split between up to four
// statements at once (so that MySQL counts on several threads), each
// reading at most its share of limit rows; when one reaches it, capped is
// true and the counts are a lower bound.
func (s *Store) DueHistogram(ctx context.Context, from time.Time, width time.Duration, n, limit int) (buckets []alarm.DueBucket, capped bool, err error) {
	if n <= 0 || width <= 0 {
		return nil, false, nil
	}
	buckets = make([]alarm.DueBucket, n)
	for i := range buckets {
		buckets[i].At = from.Add(time.Duration(i) * width)
	}
	parts := max(1, min(4, s.cfg.Shards))
	share := (limit + parts - 1) / parts
	counts := make([][]int64, parts)
	errs := make([]error, parts)
	var wg sync.WaitGroup
	for p := range parts {
		var shards []any
		for sh := p; sh < s.cfg.Shards; sh += parts {
			shards = append(shards, sh)
		}
		wg.Go(func() { counts[p], errs[p] = s.dueCounts(ctx, shards, from, width, n, share) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, false, err
	}
	for _, c := range counts {
		var total int64
		for i, v := range c {
			buckets[i].Count += v
			total += v
		}
		capped = capped || total > int64(share)
	}
	return buckets, capped, nil
}

// dueCounts is DueHistogram over some shards.
func (s *Store) dueCounts(ctx context.Context, shards []any, from time.Time, width time.Duration, n, limit int) ([]int64, error) {
	to := from.Add(time.Duration(n) * width)
	args := make([]any, 0, len(shards)+5)
	args = append(args, ms(from), width.Milliseconds())
	args = append(args, shards...)
	args = append(args, ms(from), ms(to), limit+1)
	var rows []struct {
		B int   `db:"b"`
		N int64 `db:"n"`
	}
	// shard IN (...) turns the leading column of the index into ranges, so
	// that status and next_try_time bound each one.
	q := "SELECT (next_try_time - ?) DIV ? AS b, COUNT(*) AS n FROM (SELECT next_try_time FROM clock WHERE shard IN (" +
		placeholders(len(shards)) + ") AND status = 'pending' AND next_try_time >= ? AND next_try_time < ? LIMIT ?) t GROUP BY b ORDER BY b"
	if err := s.db.SelectContext(ctx, &rows, q, args...); err != nil {
		return nil, fmt.Errorf("due histogram: %w", mapErr(err))
	}
	out := make([]int64, n)
	for _, r := range rows {
		if r.B >= 0 && r.B < n {
			out[r.B] = r.N
		}
	}
	return out, nil
}

// Failing groups the pending clocks that have failed at least one attempt
// and are due by `until` by application and last error, largest group
// first. A failing clock retries within the retry backoff's cap, so with
// until = now + that cap every failing clock is in the preloader's own
// index ranges, (shard, status, next_try_time) up to until: at most limit
// rows of them are read (examined is how many were; when it reaches limit
// the groups are a lower bound).
func (s *Store) Failing(ctx context.Context, until time.Time, limit int) (groups []alarm.FailureGroup, examined int, err error) {
	shards, args := s.everyShard()
	args = append(args, ms(until), limit)
	// Firing too: a failing clock is firing while it is retried (from the
	// claim, ring.claim_ahead before its try, to the outcome), and must not
	// drop off the list meanwhile. Its last_error is its previous attempt's.
	from := "FROM clock WHERE " + shards + " AND status IN ('pending', 'firing') AND next_try_time <= ? LIMIT ?"
	// How many rows the range holds, up to the limit: index only.
	if err := s.db.GetContext(ctx, &examined, "SELECT COUNT(*) FROM (SELECT 1 "+from+") t", args...); err != nil {
		return nil, 0, fmt.Errorf("failing clocks: %w", mapErr(err))
	}
	var rows []struct {
		Application string `db:"application"`
		LastError   string `db:"last_error"`
		N           int64  `db:"n"`
		MaxAttempts int    `db:"max_attempts"`
		Sample      string `db:"sample"`
		LastAt      int64  `db:"last_at"`
	}
	if err := s.db.SelectContext(ctx, &rows, `SELECT application, last_error, COUNT(*) AS n, MAX(attempts) AS max_attempts,
			MIN(business_id) AS sample, MAX(update_time) AS last_at
		FROM (SELECT application, status, claim_token, COALESCE(last_error, '') AS last_error, attempts, business_id, update_time `+from+`) t
		WHERE attempts > 0 AND (status = 'pending' AND `+notClaimed+` OR last_error <> '') GROUP BY application, last_error ORDER BY n DESC, application, last_error LIMIT 100`, args...); err != nil {
		return nil, 0, fmt.Errorf("failing clocks: %w", mapErr(err))
	}
	for _, r := range rows {
		groups = append(groups, alarm.FailureGroup{Application: r.Application, LastError: r.LastError, Count: r.N,
			MaxAttempts: r.MaxAttempts, Sample: r.Sample, LastAt: fromMS(r.LastAt)})
	}
	return groups, examined, nil
}

// SetInstanceStats records, next to the instance's heartbeat, the size of
// its in-memory heap of clocks and of its Go heap.
func (s *Store) SetInstanceStats(ctx context.Context, instanceID string, heapClocks, heapBytes int64) error {
	if _, err := s.db.ExecContext(ctx, "UPDATE clock_instance SET heap_clocks = ?, heap_bytes = ?, stats_at = "+dbNowMS+
		" WHERE instance_id = ?", heapClocks, heapBytes, instanceID); err != nil {
		return fmt.Errorf("instance stats: %w", mapErr(err))
	}
	return nil
}

// Instances reads every instance's heartbeat row, the shard leases and the
// database clock (expiry is judged by it).
func (s *Store) Instances(ctx context.Context) ([]alarm.Instance, []alarm.ShardLease, time.Time, error) {
	_, shards, now, err := s.Cluster(ctx)
	if err != nil {
		return nil, nil, time.Time{}, err
	}
	var rows []struct {
		ID         string `db:"instance_id"`
		HTTPAddr   string `db:"http_addr"`
		StartedAt  int64  `db:"started_at"`
		ExpiresAt  int64  `db:"expires_at"`
		HeapClocks int64  `db:"heap_clocks"`
		HeapBytes  int64  `db:"heap_bytes"`
		StatsAt    int64  `db:"stats_at"`
		Rings      bool   `db:"rings"`
	}
	if err := s.db.SelectContext(ctx, &rows, `SELECT instance_id, http_addr, started_at, expires_at, heap_clocks, heap_bytes, stats_at,
		  rings <> 0 AS rings FROM clock_instance ORDER BY instance_id`); err != nil {
		return nil, nil, time.Time{}, fmt.Errorf("instances: %w", mapErr(err))
	}
	inst := make([]alarm.Instance, len(rows))
	for i, r := range rows {
		inst[i] = alarm.Instance{ID: r.ID, HTTPAddr: r.HTTPAddr, StartedAt: fromMS(r.StartedAt), ExpiresAt: fromMS(r.ExpiresAt),
			HeapClocks: r.HeapClocks, HeapBytes: r.HeapBytes, Rings: r.Rings}
		if r.StatsAt > 0 {
			inst[i].StatsAt = fromMS(r.StatsAt)
		}
	}
	leases := make([]alarm.ShardLease, len(shards))
	for i, sh := range shards {
		leases[i] = alarm.ShardLease{Shard: sh.Shard, Owner: sh.Owner, Epoch: sh.Epoch, Until: fromMS(sh.LeaseUntil)}
	}
	return inst, leases, now, nil
}
