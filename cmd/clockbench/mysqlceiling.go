package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/jmoiron/sqlx"

	"github.com/clockd/clockd/internal/alarm"
	"github.com/clockd/clockd/internal/benchkit"
	clockmysql "github.com/clockd/clockd/internal/mysql"
)

// MySQLCeilingResult is what the MySQL server of the run sustains for the
// statement shapes clockd's hot paths use, on a table shaped like clockd's
// `clock`, in a scratch database: the figures clockd's creates and rings
// are judged against.
type MySQLCeilingResult struct {
	Server       string      `json:"server"`
	Version      string      `json:"version"`
	Database     string      `json:"scratch_database"`
	WarmupS      float64     `json:"warmup_s"`
	DurationS    float64     `json:"duration_s"`
	PayloadBytes int         `json:"payload_bytes"`
	InsertOne    *CeilingRun `json:"insert_one_row,omitempty"`
	InsertBatch  *CeilingRun `json:"insert_multi_row,omitempty"`
	Update       *CeilingRun `json:"update_ids,omitempty"`
	Notes        []string    `json:"notes,omitempty"`
	Dropped      bool        `json:"scratch_database_dropped"`
}

// CeilingRun is one statement shape run by several clients for a fixed
// time after a warm-up.
type CeilingRun struct {
	What         string   `json:"what"`
	Clients      int      `json:"clients"`
	RowsPerStmt  int      `json:"rows_per_statement"`
	Statements   int      `json:"statements"`
	Rows         int      `json:"rows"`
	MeasuredS    float64  `json:"measured_s"`
	Rate         float64  `json:"rows_per_s"`
	Latency      Summary  `json:"statement_latency"`
	Errors       int      `json:"errors"`
	ErrorSamples []string `json:"error_samples,omitempty"`
}

// ceilingInsertCols is the column list of clockd's create INSERT.
const ceilingInsertCols = `INSERT INTO clock (application, business_id, shard, status, payload, content_type, target_ring_at,
latest_ring_at, max_attempts, attempts, next_try_time, create_time, update_time) VALUES `

// ceilingShards is clockd's default shard count (config clock.shards).
const ceilingShards = 32

// ceilingDB returns the DSN of the scratch database on the server of dsn,
// with the parameters clockd itself uses (one round trip per statement).
func ceilingDB(dsn, name string) (*mysql.Config, error) {
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		return nil, fmt.Errorf("-mysql: %w", err)
	}
	cfg.DBName = name
	cfg, err = clockmysql.PrepareDSN(cfg.FormatDSN())
	if err != nil {
		return nil, fmt.Errorf("-mysql: %w", err)
	}
	return cfg, nil
}

// runMySQLCeilings measures, in a scratch database it creates and drops:
// one-row autocommit INSERTs from -ceiling-insert-clients clients, INSERTs
// of -batch-size rows from -ceiling-batch-clients clients, and UPDATEs of
// -batch-size ids by primary key (status pending <-> firing, as a claim
// does) from the same number of clients. Rows look like the create
// scenarios' clocks.
func runMySQLCeilings(ctx context.Context, cfg *config, runID string, logf func(string, ...any)) (*MySQLCeilingResult, error) {
	name := "clockbench_ceiling_" + runID
	dbCfg, err := ceilingDB(cfg.mysqlDSN, name)
	if err != nil {
		return nil, err
	}
	res := &MySQLCeilingResult{Server: dbCfg.Addr, Database: name, WarmupS: cfg.ceilingWarmup.Seconds(), DurationS: cfg.ceilingDuration.Seconds()}

	server := dbCfg.Clone()
	server.DBName = ""
	admin, err := sql.Open("mysql", server.FormatDSN())
	if err != nil {
		return nil, fmt.Errorf("open mysql %s: %w", server.Addr, err)
	}
	defer admin.Close()
	if err := admin.QueryRowContext(ctx, "SELECT VERSION()").Scan(&res.Version); err != nil {
		return nil, fmt.Errorf("mysql at %s: %w", server.Addr, err)
	}
	if _, err := admin.ExecContext(ctx, "CREATE DATABASE `"+name+"` CHARACTER SET utf8mb4 COLLATE utf8mb4_bin"); err != nil {
		return nil, fmt.Errorf("create scratch database %s: %w", name, err)
	}
	defer func() {
		// a fresh context: the database goes even when the run was interrupted
		dctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := admin.ExecContext(dctx, "DROP DATABASE IF EXISTS `"+name+"`"); err != nil {
			logf("mysql: drop scratch database %s: %v", name, err)
			res.Notes = append(res.Notes, "could not drop the scratch database: "+err.Error())
			return
		}
		res.Dropped = true
	}()

	conns := max(cfg.insertClients, cfg.ceilingBatchClients)
	connector, err := mysql.NewConnector(dbCfg)
	if err != nil {
		return nil, err
	}
	db := sql.OpenDB(connector)
	defer db.Close()
	db.SetMaxOpenConns(conns)
	db.SetMaxIdleConns(conns)
	// clockd's own schema, from its migrations: the scratch table is the
	// clock table as it is, indexes included, and cannot drift from it
	if err := clockmysql.Migrate(ctx, sqlx.NewDb(db, "mysql"), slog.New(slog.DiscardHandler)); err != nil {
		return nil, fmt.Errorf("create scratch table: %w", err)
	}

	app := "bench-" + runID + "-ceiling"
	payload := string(makePayload(app, cfg.payloadSize))
	res.PayloadBytes = len(payload)
	base := time.Now().Add(24 * time.Hour).Truncate(time.Millisecond)
	rows := func(b *strings.Builder, args []any, prefix string, w, seq, n int) []any {
		now := time.Now().UnixMilli()
		for i := range n {
			if i > 0 {
				b.WriteByte(',')
			}
			b.WriteString("(?,?,?,'pending',?,'application/json',?,NULL,1,0,?,?,?)")
			bid := prefix + strconv.Itoa(w) + "-" + strconv.Itoa(seq+i)
			at := spreadHour(base, w, seq+i).UnixMilli()
			args = append(args, app, bid, shardOf(app, bid), payload, at, at, now, now)
		}
		return args
	}
	insert := func(prefix string, size int) func(context.Context, int, int) (int, error) {
		return func(ctx context.Context, w, seq int) (int, error) {
			var b strings.Builder
			b.WriteString(ceilingInsertCols)
			args := rows(&b, make([]any, 0, 8*size), prefix, w, seq*size, size)
			r, err := db.ExecContext(ctx, b.String(), args...)
			if err != nil {
				return 0, err
			}
			n, err := r.RowsAffected()
			return int(n), err
		}
	}

	// one-row autocommit INSERTs
	res.InsertOne, err = measureCeiling(ctx, "one-row autocommit INSERT", cfg.insertClients, 1, cfg.ceilingWarmup, cfg.ceilingDuration, insert("o", 1))
	if err != nil {
		return nil, fmt.Errorf("one-row INSERT ceiling: %w", err)
	}
	logf("mysql: one-row autocommit INSERT, %d clients: %.0f rows/s (statement p50 %.2f p99 %.2f ms)",
		cfg.insertClients, res.InsertOne.Rate, res.InsertOne.Latency.P50, res.InsertOne.Latency.P99)

	// multi-row INSERTs
	bs := cfg.batchSize
	res.InsertBatch, err = measureCeiling(ctx, strconv.Itoa(bs)+"-row INSERT", cfg.ceilingBatchClients, bs, cfg.ceilingWarmup, cfg.ceilingDuration, insert("m", bs))
	if err != nil {
		return nil, fmt.Errorf("%d-row INSERT ceiling: %w", bs, err)
	}
	logf("mysql: %d-row INSERT, %d clients: %.0f rows/s (statement p50 %.2f p99 %.2f ms)",
		bs, cfg.ceilingBatchClients, res.InsertBatch.Rate, res.InsertBatch.Latency.P50, res.InsertBatch.Latency.P99)

	// UPDATEs of bs ids: every client owns its own batches of ids and turns
	// them pending -> firing on one pass over them, back on the next, so
	// that every statement changes all its rows and the status index.
	need := 2 * bs * cfg.ceilingBatchClients
	var count int
	if err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM clock").Scan(&count); err != nil {
		return nil, err
	}
	for seq := 0; count < need; seq++ { // tiny runs: enough rows for every client
		if _, err := insert("u", bs)(ctx, 0, seq); err != nil {
			return nil, fmt.Errorf("fill the table for the UPDATE ceiling: %w", err)
		}
		count += bs
	}
	ids, err := selectIDs(ctx, db, cfg.updateRows)
	if err != nil {
		return nil, err
	}
	batches := idBatches(ids, bs, cfg.ceilingBatchClients)
	for _, mine := range batches {
		if len(mine) == 0 {
			return nil, fmt.Errorf("UPDATE ceiling: %d rows are too few for %d clients of %d ids (raise -ceiling-update-rows)", len(ids), cfg.ceilingBatchClients, bs)
		}
	}
	token := time.Now().UnixNano()
	update := func(ctx context.Context, w, seq int) (int, error) {
		mine := batches[w]
		from, to := updateDirection(seq, len(mine))
		batch := mine[seq%len(mine)]
		var b strings.Builder
		b.WriteString("UPDATE clock SET status = ?, claim_token = ?, update_time = ? WHERE status = ? AND id IN (")
		args := make([]any, 0, 4+len(batch))
		args = append(args, to, token, time.Now().UnixMilli(), from)
		for i, id := range batch {
			if i > 0 {
				b.WriteByte(',')
			}
			b.WriteByte('?')
			args = append(args, id)
		}
		b.WriteByte(')')
		r, err := db.ExecContext(ctx, b.String(), args...)
		if err != nil {
			return 0, err
		}
		n, err := r.RowsAffected()
		return int(n), err
	}
	res.Update, err = measureCeiling(ctx, strconv.Itoa(bs)+"-id UPDATE", cfg.ceilingBatchClients, bs, cfg.ceilingWarmup, cfg.ceilingDuration, update)
	if err != nil {
		return nil, fmt.Errorf("%d-id UPDATE ceiling: %w", bs, err)
	}
	logf("mysql: %d-id UPDATE, %d clients, %d rows in the table: %.0f rows/s (statement p50 %.2f p99 %.2f ms)",
		bs, cfg.ceilingBatchClients, len(ids), res.Update.Rate, res.Update.Latency.P50, res.Update.Latency.P99)
	if res.Update.Rows < res.Update.Statements*bs {
		res.Notes = append(res.Notes, fmt.Sprintf("UPDATE ceiling: %d of %d rows changed: the id batches were not as expected", res.Update.Rows, res.Update.Statements*bs))
	}
	res.Notes = append(res.Notes, fmt.Sprintf("scratch table shaped like clockd's clock table; %s rows in it for the UPDATE ceiling, %d-byte payloads",
		fmtInt(len(ids)), res.PayloadBytes))
	return res, nil
}

// shardOf is clockd's shard function (alarm.ShardOf) with its default
// shard count; only the spread of the values matters here.
func shardOf(app, bid string) int { return alarm.ShardOf(app, bid, ceilingShards) }

func selectIDs(ctx context.Context, db *sql.DB, limit int) ([]int64, error) {
	rs, err := db.QueryContext(ctx, "SELECT id FROM clock ORDER BY id LIMIT ?", limit)
	if err != nil {
		return nil, fmt.Errorf("read ids: %w", err)
	}
	defer rs.Close()
	var ids []int64
	for rs.Next() {
		var id int64
		if err := rs.Scan(&id); err != nil {
			return nil, err
		}
		ids = append(ids, id)
	}
	return ids, rs.Err()
}

// idBatches cuts ids into batches of size (the last short batch dropped)
// and deals them round-robin to clients, so that no two clients ever
// update the same row. Every client gets at least one batch when there
// are enough ids (len(ids) >= size*clients).
func idBatches(ids []int64, size, clients int) [][][]int64 {
	out := make([][][]int64, clients)
	for k := 0; (k+1)*size <= len(ids); k++ {
		out[k%clients] = append(out[k%clients], ids[k*size:(k+1)*size])
	}
	return out
}

// updateDirection returns the status change of a client's seq-th UPDATE
// when it cycles over its batches: its first pass turns pending rows
// firing, the next pass turns them back, and so on.
func updateDirection(seq, batches int) (from, to string) {
	if (seq/batches)%2 == 0 {
		return "pending", "firing"
	}
	return "firing", "pending"
}

// measureCeiling runs op from clients goroutines for warmup+dur. op
// returns the rows its statement wrote. Only statements that finish inside
// the measured window (after the warm-up) count; no statement starts
// after it. It fails when no statement succeeded, or the context ended.
func measureCeiling(ctx context.Context, what string, clients, rowsPerStmt int, warmup, dur time.Duration,
	op func(ctx context.Context, worker, seq int) (int, error)) (*CeilingRun, error) {
	start := time.Now()
	t0, t1 := start.Add(warmup), start.Add(warmup+dur)
	var rows, stmts atomic.Int64
	var errs errCounter
	lats := make([][]time.Duration, clients)
	var wg sync.WaitGroup
	for w := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for seq := 0; ctx.Err() == nil; seq++ {
				s := time.Now()
				if !s.Before(t1) {
					return
				}
				n, err := op(ctx, w, seq)
				e := time.Now()
				if err != nil {
					if ctx.Err() == nil {
						errs.add(errClass(err), err.Error(), 1)
					}
					continue
				}
				if !e.Before(t0) && !e.After(t1) {
					rows.Add(int64(n))
					stmts.Add(1)
					lats[w] = append(lats[w], e.Sub(s))
				}
			}
		}()
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	r := &CeilingRun{
		What: what, Clients: clients, RowsPerStmt: rowsPerStmt,
		Statements: int(stmts.Load()), Rows: int(rows.Load()), MeasuredS: dur.Seconds(),
		Rate: rate(int(rows.Load()), dur), Latency: benchkit.Summarize(slices.Concat(lats...)),
		Errors: errs.total, ErrorSamples: errs.samples,
	}
	if r.Statements == 0 {
		if len(errs.samples) > 0 {
			return r, fmt.Errorf("no statement succeeded: %s", errs.samples[0])
		}
		return r, errors.New("no statement finished inside the measured window")
	}
	return r, nil
}

// errClass names a MySQL error by its number.
func errClass(err error) string {
	var me *mysql.MySQLError
	if errors.As(err, &me) {
		return "mysql " + strconv.Itoa(int(me.Number))
	}
	return errKind(err)
}
