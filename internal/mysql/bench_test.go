package mysql

import (
	"context"
	"log/slog"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
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
	// as in a cluster of this version: clocks are written with room for
	// their claim (claim_token 0)
	if _, err := s.Heartbeat(ctx, "bench", "", time.Now(), time.Hour, true, 10*time.Second); err != nil {
		b.Fatal(err)
	}
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

// benchClaimed creates n clocks due now (recurring every minute when
// recurring) in one shard and claims them with a new token.
func benchClaimed(b *testing.B, s *Store, n int, recurring bool) ([]alarm.Clock, int64) {
	b.Helper()
	ctx := context.Background()
	now := time.Now()
	every := time.Minute
	batch := make([]alarm.NewClock, n)
	for i := range batch {
		batch[i] = alarm.NewClock{Application: "bench", BusinessID: strconv.FormatInt(benchSeq.Add(1), 10),
			Payload: `{"order":123456,"note":"close if unpaid"}`, ContentType: "application/json", RingAt: now}
		if recurring {
			pl := `{"order":123456,"note":"close if unpaid"}`
			in := alarm.CreateInput{Application: "bench", BusinessID: batch[i].BusinessID, Payload: &pl,
				Schedule: &alarm.ScheduleInput{Every: &every}}
			nc, err := in.Validate(now.Add(-time.Minute), alarm.Limits{})
			if err != nil {
				b.Fatal(err)
			}
			batch[i] = nc
		}
	}
	ids := make([]int64, 0, n)
	for _, r := range s.Create(ctx, batch, now) {
		if r.Err != nil {
			b.Fatal(r.Err)
		}
		ids = append(ids, r.Clock.ID)
	}
	leases, err := s.AcquireLeases(ctx, "bench", s.cfg.Shards, time.Hour)
	if err != nil {
		b.Fatal(err)
	}
	tok := benchSeq.Add(1)
	cs, err := s.Claim(ctx, "bench", leases, ids, tok, now.Add(2*time.Minute), now)
	if err != nil || len(cs) != n {
		b.Fatalf("claim: %d of %d, %v", len(cs), n, err)
	}
	return cs, tok
}

// BenchmarkAdvance500 measures the outcome write of 500 recurring clocks
// (history row and move to the next occurrence, one transaction), and
// BenchmarkMarkRung500 that of 500 one-shot clocks, for comparison: the
// ring path's two kinds of outcome writes.
func BenchmarkAdvance500(b *testing.B) { benchAdvance(b, false) }

// BenchmarkAdvance500NoHistory is BenchmarkAdvance500 with history.keep 0:
// the move to the next occurrence alone.
func BenchmarkAdvance500NoHistory(b *testing.B) { benchAdvance(b, true) }

func benchAdvance(b *testing.B, noHistory bool) {
	s := benchStore(b)
	s.cfg.NoHistory = noHistory
	ctx := context.Background()
	var total time.Duration
	for range b.N {
		cs, tok := benchClaimed(b, s, 500, true)
		at := time.Now()
		advs := make([]alarm.Advance, len(cs))
		for i, c := range cs {
			advs[i] = alarm.AdvanceOf(c, alarm.StatusRung, at, at, "")
		}
		t0 := time.Now()
		if err := s.Advance(ctx, advs, []int64{tok}, at); err != nil {
			b.Fatal(err)
		}
		total += time.Since(t0)
	}
	b.ReportMetric(float64(total.Microseconds())/float64(b.N*500), "µs/clock")
}

// BenchmarkClaim500 measures claims of 500 clocks due now, created
// together (a hot second), by wall time and, when the MySQL server runs on
// this machine, by the server's CPU: a claim that grows its records costs
// the server more than its wall time shows (issue 15, migration 00012).
func BenchmarkClaim500(b *testing.B) {
	s := benchStore(b)
	ctx := context.Background()
	leases, err := s.AcquireLeases(ctx, "bench", s.cfg.Shards, time.Hour)
	if err != nil {
		b.Fatal(err)
	}
	var wall, server, self time.Duration
	for range b.N {
		now := time.Now()
		batch := make([]alarm.NewClock, 500)
		for i := range batch {
			batch[i] = alarm.NewClock{Application: "bench", BusinessID: strconv.FormatInt(benchSeq.Add(1), 10),
				Payload: `{"order":123456,"note":"close if unpaid"}`, ContentType: "application/json", RingAt: now}
		}
		ids := make([]int64, 0, len(batch))
		for _, r := range s.Create(ctx, batch, now) {
			if r.Err != nil {
				b.Fatal(r.Err)
			}
			ids = append(ids, r.Clock.ID)
		}
		c0, s0, t0 := serverCPU(), selfCPU(), time.Now()
		cs, err := s.Claim(ctx, "bench", leases, ids, benchSeq.Add(1), now.Add(time.Minute), now)
		if err != nil || len(cs) != len(ids) {
			b.Fatalf("claimed %d of %d: %v", len(cs), len(ids), err)
		}
		wall += time.Since(t0)
		self += selfCPU() - s0
		server += serverCPU() - c0
	}
	b.ReportMetric(float64(wall.Microseconds())/float64(b.N*500), "µs/clock")
	b.ReportMetric(float64(self.Nanoseconds())/1e3/float64(b.N*500), "self-cpu-µs/clock")
	if serverCPU() > 0 {
		b.ReportMetric(float64(server.Microseconds())/float64(b.N*500), "server-cpu-µs/clock")
	}
}

// selfCPU is the CPU time this process has used (user and system, all
// threads): what clockd spends on a statement besides the server's.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// serverCPU is the CPU time the local MariaDB or MySQL server has used
// (all its threads, in 10 ms ticks), or 0 when no such process can be read.
func serverCPU() time.Duration {
	pid := serverPID()
	if pid == "" {
		return 0
	}
	st, err := os.ReadFile("/proc/" + pid + "/stat")
	if err != nil {
		return 0
	}
	// the fields after the command name; utime and stime are the 12th and 13th
	f := strings.Fields(string(st[strings.LastIndexByte(string(st), ')')+2:]))
	if len(f) < 13 {
		return 0
	}
	u, _ := strconv.ParseInt(f[11], 10, 64)
	k, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(u+k) * 10 * time.Millisecond
}

// serverPID is the pid of the local MariaDB or MySQL server, looked up
// once; "" when there is none.
var serverPID = sync.OnceValue(func() string {
	for _, name := range []string{"mariadbd", "mysqld"} {
		if out, err := exec.Command("pidof", "-s", name).Output(); err == nil {
			return strings.TrimSpace(string(out))
		}
	}
	return ""
})

func BenchmarkMarkRung500(b *testing.B) {
	benchOutcome(b, func(ctx context.Context, s *Store, cs []alarm.Clock, tok int64, at time.Time) error {
		rungs := make([]alarm.Rung, len(cs))
		for i, c := range cs {
			rungs[i] = alarm.Rung{ID: c.ID, At: at.Add(time.Duration(i/100) * time.Millisecond)} // 5 confirm times
		}
		return s.MarkRung(ctx, rungs, []int64{tok})
	})
}

// BenchmarkMarkRung500Times is a rung mark whose 500 clocks each have their
// own confirm time, in an order other than their ids' (at half the broker
// ceiling, half the rings are marked in such batches: more than 8 times).
func BenchmarkMarkRung500Times(b *testing.B) {
	benchOutcome(b, func(ctx context.Context, s *Store, cs []alarm.Clock, tok int64, at time.Time) error {
		rungs := make([]alarm.Rung, len(cs))
		for i, c := range cs {
			rungs[i] = alarm.Rung{ID: c.ID, At: at.Add(time.Duration((i*7919)%500) * time.Millisecond)}
		}
		return s.MarkRung(ctx, rungs, []int64{tok})
	})
}

// BenchmarkFail500 measures the outcome write of 500 failed attempts (an
// application whose queue is not bound fails every ring), each with its
// own next try and error.
func BenchmarkFail500(b *testing.B) {
	benchOutcome(b, func(ctx context.Context, s *Store, cs []alarm.Clock, tok int64, at time.Time) error {
		outs := make([]alarm.Outcome, len(cs))
		for i, c := range cs {
			outs[i] = alarm.Outcome{ID: c.ID, Status: alarm.StatusPending, NextTryAt: at.Add(time.Second + time.Duration(i)*time.Millisecond),
				Error: "unroutable: no queue bound for application bench"}
		}
		return s.Fail(ctx, outs, []int64{tok}, at)
	})
}

// benchOutcome times write, the outcome of 500 claimed one-shot clocks,
// per clock (the claim itself is not timed).
func benchOutcome(b *testing.B, write func(ctx context.Context, s *Store, cs []alarm.Clock, tok int64, at time.Time) error) {
	s := benchStore(b)
	ctx := context.Background()
	var total time.Duration
	for range b.N {
		cs, tok := benchClaimed(b, s, 500, false)
		t0 := time.Now()
		if err := write(ctx, s, cs, tok, time.Now()); err != nil {
			b.Fatal(err)
		}
		total += time.Since(t0)
	}
	b.ReportMetric(float64(total.Microseconds())/float64(b.N*500), "µs/clock")
}
