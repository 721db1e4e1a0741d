package mysql

import (
	"context"
	"log/slog"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/clockd/clockd/internal/alarm"
	"github.com/clockd/clockd/internal/testenv"
)

func benchStore(b *testing.B) *Store {
	b.Helper()
	ctx := context.Background()
	db, err := Open(ctx, testenv.MySQLDSN(b), 32)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { db.Close() })
	if err := Migrate(ctx, db, slog.New(slog.DiscardHandler)); err != nil {
		b.Fatal(err)
	}
	n, err := SetupShards(ctx, db, 32)
	if err != nil {
		b.Fatal(err)
	}
	s := NewStore(db, StoreConfig{Shards: n})
	b.Cleanup(s.Close)
	return s
}

var benchSeq atomic.Int64

// BenchmarkCreateSingle measures group-committed single-clock creates from
// 64 concurrent callers (what 64 REST clients cause).
func BenchmarkCreateSingle(b *testing.B) {
	s := benchStore(b)
	at := time.Now().Add(24 * time.Hour).Truncate(time.Millisecond)
	b.SetParallelism(32) // x GOMAXPROCS(2) = 64 callers
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			id := strconv.FormatInt(benchSeq.Add(1), 10)
			r := s.Create(context.Background(), []alarm.NewClock{{Application: "bench", BusinessID: id,
				Payload: `{"order":123456,"note":"close if unpaid"}`, ContentType: "application/json", RingAt: at}}, time.Now())
			if r[0].Err != nil {
				b.Error(r[0].Err)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "clocks/s")
}

// BenchmarkCreateBatch500 measures creates of 500 clocks per call from 4
// concurrent callers (what the batch endpoint causes).
func BenchmarkCreateBatch500(b *testing.B) {
	s := benchStore(b)
	at := time.Now().Add(24 * time.Hour).Truncate(time.Millisecond)
	b.SetParallelism(2)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			batch := make([]alarm.NewClock, 500)
			for i := range batch {
				batch[i] = alarm.NewClock{Application: "bench", BusinessID: strconv.FormatInt(benchSeq.Add(1), 10),
					Payload: `{"order":123456,"note":"close if unpaid"}`, ContentType: "application/json", RingAt: at}
			}
			for _, r := range s.Create(context.Background(), batch, time.Now()) {
				if r.Err != nil {
					b.Error(r.Err)
					return
				}
			}
		}
	})
	b.ReportMetric(float64(b.N*500)/b.Elapsed().Seconds(), "clocks/s")
}
