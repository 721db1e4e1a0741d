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

// brokerLoss is instance "a" among live instances of a lease store, with
// a clock the test moves and a broker it takes away (brokerErr); its log
// lines, as JSON, are in logs.
type brokerLoss struct {
	t         *testing.T
	store     *leaseStore
	m         *Manager
	clock     atomic.Int64
	brokerErr error
	logs      bytes.Buffer
}

func newBrokerLoss(t *testing.T, live ...string) *brokerLoss {
	b := &brokerLoss{t: t, store: newLeaseStore(4, live...)}
	b.clock.Store(time.Unix(1_700_000_000, 0).UnixNano())
	b.m = leaseManager(t, b.store, Config{
		Now:     func() time.Time { return time.Unix(0, b.clock.Load()) },
		CanRing: func() error { return b.brokerErr },
		Logger:  slog.New(slog.NewJSONHandler(&b.logs, nil)),
	})
	return b
}

func (b *brokerLoss) round() { b.t.Helper(); roundAndWait(b.t, b.m) }

// README, Operations, Logs: "Durations are strings such as "1.52s"." The
// WARN an instance logs when it gives its shards up for want of a broker
// carries how long the broker has been away ("for") as a time.Duration,
// which slog's JSON handler (clockd's default log format) writes as integer
// nanoseconds: "for":11000000000, not "for":"11s" (found by review).
func TestBrokerLossLogDurationIsAString(t *testing.T) {
	b := newBrokerLoss(t, "a", "b")
	b.round()
	b.brokerErr = errors.New("rabbitmq: connection refused")
	b.round()
	b.clock.Add(int64(11 * time.Second)) // past the lease TTL: the instance gives its shards up
	b.round()
	buf := b.logs

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
		b := newBrokerLoss(t, c.live...)
		b.round()
		held := len(b.store.held("a"))
		b.brokerErr = errors.New("rabbitmq: connection refused")
		b.round()
		b.clock.Add(int64(11 * time.Second)) // past the lease TTL
		b.round()
		b.round()
		b.brokerErr = nil
		b.round()
		logs := b.logs.String()
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
