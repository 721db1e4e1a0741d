package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/clockd/clockd/internal/alarm"
	"github.com/clockd/clockd/internal/config"
	"github.com/clockd/clockd/internal/httpapi"
	"github.com/clockd/clockd/internal/mysql"
)

func serve(ctx context.Context, cfg config.Config, log *slog.Logger) error {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))

	db, err := mysql.Open(ctx, cfg.MySQL.DSN, cfg.MySQL.MaxOpenConns)
	if err != nil {
		return err
	}
	defer db.Close()
	if cfg.MySQL.MigrateOnStart {
		if err := mysql.Migrate(ctx, db, log); err != nil {
			return err
		}
	}
	shards, err := mysql.SetupShards(ctx, db, cfg.Clock.Shards)
	if err != nil {
		return err
	}
	if shards != cfg.Clock.Shards {
		log.Warn("shard count is fixed by the schema; ignoring clock.shards", "schema", shards, "config", cfg.Clock.Shards)
	}
	store := mysql.NewStore(db, mysql.StoreConfig{
		Shards: shards, Writers: cfg.MySQL.Writers, MaxBatchRows: cfg.MySQL.BatchRows, Logger: log, Registerer: reg,
	})
	defer store.Close()

	svc := alarm.NewService(store, nil, time.Now, alarm.Limits{MaxPayloadBytes: cfg.Clock.MaxPayloadBytes})
	handler := httpapi.New(httpapi.Options{
		Service: svc, Logger: log, Registerer: reg, Gatherer: reg,
		MaxBodyBytes: int64(cfg.HTTP.MaxBodyBytes),
		Ready:        []httpapi.Check{{Name: "mysql", Check: store.Ping}},
	})

	ln, err := net.Listen("tcp", cfg.HTTP.Addr)
	if err != nil {
		return fmt.Errorf("listen %s: %w", cfg.HTTP.Addr, err)
	}
	srv := &http.Server{Handler: handler, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	log.Info("clockd serving", "addr", ln.Addr().String(), "instance", cfg.Cluster.InstanceID, "shards", shards)

	select {
	case err := <-errc:
		return fmt.Errorf("http server: %w", err)
	case <-ctx.Done():
	}
	log.Info("shutting down")
	sctx, cancel := context.WithTimeout(context.Background(), cfg.HTTP.ShutdownTimeout)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil && !errors.Is(err, http.ErrServerClosed) {
		log.Warn("http shutdown", "err", err)
	}
	return nil
}
