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
