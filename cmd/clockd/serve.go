package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/clockd/clockd/internal/alarm"
	"github.com/clockd/clockd/internal/auth"
	"github.com/clockd/clockd/internal/clocksync"
	"github.com/clockd/clockd/internal/config"
	"github.com/clockd/clockd/internal/console"
	"github.com/clockd/clockd/internal/httpapi"
	"github.com/clockd/clockd/internal/janitor"
	"github.com/clockd/clockd/internal/mysql"
	"github.com/clockd/clockd/internal/preload"
	"github.com/clockd/clockd/internal/rabbit"
	"github.com/clockd/clockd/internal/ring"
)

// component is a goroutine with its own stop.
type component struct {
	name   string
	cancel context.CancelFunc
	done   chan struct{}
	err    error // why it stopped by itself; read once done is closed
}

func start(log *slog.Logger, name string, run func(ctx context.Context) error) *component {
	ctx, cancel := context.WithCancel(context.Background())
	c := &component{name: name, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(c.done)
		if err := run(ctx); err != nil && !errors.Is(err, context.Canceled) {
			c.err = err
			log.Error("component stopped", "component", name, "err", err)
		}
	}()
	return c
}

func (c *component) stop() {
	c.cancel()
	<-c.done
}

func serve(ctx context.Context, cfg config.Config, log *slog.Logger) error {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))

	// this process's own settings first (TLS files; http.addr was checked
	// with the configuration): a bad one is refused before the database is
	// created or migrated (found by review: a typo in a certificate path
	// migrated the shared schema, then stopped)
	srv, err := newServer(cfg, nil, log) // the handler is set below
	if err != nil {
		return err
	}
	db, err := mysql.Open(ctx, cfg.MySQL.DSN, cfg.MySQL.MaxOpenConns)
	if err != nil {
		return err
	}
	defer db.Close()
	if cfg.MySQL.MigrateOnStart {
		if err := mysql.MigrateDSN(ctx, cfg.MySQL.DSN, log); err != nil {
			return err
		}
	}
	if err := checkSchema(ctx, db, log); err != nil {
		return err
	}
	shards, err := mysql.SetupShards(ctx, db, cfg.Clock.Shards)
	if err != nil {
		return err
	}
	if shards != cfg.Clock.Shards {
		log.Warn("shard count is fixed by the schema; ignoring clock.shards", "schema", shards, "config", cfg.Clock.Shards)
	}
	previous, err := mysql.SetupExchange(ctx, db, cfg.AMQP.Exchange, cfg.Cluster.InstanceID)
	if err != nil {
		return err
	}
	if previous != "" {
		log.Warn("the clocks of this database ring to a new exchange from now on (every instance had stopped): bind each application's queue to it (clockctl bind)",
			"exchange", cfg.AMQP.Exchange, "previous", previous)
	}
	store := mysql.NewStore(db, mysql.StoreConfig{
		Shards: shards, RingExchange: cfg.AMQP.Exchange, Writers: cfg.MySQL.Writers, MaxBatchRows: cfg.MySQL.BatchRows,
		WriteTimeout: cfg.MySQL.RequestTimeout, ResolveTimeout: cfg.MySQL.ResolveTimeout,
		IdempotencyWindow: idempotencyWindow(cfg.Clock.IdempotencyWindow), NoHistory: cfg.History.Keep == 0,
		// a claim is made at most ring.claim_ahead (at most half the window)
		// before the clock is due; the window leaves room for instances
		// configured otherwise
		ClaimAhead: cfg.Preload.Window,
		Logger:     log, Registerer: reg,
	})
	defer store.Close()
	// the ring loop's, the API's and the janitor's time: MySQL's clock as
	// seen from here (an instance whose own clock ran ahead would ring
	// early, and move a clock to history before its idempotency window
	// ended: create_time and update_time are MySQL's)
	clk := clocksync.New(log, reg)
	var loop *ring.Loop // the janitor yields to it; the loop is made below
	jan := janitor.New(janitor.Config{
		InstanceID: cfg.Cluster.InstanceID, Retention: cfg.Janitor.Retention, RetentionFailed: cfg.Janitor.RetentionFailed,
		HistoryKeep: cfg.History.Keep, NoHistory: cfg.History.Keep == 0, PartitionsAhead: cfg.History.PartitionsAhead,
		Interval: cfg.Janitor.Interval, Batch: cfg.Janitor.Batch, Movers: cfg.Janitor.Movers, LeaseTTL: cfg.Cluster.LeaseTTL,
		// yield MySQL to the rings from 5 s before they are due (the loop is
		// set before the janitor starts)
		Busy:      func() bool { return loop != nil && loop.Busy(5*time.Second) },
		BusyShare: float64(cfg.Janitor.BusyPercent) / 100, Pause: cfg.Janitor.Pause,
		Now: clk.Now, Logger: log, Registerer: reg,
	}, store)

	pub, err := rabbit.New(rabbit.Config{
		URL: cfg.AMQP.URL, Exchange: cfg.AMQP.Exchange, ConfirmTimeout: cfg.AMQP.ConfirmTimeout,
		Logger: log, Registerer: reg,
	})
	if err != nil {
		return fmt.Errorf("amqp: %w", err)
	}
	stale, err := checkInstanceID(ctx, store, cfg.Cluster.InstanceID, cfg.Cluster.LeaseTTL, log)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", cfg.HTTP.Addr)
	if err != nil {
		return fmt.Errorf("listen %s: %w", cfg.HTTP.Addr, err)
	}
	// the instance id is this process's from its first heartbeat on
	started := clk.Now()
	if err := store.ClaimInstance(ctx, cfg.Cluster.InstanceID, ln.Addr().String(), started, cfg.Cluster.LeaseTTL, cfg.Preload.Window, stale); err != nil {
		ln.Close()
		if errors.Is(err, alarm.ErrInstanceTaken) {
			return twinError(cfg.Cluster.InstanceID, err)
		}
		return err
	}

	queue := ring.NewQueue()
	var feeder *preload.Manager
	var authn *auth.Authenticator // a token revoked elsewhere is forgotten here at once
	var quotas *auth.Quotas
	hints := rabbit.NewHints(rabbit.HintConfig{
		URL: cfg.AMQP.URL, Exchange: cfg.AMQP.Exchange, InstanceID: cfg.Cluster.InstanceID, Logger: log,
		OnHint: func(d alarm.Due) { feeder.Hinted(d) }, Registerer: reg,
		OnUndelivered: store.AskRescan,
		// (again) bound: what the others sent meanwhile went nowhere
		OnConnected: func() { feeder.RecheckAll(); authn.ForgetAll() },
		OnRevoked:   func(id int64) { authn.Forget(id) },
	})
	feeder = preload.New(preload.Config{
		InstanceID: cfg.Cluster.InstanceID, HTTPAddr: ln.Addr().String(), Shards: shards,
		Window: cfg.Preload.Window, Interval: cfg.Preload.Interval, Rescan: cfg.Preload.Rescan,
		Batch: cfg.Preload.Batch, HeapCap: cfg.Preload.HeapCap,
		LeaseTTL: cfg.Cluster.LeaseTTL, FiringTimeout: cfg.Ring.FiringTimeout,
		Forward: hints.Send, Logger: log, Registerer: reg,
		LeaseMargin: cfg.Ring.ClaimAheadMax + ring.DefaultMinLeaseLeft,
		Drain:       func(ctx context.Context, shards []int) error { return loop.Drain(ctx, shards) },
		// a ring in flight waits at most amqp.confirm_timeout for its
		// confirm, and its outcome is recorded at once after it
		DrainTimeout: max(cfg.Cluster.LeaseTTL/2, cfg.AMQP.ConfirmTimeout+2*time.Second),
		Held:         func() []int64 { return loop.Held() },
		Report:       instanceStats(store, cfg.Cluster.InstanceID, queue),
		CanRing:      pub.Ready,
		Now:          clk.Now,
		Started:      started,
	}, store, queue)
	loop = ring.New(ring.Config{
		ClaimAhead: cfg.Ring.ClaimAhead, ClaimAheadMax: cfg.Ring.ClaimAheadMax, ClaimBatch: cfg.Ring.ClaimBatch, MaxInFlight: cfg.Ring.MaxInFlight,
		Retry:       ring.Retry{Min: cfg.Ring.RetryMin, Max: cfg.Ring.RetryMax},
		ResultLabel: rabbit.ResultName,
		NotSent:     func(err error) bool { return errors.Is(err, rabbit.ErrNotSent) },
		Logger:      log, Registerer: reg,
		RecordGap: cfg.Ring.RecordGap,
		Clock:     clk,
	}, queue, store, publisher{pub}, feeder)

	svc := alarm.NewService(store, feeder, clk.Now, alarm.Limits{MaxPayloadBytes: cfg.Clock.MaxPayloadBytes}, cfg.MySQL.RequestTimeout)
	authn, quotas = newAuth(cfg, db, log, func(ctx context.Context, id int64) {
		// the live instances acknowledge that they forgot the token before
		// the revocation is answered (1 s at most)
		peers, err := mysql.LiveInstances(ctx, db)
		if err != nil {
			log.Warn("token revoked: the live instances could not be read, so the revocation is answered without their acknowledgement",
				"token", id, "err", err)
		}
		hints.Revoke(ctx, id, peers)
	})
	con, err := newConsole(cfg, svc, store, mysql.NewAuthStore(db).WithResolveTimeout(cfg.MySQL.ResolveTimeout), shards, authn, reg, log)
	if err != nil {
		return err
	}
	handler := httpapi.New(httpapi.Options{
		Service: svc, Logger: log, Registerer: reg, Gatherer: reg,
		MaxBodyBytes: int64(cfg.HTTP.MaxBodyBytes),
		Auth:         authn, Quotas: quotas,
		MaxListBytes: cfg.HTTP.MaxListBytes, MaxConcurrent: cfg.HTTP.MaxConcurrentRequests,
		DBTimeout: cfg.MySQL.RequestTimeout,
		Ready: []httpapi.Check{
			{Name: "mysql", Check: store.Ping},
			{Name: "rabbitmq", Check: func(context.Context) error { return pub.Ready() }},
			{Name: "shards", Check: func(context.Context) error { return feeder.Ready() }},
		},
		Cluster: func(ctx context.Context) (any, error) { return clusterView(ctx, store) },
		// the console under /ui/, within the same cap as the API
		Console: con, ConsolePrefix: console.Prefix, ConsoleMaxBody: console.MaxBodyBytes,
	})

	if cfg.HTTP.PprofAddr != "" {
		stopPprof, err := servePprof(cfg.HTTP.PprofAddr, log)
		if err != nil {
			return err
		}
		defer stopPprof()
	}
	// the first readings of MySQL's clock before anything rings (a few:
	// together they bound the offset tighter than one slow one)
	rctx, rcancel := context.WithTimeout(ctx, 2*time.Second)
	for range 3 {
		_ = clk.Read(rctx, store.DBTime)
	}
	rcancel()
	clockC := start(log, "clocksync", func(ctx context.Context) error { return clk.Run(ctx, store.DBTime, clockSyncEvery) })
	publisherC := start(log, "publisher", pub.Run)
	hintsC := start(log, "hints", hints.Run)
	feederC := start(log, "preloader", feeder.Run)
	loopC := start(log, "ring", loop.Run)
	janitorC := start(log, "janitor", jan.Run)
	consoleC := start(log, "console", con.Run)

	srv.Handler = handler
	srv.RegisterOnShutdown(con.Close)
	https := srv.TLSConfig != nil
	errc := make(chan error, 1)
	go func() { errc <- serveOn(srv, ln) }()
	log.Info("clockd serving", "addr", ln.Addr().String(), "https", https, "auth", cfg.AuthMode(),
		"instance", cfg.Cluster.InstanceID, "shards", shards)

	var serveErr error
	select {
	case err := <-errc:
		serveErr = fmt.Errorf("http server: %w", err)
	case <-feederC.done:
		// it stops by itself only when this process must not run on: its
		// instance id taken by another process, or the cluster ringing to
		// another exchange
		serveErr = feederC.err
		if errors.Is(serveErr, alarm.ErrInstanceTaken) {
			jan.Abandon() // its lease, under the id, is the other process's too
			serveErr = twinError(cfg.Cluster.InstanceID, serveErr)
		}
	case <-ctx.Done():
	}
	log.Info("shutting down")
	// Producers first: no new requests, then no new claims (armed clocks go
	// back to pending, rings in flight are confirmed and recorded), then the
	// shards are handed over, then the broker connection and MySQL close.
	sctx, cancel := context.WithTimeout(context.Background(), cfg.HTTP.ShutdownTimeout)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil && !errors.Is(err, http.ErrServerClosed) {
		log.Warn("http shutdown", "err", err)
	}
	consoleC.stop()
	janitorC.stop() // hands the janitor lease over at once
	pub.Stopping()  // rings held by a broker's alarm end: the loop waits for them
	loopC.stop()
	feederC.stop()
	hintsC.stop()
	publisherC.stop()
	clockC.stop()
	log.Info("stopped")
	return serveErr
}

// clockSyncEvery is how often MySQL's clock is read (clocksync).
const clockSyncEvery = time.Second

// publisher adapts the RabbitMQ publisher to the ring loop.
type publisher struct{ p *rabbit.Publisher }

func (p publisher) Ready() error { return p.p.Ready() }

func (p publisher) Publish(ctx context.Context, rings []ring.Ring) []ring.Result {
	msgs := make([]rabbit.Message, len(rings))
	for i, r := range rings {
		c := r.Clock
		msgs[i] = rabbit.Message{
			ID: c.ID, Application: c.Application, BusinessID: c.BusinessID, RingAt: c.RingAt,
			Attempt: r.Attempt, ContentType: c.ContentType, Body: []byte(c.Payload),
		}
		if c.Recurring() {
			msgs[i].Occurrence = c.RingAt // the current occurrence's time
		}
	}
	errs, at := p.p.PublishBatchTimed(ctx, msgs)
	out := make([]ring.Result, len(errs))
	for i, err := range errs {
		out[i] = ring.Result{Err: err, At: at[i]}
	}
	return out
}

// idempotencyWindow maps clock.idempotency_window to the store's: 0 there
// means none, which the store spells negative.
func idempotencyWindow(d time.Duration) time.Duration {
	if d == 0 {
		return -1
	}
	return d
}

// clusterView is GET /v1/cluster: who holds which shard, until when.
func clusterView(ctx context.Context, store *mysql.Store) (any, error) {
	inst, shards, now, err := store.Cluster(ctx)
	if err != nil {
		return nil, err
	}
	byOwner := map[string][]httpapi.ClusterShard{}
	var free []int
	for _, s := range shards {
		if s.Owner == "" || s.LeaseUntil <= now.UnixMilli() {
			free = append(free, s.Shard)
			continue
		}
		byOwner[s.Owner] = append(byOwner[s.Owner], httpapi.ClusterShard{Shard: s.Shard, Epoch: s.Epoch, LeaseUntil: fmtMS(s.LeaseUntil)})
	}
	out := httpapi.ClusterView{Now: now.Format(httpapi.TimeFormat), ShardCount: len(shards),
		Instances: []httpapi.ClusterInstance{}, Unowned: free}
	if out.Unowned == nil {
		out.Unowned = []int{}
	}
	for _, i := range inst {
		ss := byOwner[i.InstanceID]
		if ss == nil {
			ss = []httpapi.ClusterShard{}
		}
		out.Instances = append(out.Instances, httpapi.ClusterInstance{
			InstanceID: i.InstanceID, HTTPAddr: i.HTTPAddr, StartedAt: fmtMS(i.StartedAt), ExpiresAt: fmtMS(i.ExpiresAt),
			Live: i.ExpiresAt > now.UnixMilli(), Rings: i.Rings, Shards: ss,
		})
	}
	return out, nil
}

func fmtMS(v int64) string { return time.UnixMilli(v).UTC().Format(httpapi.TimeFormat) }

// servePprof serves Go's profiles on an address of their own.
func servePprof(addr string, log *slog.Logger) (func(), error) {
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen pprof %s: %w", addr, err)
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	log.Info("pprof serving", "addr", ln.Addr().String())
	return func() { _ = srv.Close() }, nil
}

// checkSchema compares the database's schema version with this binary's.
// Migrations pending (mysql.migrate_on_start off and `clockd migrate` not
// run): clockd would answer creates and ring nothing, so it refuses to
// start. A newer schema (this binary rolled back after an upgrade): it
// starts, since a rollback may be what the operator needs, but says so.
func checkSchema(ctx context.Context, db *sqlx.DB, log *slog.Logger) error {
	have, want, err := mysql.SchemaVersions(ctx, db)
	switch {
	case err != nil:
		return err
	case have < want:
		return fmt.Errorf("the schema is at version %d and this clockd needs version %d: run `clockd migrate` "+
			"(mysql.migrate_on_start is off)", have, want)
	case have > want:
		log.Error("the schema is newer than this clockd: it was migrated by a later version, and this one may not work with it "+
			"(see the README on rolling back)", "schema_version", have, "binary_schema_version", want)
	}
	return nil
}
