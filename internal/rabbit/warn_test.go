package rabbit

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/clockd/clockd/internal/alarm"
	"github.com/clockd/clockd/internal/lograte"
)

// logBuffer collects JSON log lines; safe for concurrent writers.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *logBuffer) logger() *slog.Logger {
	return slog.New(slog.NewJSONHandler(b, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// records returns the log records at level whose message contains msg.
func (b *logBuffer) records(t testing.TB, level, msg string) []map[string]any {
	t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []map[string]any
	sc := bufio.NewScanner(bytes.NewReader(b.buf.Bytes()))
	for sc.Scan() {
		var rec map[string]any
		if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
			t.Fatalf("log line %q is not JSON: %v", sc.Text(), err)
		}
		if rec["level"] == level && strings.Contains(rec["msg"].(string), msg) {
			out = append(out, rec)
		}
	}
	return out
}

// fakeNow is a clock the test moves.
type fakeNow struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeNow) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeNow) add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// A ring that no queue takes is logged at WARN, naming the application and
// the fix, at most once per application per minute.
func TestUnroutableIsLogged(t *testing.T) {
	f := newFixture(t)
	f.bind(t, "bound")
	var logs logBuffer
	clock := &fakeNow{t: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)}
	r := start(t, f, func(c *Config) { c.Logger = logs.logger(); c.Now = clock.now })

	warnings := func(app string) []map[string]any {
		var out []map[string]any
		for _, rec := range logs.records(t, "WARN", "unroutable") {
			if rec["application"] == app {
				out = append(out, rec)
			}
		}
		return out
	}
	for i := range 5 {
		publish(t, r.p, msg(int64(i), "forgotten"), msg(int64(100+i), "bound"))
	}
	got := warnings("forgotten")
	if len(got) != 1 {
		t.Fatalf("%d WARN lines for the unbound application after 5 returns, want 1: %s", len(got), logs.buf.String())
	}
	fix, _ := got[0]["fix"].(string)
	if !strings.Contains(fix, "clockctl bind -app forgotten") || !strings.Contains(fix, "-exchange "+f.exchange) {
		t.Errorf("the WARN does not give the fix (clockctl bind -app forgotten -exchange %s): %v", f.exchange, got[0])
	}
	if len(warnings("bound")) != 0 {
		t.Errorf("WARN for the bound application: %s", logs.buf.String())
	}

	// Another application gets its own line at once.
	publish(t, r.p, msg(200, "other"))
	if n := len(warnings("other")); n != 1 {
		t.Errorf("%d WARN lines for a second unbound application, want 1", n)
	}

	// A minute later, the next return is logged again, with what was left out.
	clock.add(61 * time.Second)
	publish(t, r.p, msg(300, "forgotten"))
	got = warnings("forgotten")
	if len(got) != 2 {
		t.Fatalf("%d WARN lines a minute later, want 2", len(got))
	}
	if got[1]["returns_not_logged"] != float64(4) {
		t.Errorf("returns_not_logged = %v, want 4 (the returns of the minute before)", got[1]["returns_not_logged"])
	}
}

// hintDrops reads clockd_hints_dropped_total by reason.
func hintDrops(t testing.TB, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != "clockd_hints_dropped_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if lp.GetName() == "reason" {
					out[lp.GetValue()] = m.GetCounter().GetValue()
				}
			}
		}
	}
	return out
}

// Hints dropped for any reason are counted by reason and logged, at most
// once a minute per reason.
func TestHintDropsAreCountedAndLogged(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	var logs logBuffer
	clock := &fakeNow{t: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)}
	var got []alarm.Due
	h := NewHints(HintConfig{URL: "amqp://guest:guest@127.0.0.1:1/", Exchange: "x", InstanceID: "me",
		Logger: logs.logger(), Registerer: reg, OnHint: func(d alarm.Due) { got = append(got, d) }})
	h.maxPending = 10
	h.dropLog = lograte.New(dropLogEvery, clock.now)
	due := func(n int) []alarm.Due {
		ds := make([]alarm.Due, n)
		for i := range ds {
			ds[i] = alarm.Due{ID: int64(i + 1), Shard: 3, At: clock.now()}
		}
		return ds
	}
	warns := func() []map[string]any { return logs.records(t, "WARN", "hints dropped") }

	steps := []struct {
		name  string
		do    func()
		drops map[string]float64
		warns int
	}{
		{"all exported at zero", func() {},
			map[string]float64{"queue_full": 0, "not_sent": 0, "shutdown": 0, "malformed": 0}, 0},
		{"room for them", func() { h.Send(due(8)) },
			map[string]float64{"queue_full": 0, "not_sent": 0, "shutdown": 0, "malformed": 0}, 0},
		{"queue full: what does not fit is dropped", func() { h.Send(due(5)) },
			map[string]float64{"queue_full": 3, "not_sent": 0, "shutdown": 0, "malformed": 0}, 1},
		{"again within the minute: counted, not logged", func() { h.Send(due(4)) },
			map[string]float64{"queue_full": 7, "not_sent": 0, "shutdown": 0, "malformed": 0}, 1},
		{"a minute later: logged again", func() { clock.add(time.Minute); h.Send(due(1)) },
			map[string]float64{"queue_full": 8, "not_sent": 0, "shutdown": 0, "malformed": 0}, 2},
		{"a received message of partial hints", func() { h.deliver(make([]byte, 2*hintSize+7)) },
			map[string]float64{"queue_full": 8, "not_sent": 0, "shutdown": 0, "malformed": 1}, 3},
	}
	for _, s := range steps {
		s.do()
		if d := hintDrops(t, reg); !maps.Equal(d, s.drops) {
			t.Errorf("%s: dropped %v, want %v", s.name, d, s.drops)
		}
		if n := len(warns()); n != s.warns {
			t.Errorf("%s: %d WARN lines, want %d", s.name, n, s.warns)
		}
	}
	if w := warns(); len(w) == 3 {
		if w[1]["reason"] != "queue_full" || w[1]["hints"] != float64(1) || w[1]["hints_not_logged"] != float64(4) {
			t.Errorf("second WARN %v: want reason queue_full, hints 1, hints_not_logged 4", w[1])
		}
	}
	if len(got) != 2 {
		t.Errorf("%d hints delivered from the partial message, want 2", len(got))
	}

	// Whatever still waits when Run stops (here: never connected) is dropped
	// as "shutdown".
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if err := h.Run(ctx); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if d := hintDrops(t, reg); d["shutdown"] != 10 {
		t.Errorf("dropped at shutdown %v, want 10", d["shutdown"])
	}

	// A second bus on the same registry shares the counter.
	h2 := NewHints(HintConfig{URL: "amqp://127.0.0.1:1/", Exchange: "x", Registerer: reg})
	h2.maxPending = 0
	h2.Send(due(2))
	if d := hintDrops(t, reg); d["queue_full"] != 10 {
		t.Errorf("queue_full %v after a second bus dropped 2, want 10", d["queue_full"])
	}
}

// Hints that cannot go ask for their shards' rescans: all of them while
// there is no connection, only the overflow when the queue is full and
// the connection up. Each shard is asked for once per batch of asks.
func TestUndeliveredHintsAskForRescans(t *testing.T) {
	t.Parallel()
	asked := make(chan []int, 10)
	h := NewHints(HintConfig{URL: "amqp://guest:guest@127.0.0.1:1/", Exchange: "x", InstanceID: "me",
		OnUndelivered: func(_ context.Context, shards []int) error { asked <- shards; return nil }})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan struct{})
	go func() { defer close(done); _ = h.Run(ctx) }() // never connects: the port is closed
	at := time.Now()
	h.Send([]alarm.Due{{ID: 1, Shard: 7, At: at}, {ID: 2, Shard: 3, At: at}, {ID: 3, Shard: 7, At: at}})
	select {
	case got := <-asked:
		if !slices.Equal(got, []int{3, 7}) {
			t.Errorf("asked for rescans of %v, want [3 7]", got)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no rescan asked for hints sent without a connection")
	}

	// Connected, with room: nothing asked. Full: the overflow is.
	h.connected.Store(true)
	h.maxPending = 4 // 3 wait already
	h.Send([]alarm.Due{{ID: 4, Shard: 1, At: at}})
	h.Send([]alarm.Due{{ID: 5, Shard: 2, At: at}, {ID: 6, Shard: 9, At: at}})
	select {
	case got := <-asked:
		if !slices.Equal(got, []int{2, 9}) {
			t.Errorf("asked for rescans of %v, want [2 9] (the hints that did not fit)", got)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no rescan asked for hints that did not fit the queue")
	}
	select {
	case got := <-asked:
		t.Errorf("asked again for %v", got)
	case <-time.After(100 * time.Millisecond):
	}
	cancel()
	<-done
}
