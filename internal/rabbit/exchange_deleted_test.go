package rabbit

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/clockd/clockd/internal/alarm"
	"github.com/clockd/clockd/internal/testenv"
)

// checkEvery sets a bus's check of its bindings.
func checkEvery(d time.Duration) func(*Hints) {
	return func(h *Hints) { h.checkEvery = d }
}

// strangerQueue declares exchange (as a bus does) and binds a queue of a
// connection of its own to it until the test ends: the exchange exists
// and routes, but not to the buses' queues.
func strangerQueue(t *testing.T, url, exchange string) {
	t.Helper()
	conn, err := amqp.Dial(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if err := ch.ExchangeDeclare(exchange, "fanout", false, true, false, false, nil); err != nil {
		t.Fatal(err)
	}
	q, err := ch.QueueDeclare("", false, true, true, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := ch.QueueBind(q.Name, "", exchange, false, nil); err != nil {
		t.Fatal(err)
	}
}

func deleteExchange(t *testing.T, url, exchange string) {
	t.Helper()
	testenv.WithChannel(t, url, func(ch *amqp.Channel) {
		if err := ch.ExchangeDelete(exchange, false, false); err != nil {
			t.Fatalf("delete %s: %v", exchange, err)
		}
	})
}

// A hint published on a hints exchange an operator deleted is lost, and
// no publish call says so (the broker closes the channel afterwards): the
// missing confirm does. It is counted as not sent and its shard's owner
// asked to rescan, and the sender declares the exchange again.
func TestHintOnADeletedExchangeIsCountedAndAskedFor(t *testing.T) {
	t.Parallel()
	url := testenv.AMQPURL(t)
	exchange := testenv.Name("clockd_test_hints_")
	reg := prometheus.NewRegistry()
	var logs logBuffer
	asked := make(chan []int, 10)
	a := startHints(t, url, exchange, testenv.Name("a"), checkEvery(time.Hour), func(h *Hints) {
		h.onUndelivered = func(_ context.Context, shards []int) error { asked <- shards; return nil }
		h.log = logs.logger()
		reg.MustRegister(h.dropped, h.rebinds)
	})
	b := startHints(t, url, exchange, testenv.Name("b"), checkEvery(time.Hour))
	waitFor(t, "both connected", func() bool {
		_, na := a.state()
		_, nb := b.state()
		return na == 1 && nb == 1
	})
	deleteExchange(t, url, exchange+".hints")
	a.Send([]alarm.Due{{ID: 1, Shard: 4, At: time.Now()}})
	select {
	case got := <-asked:
		if !slices.Equal(got, []int{4}) {
			t.Errorf("asked for rescans of %v, want [4]", got)
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("the hint published on the deleted exchange was not asked for; dropped %v", hintDrops(t, reg))
	}
	if d := hintDrops(t, reg); d["not_sent"] != 1 {
		t.Errorf("dropped %v, want not_sent 1", d)
	}
	waitFor(t, "a connected again", func() bool { _, n := a.state(); return n == 2 })
	if n := testenv.Metric(t, reg, "clockd_hints_rebinds_total", "exchange", "hints"); n != 1 {
		t.Errorf("clockd_hints_rebinds_total{exchange=hints} = %v, want 1", n)
	}
	if w := logs.records(t, "WARN", "deleted on the broker"); len(w) != 1 {
		t.Errorf("%d WARN lines about the deleted exchange, want 1", len(w))
	}
}

// An operator deletes the hints exchange and something declares it again
// at once (another instance that published on it): every queue lost its
// binding, and nothing in the protocol tells their instances. Each finds
// out within probeLost + 1 checks (its probe does not come back), binds again and
// says so (OnConnected: what was sent meanwhile went nowhere); hints flow
// again.
func TestInstancesBindAgainAfterTheHintsExchangeWasDeleted(t *testing.T) {
	t.Parallel()
	url := testenv.AMQPURL(t)
	exchange := testenv.Name("clockd_test_hints_")
	const every = 200 * time.Millisecond
	reg := prometheus.NewRegistry()
	var logs logBuffer
	a := startHints(t, url, exchange, testenv.Name("a"), checkEvery(every))
	b := startHints(t, url, exchange, testenv.Name("b"), checkEvery(every), func(h *Hints) {
		h.log = logs.logger()
		reg.MustRegister(h.dropped, h.rebinds)
	})
	waitFor(t, "both connected", func() bool {
		_, na := a.state()
		_, nb := b.state()
		return na == 1 && nb == 1
	})
	time.Sleep(3 * every) // a few checks: nothing to heal
	if _, n := b.state(); n != 1 {
		t.Fatalf("b told of %d bindings before anything happened, want 1", n)
	}
	deleteExchange(t, url, exchange+".hints")
	deleted := time.Now()
	strangerQueue(t, url, exchange+".hints")
	waitFor(t, "b bound again", func() bool { _, n := b.state(); return n == 2 })
	took := time.Since(deleted)
	t.Logf("b bound again %v after the deletion", took.Round(time.Millisecond))
	if took > (probeLost+1)*every+500*time.Millisecond {
		t.Errorf("b bound again %v after the deletion, want within probeLost + 1 checks (%v)", took, (probeLost+1)*every)
	}
	waitFor(t, "a bound again", func() bool { _, n := a.state(); return n == 2 })
	a.Send([]alarm.Due{{ID: 9, Shard: 2, At: time.Now()}})
	waitFor(t, "b received a's hint", func() bool { got, _ := b.state(); return len(got) == 1 && got[0].ID == 9 })
	time.Sleep(3 * every) // bound: no more healing
	if _, n := b.state(); n != 2 {
		t.Errorf("b told of %d bindings, want 2", n)
	}
	if n := testenv.Metric(t, reg, "clockd_hints_rebinds_total", "exchange", "hints"); n != 1 {
		t.Errorf("clockd_hints_rebinds_total{exchange=hints} = %v, want 1", n)
	}
	if n := testenv.Metric(t, reg, "clockd_hints_rebinds_total", "exchange", "tokens"); n != 0 {
		t.Errorf("clockd_hints_rebinds_total{exchange=tokens} = %v, want 0", n)
	}
	if w := logs.records(t, "WARN", "deleted on the broker"); len(w) != 1 {
		t.Errorf("%d WARN lines about the deleted exchange, want 1", len(w))
	} else if w[0]["exchange"] != exchange+".hints" {
		t.Errorf("WARN names exchange %v, want %s", w[0]["exchange"], exchange+".hints")
	}
}

// The same for the tokens exchange: once the others are bound again a
// revocation is acknowledged by each of them before Revoke returns.
func TestInstancesBindAgainAfterTheTokensExchangeWasDeleted(t *testing.T) {
	t.Parallel()
	url := testenv.AMQPURL(t)
	exchange := testenv.Name("clockd_test_hints_")
	const every = 200 * time.Millisecond
	ids := []string{testenv.Name("a"), testenv.Name("b")}
	a := startHints(t, url, exchange, ids[0], checkEvery(every))
	b := startHints(t, url, exchange, ids[1], checkEvery(every))
	waitFor(t, "both connected", func() bool {
		_, na := a.state()
		_, nb := b.state()
		return na == 1 && nb == 1
	})
	deleteExchange(t, url, exchange+".tokens")
	deleted := time.Now()
	strangerQueue(t, url, exchange+".tokens")
	waitFor(t, "both bound again", func() bool {
		_, na := a.state()
		_, nb := b.state()
		return na == 2 && nb == 2
	})
	t.Logf("both bound again %v after the deletion", time.Since(deleted).Round(time.Millisecond))
	start := time.Now()
	a.Revoke(context.Background(), 42, ids)
	if took := time.Since(start); took >= revokeWaitMax {
		t.Errorf("Revoke waited %v, its whole bound: b did not acknowledge", took)
	}
	if got := b.revokedIDs(); !slices.Equal(got, []int64{42}) {
		t.Errorf("b told of %v, want [42]", got)
	}
}
