package preload

import (
	"bytes"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// README, Operations, Logs: "Durations are strings such as "1.52s"." The
// WARN an instance logs when it gives its shards up for want of a broker
// carries how long the broker has been away ("for") as a time.Duration,
// which slog's JSON handler (clockd's default log format) writes as integer
// nanoseconds: "for":11000000000, not "for":"11s" (found by review).
func TestBrokerLossLogDurationIsAString(t *testing.T) {
	store := newLeaseStore(4, "a", "b")
	var clock atomic.Int64
	clock.Store(time.Unix(1_700_000_000, 0).UnixNano())
	var buf bytes.Buffer
	var brokerErr error
	m := leaseManager(t, store, Config{
		Now:     func() time.Time { return time.Unix(0, clock.Load()) },
		CanRing: func() error { return brokerErr },
		Logger:  slog.New(slog.NewJSONHandler(&buf, nil)),
	})
	round := func() { t.Helper(); roundAndWait(t, m) }
	round()
	brokerErr = errors.New("rabbitmq: connection refused")
	round()
	clock.Add(int64(11 * time.Second)) // past the lease TTL: the instance gives its shards up
	round()

	var found bool
	for line := range strings.SplitSeq(buf.String(), "\n") {
		if !strings.Contains(line, "cannot publish to RabbitMQ") {
			continue
		}
		found = true
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("log line is not JSON: %v: %s", err, line)
		}
		if _, ok := rec["for"].(string); !ok {
			t.Errorf(`"for" is logged as %T %v, want a duration string such as "11s" (README: durations are strings): %s`,
				rec["for"], rec["for"], line)
		}
	}
	if !found {
		t.Fatalf("no \"cannot publish to RabbitMQ\" line logged:\n%s", buf.String())
	}
}

// A lone instance without a broker keeps its shards (nobody else can ring
// them), so it must not log that it gives them up, nor, when the broker is
// back, that it takes its share again; with another instance that can
// ring, it says once that it hands its shards over (found by review: a
// lone instance logged a hand-over that did not happen).
func TestBrokerLossLogsAHandOverOnlyWhenOneHappens(t *testing.T) {
	for _, c := range []struct {
		live     []string
		handOver bool
	}{
		{[]string{"a"}, false},
		{[]string{"a", "b"}, true},
	} {
		store := newLeaseStore(4, c.live...)
		var clock atomic.Int64
		clock.Store(time.Unix(1_700_000_000, 0).UnixNano())
		var buf bytes.Buffer
		var brokerErr error
		m := leaseManager(t, store, Config{
			Now:     func() time.Time { return time.Unix(0, clock.Load()) },
			CanRing: func() error { return brokerErr },
			Logger:  slog.New(slog.NewTextHandler(&buf, nil)),
		})
		round := func() { t.Helper(); roundAndWait(t, m) }
		round()
		held := len(store.held("a"))
		brokerErr = errors.New("rabbitmq: connection refused")
		round()
		clock.Add(int64(11 * time.Second)) // past the lease TTL
		round()
		round()
		brokerErr = nil
		round()
		logs := buf.String()
		if !strings.Contains(logs, "cannot publish to RabbitMQ") {
			t.Errorf("%v: the broker's loss is not logged:\n%s", c.live, logs)
		}
		if got := strings.Count(logs, "gives its shards up"); c.handOver && got != 1 || !c.handOver && got != 0 {
			t.Errorf("%v (held %d shards): hand-over logged %d times, want it %v:\n%s", c.live, held, got, c.handOver, logs)
		}
		if got := strings.Contains(logs, "takes its share"); got != c.handOver {
			t.Errorf("%v: \"takes its share\" logged: %v, want %v:\n%s", c.live, got, c.handOver, logs)
		}
	}
}
