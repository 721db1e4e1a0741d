package main

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
)

// asynqPeer schedules every job with asynq.ProcessAt on Redis; a server
// with Concurrency workers runs them.
type asynqPeer struct {
	url       string
	opt       asynq.RedisConnOpt
	rdb       *redis.Client // for FLUSHDB
	client    *asynq.Client
	srv       *asynq.Server
	cfg       asynq.Config
	enqueuers int
	roundUp   bool // ProcessAt the due time rounded up to a whole second
}

func newAsynqPeer(ctx context.Context, url string, concurrency, enqueuers int, delayedCheck, taskCheck time.Duration, roundUp bool) (*asynqPeer, error) {
	opt, err := asynq.ParseRedisURI(url)
	if err != nil {
		return nil, err
	}
	ropt, err := redis.ParseURL(url)
	if err != nil {
		return nil, err
	}
	rdb := redis.NewClient(ropt)
	if err := rdb.Ping(ctx).Err(); err != nil {
		rdb.Close()
		return nil, fmt.Errorf("redis at %s: %w", url, err)
	}
	return &asynqPeer{
		url: url, opt: opt, rdb: rdb, client: asynq.NewClient(opt), enqueuers: enqueuers, roundUp: roundUp,
		cfg: asynq.Config{
			Concurrency:              concurrency,
			DelayedTaskCheckInterval: delayedCheck,
			TaskCheckInterval:        taskCheck, // 0: asynq's default, 1 s
			LogLevel:                 asynq.WarnLevel,
		},
	}, nil
}

func (a *asynqPeer) Name() string   { return "asynq" }
func (a *asynqPeer) Module() string { return "github.com/hibiken/asynq" }

func (a *asynqPeer) Settings() map[string]string {
	tc := "1s (default)"
	if a.cfg.TaskCheckInterval > 0 {
		tc = a.cfg.TaskCheckInterval.String()
	}
	at := "the due time (asynq keeps it in whole seconds: a job runs from the start of its due second)"
	if a.roundUp {
		at = "the due time rounded up to a whole second (never early)"
	}
	return map[string]string{
		"process_at":                  at,
		"redis":                       a.url,
		"concurrency":                 strconv.Itoa(a.cfg.Concurrency),
		"delayed_task_check_interval": a.cfg.DelayedTaskCheckInterval.String(),
		"task_check_interval":         tc,
		"enqueue":                     fmt.Sprintf("Client.Enqueue with ProcessAt, %d goroutines", a.enqueuers),
	}
}

// Reset flushes the Redis database asynq uses.
func (a *asynqPeer) Reset(ctx context.Context) error { return a.rdb.FlushDB(ctx).Err() }

func (a *asynqPeer) Start(_ context.Context, rec *recorder) error {
	a.srv = asynq.NewServer(a.opt, a.cfg)
	return a.srv.Start(asynq.HandlerFunc(func(_ context.Context, t *asynq.Task) error {
		now := time.Now()
		i, err := strconv.Atoi(string(t.Payload()))
		if err != nil {
			i = -1
		}
		rec.record(now, i)
		return nil
	}))
}

// Enqueue has no bulk form in asynq: each job is one Enqueue (one Redis
// script), sent from a.enqueuers goroutines that take the jobs in due order.
func (a *asynqPeer) Enqueue(ctx context.Context, p *plan) error {
	const chunk = 100
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var next atomic.Int64
	var wg sync.WaitGroup
	for range a.enqueuers {
		wg.Go(func() {
			for ctx.Err() == nil {
				lo := int(next.Add(chunk)) - chunk
				if lo >= p.n {
					return
				}
				for i := lo; i < min(lo+chunk, p.n); i++ {
					at := p.due(i)
					if s := at.Truncate(time.Second); a.roundUp && s.Before(at) {
						at = s.Add(time.Second)
					}
					t := asynq.NewTask("clock", []byte(strconv.Itoa(i)))
					if _, err := a.client.EnqueueContext(ctx, t, asynq.ProcessAt(at)); err != nil {
						cancel(fmt.Errorf("job %d: %w", i, err))
						return
					}
				}
			}
		})
	}
	wg.Wait()
	return context.Cause(ctx)
}

func (a *asynqPeer) Stop(context.Context) error {
	if a.srv != nil {
		a.srv.Shutdown()
		a.srv = nil
	}
	return nil
}

func (a *asynqPeer) Close() {
	a.client.Close()
	a.rdb.Close()
}
