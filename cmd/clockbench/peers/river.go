package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"
)

// clockArgs is a River job: the index of the job in its run.
type clockArgs struct {
	I int `json:"i"`
}

func (clockArgs) Kind() string { return "clock" }

type clockWorker struct {
	river.WorkerDefaults[clockArgs]
	rec *recorder
}

func (w *clockWorker) Work(_ context.Context, job *river.Job[clockArgs]) error {
	w.rec.record(time.Now(), job.Args.I)
	return nil
}

// riverPeer inserts every job with InsertOpts.ScheduledAt through
// InsertManyFast (COPY FROM); a client with MaxWorkers workers runs them.
type riverPeer struct {
	dsn                 string
	pool                *pgxpool.Pool
	inserter            *river.Client[pgx.Tx] // insert-only
	client              *river.Client[pgx.Tx] // runs the workers
	maxWorkers          int
	poll, cooldown      time.Duration
	batch, poolMaxConns int
}

// newRiverPeer creates the database of dsn when it is missing and runs the
// River migrations on it.
func newRiverPeer(ctx context.Context, dsn string, maxWorkers int, poll, cooldown time.Duration) (*riverPeer, error) {
	pcfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, err
	}
	if err := createDatabase(ctx, pcfg.ConnConfig.Copy()); err != nil {
		return nil, err
	}
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return nil, err
	}
	migrator, err := rivermigrate.New(riverpgxv5.New(pool), nil)
	if err != nil {
		pool.Close()
		return nil, err
	}
	if _, err := migrator.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		pool.Close()
		return nil, fmt.Errorf("river migrations: %w", err)
	}
	inserter, err := river.NewClient(riverpgxv5.New(pool), &river.Config{})
	if err != nil {
		pool.Close()
		return nil, err
	}
	return &riverPeer{dsn: dsn, pool: pool, inserter: inserter, maxWorkers: maxWorkers, poll: poll, cooldown: cooldown,
		batch: 5000, poolMaxConns: int(pcfg.MaxConns)}, nil
}

// createDatabase creates cc's database, connecting to the postgres database
// to do it, unless it exists.
func createDatabase(ctx context.Context, cc *pgx.ConnConfig) error {
	name := cc.Database
	cc.Database = "postgres"
	conn, err := pgx.ConnectConfig(ctx, cc)
	if err != nil {
		return fmt.Errorf("connect to PostgreSQL: %w", err)
	}
	defer conn.Close(ctx)
	var exists bool
	if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)", name).Scan(&exists); err != nil {
		return err
	}
	if !exists {
		if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
			return fmt.Errorf("create database %s: %w", name, err)
		}
	}
	return nil
}

func (r *riverPeer) Name() string   { return "river" }
func (r *riverPeer) Module() string { return "github.com/riverqueue/river" }

func (r *riverPeer) Settings() map[string]string {
	return map[string]string{
		"postgres":            r.dsn,
		"pool_max_conns":      strconv.Itoa(r.poolMaxConns),
		"max_workers":         strconv.Itoa(r.maxWorkers),
		"fetch_poll_interval": r.poll.String(),
		"fetch_cooldown":      r.cooldown.String(),
		"scheduler_interval":  "5s (River's, not configurable; it makes jobs due within the next 5s available)",
		"enqueue":             fmt.Sprintf("InsertManyFast with ScheduledAt, batches of %d", r.batch),
	}
}

// Reset empties River's job table, and its leader table so that a new
// client is elected at once.
func (r *riverPeer) Reset(ctx context.Context) error {
	_, err := r.pool.Exec(ctx, "TRUNCATE river_job, river_leader")
	return err
}

func (r *riverPeer) Start(ctx context.Context, rec *recorder) error {
	workers := river.NewWorkers()
	river.AddWorker(workers, &clockWorker{rec: rec})
	c, err := river.NewClient(riverpgxv5.New(r.pool), &river.Config{
		FetchPollInterval: r.poll,
		FetchCooldown:     r.cooldown,
		Queues:            map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: r.maxWorkers}},
		Workers:           workers,
		Logger:            slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
	})
	if err != nil {
		return err
	}
	r.client = c
	return c.Start(ctx)
}

func (r *riverPeer) Enqueue(ctx context.Context, p *plan) error {
	params := make([]river.InsertManyParams, 0, r.batch)
	for lo := 0; lo < p.n; lo += r.batch {
		params = params[:0]
		for i := lo; i < min(lo+r.batch, p.n); i++ {
			params = append(params, river.InsertManyParams{Args: clockArgs{I: i}, InsertOpts: &river.InsertOpts{ScheduledAt: p.due(i)}})
		}
		if _, err := r.inserter.InsertManyFast(ctx, params); err != nil {
			return fmt.Errorf("insert jobs %d..: %w", lo, err)
		}
	}
	return nil
}

func (r *riverPeer) Stop(ctx context.Context) error {
	if r.client == nil {
		return nil
	}
	err := r.client.Stop(ctx)
	r.client = nil
	return err
}

func (r *riverPeer) Close() { r.pool.Close() }
