package main

import (
	"context"
	"log/slog"
	"runtime/metrics"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/clockd/clockd/internal/alarm"
	"github.com/clockd/clockd/internal/auth"
	"github.com/clockd/clockd/internal/config"
	"github.com/clockd/clockd/internal/console"
	"github.com/clockd/clockd/internal/mysql"
	"github.com/clockd/clockd/internal/ring"
)

// newConsole builds the operator console of /ui/. It asks for an admin
// token when auth is on, and is open when it is off, as the API is.
func newConsole(cfg config.Config, svc *alarm.Service, store *mysql.Store, sessions console.SessionStore, shards int, authn *auth.Authenticator, reg *prometheus.Registry, log *slog.Logger) (*console.Console, error) {
	registerOpsMetrics(reg, shards, store.Ping)
	var a console.Authenticator // a nil interface, not a nil pointer in one
	if auth.Mode(cfg.AuthMode()) == auth.ModeTokens && authn != nil {
		a = authn
	}
	return console.New(console.Options{
		Service: svc, Store: store, Auth: a, Sessions: sessions, Gatherer: reg,
		AMQPURL: cfg.AMQP.URL, Exchange: cfg.AMQP.Exchange, InstanceID: cfg.Cluster.InstanceID, RetryMax: cfg.Ring.RetryMax,
		Logger: log.With("component", "console"),
	})
}

// registerOpsMetrics adds what the shipped alert rules need beyond the
// metrics of the packages: the shard count (to tell a shard without owner
// from sum(clockd_shards_owned)) and whether MySQL answers.
func registerOpsMetrics(reg prometheus.Registerer, shards int, ping func(context.Context) error) {
	reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "clockd_shards", Help: "Shards the clock table is split into (fixed by the schema)."},
			func() float64 { return float64(shards) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "clockd_mysql_up", Help: "1 when MySQL answered a ping at this scrape (2 s at most), else 0."},
			func() float64 {
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
				defer cancel()
				if ping(ctx) != nil {
					return 0
				}
				return 1
			}),
	)
}

// instanceStats writes, with each heartbeat, what the console shows of this
// instance on every instance: its in-memory heap of clocks and its Go heap.
func instanceStats(store *mysql.Store, id string, q *ring.Queue) func(ctx context.Context) error {
	sample := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	return func(ctx context.Context) error {
		metrics.Read(sample)
		var heap int64
		if sample[0].Value.Kind() == metrics.KindUint64 {
			heap = int64(sample[0].Value.Uint64())
		}
		return store.SetInstanceStats(ctx, id, int64(q.Len()), heap)
	}
}
