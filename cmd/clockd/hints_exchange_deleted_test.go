package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/clockd/clockd/client"
	"github.com/clockd/clockd/internal/alarm"
	"github.com/clockd/clockd/internal/testenv"
)

// bindCheck is how often an instance checks its bindings to the hints and
// tokens exchanges (internal/rabbit bindCheckEvery): one whose binding is
// gone binds again within probeLost + 1 of it.
const (
	bindCheck = time.Second
	probeLost = 5 // checks a probe may take to come back
)

// deleteExchange deletes exchange on the broker, as an operator would.
func deleteExchange(t *testing.T, url, exchange string) {
	t.Helper()
	testenv.WithChannel(t, url, func(ch *amqp.Channel) {
		if err := ch.ExchangeDelete(exchange, false, false); err != nil {
			t.Fatalf("delete %s: %v", exchange, err)
		}
	})
	t.Logf("deleted exchange %s", exchange)
}

// An operator deletes the hints exchange (<exchange>.hints), e.g. while
// cleaning up exchanges he does not know. The first hint after it goes
// into the missing exchange; the instance that sent it declares the
// exchange again, but every instance's hint queue lost its binding with
// the exchange and nothing in the protocol tells them. Before, the lost
// hint was neither counted nor replaced by a rescan request (that clock
// rang 6-13 s late), and from then on every clock created through a
// non-owner rang only at its owner's next full rescan (up to 28 s late),
// with no log line and no metric. Now the sender misses the broker's
// confirm and asks for a rescan; each instance finds its binding gone
// within probeLost + 1 checks of its bindings, binds again, rescans the shards it
// owns and says so once.
func TestHintsExchangeDeletedByOperator(t *testing.T) {
	e := newEnv(t)
	cons := testenv.Consume(t, e.AMQP, e.Exchange, "hx")
	nodes := startCluster(t, e, 2, map[string]string{"CLOCKD_PRELOAD_WINDOW": "10s"})
	owner, via := nodes[0], nodes[1]
	own := clusterViewOf(t, owner).owners()

	// a clock of a shard owner holds, created through via, due in 1 s
	k := 0
	create := func(prefix string) clusterClock {
		for ; ; k++ {
			bid := fmt.Sprintf("%s-%d", prefix, k)
			if own[alarm.ShardOf("hx", bid, clusterShards)] == owner.ID {
				k++
				return clusterCreate(t, via, "hx", bid, time.Now().Add(time.Second))
			}
		}
	}
	// hints work before
	before := map[int64]clusterClock{}
	for i := 0; i < 3; i++ {
		p := create("before")
		before[p.ID] = p
		time.Sleep(100 * time.Millisecond)
	}
	rb := clusterWaitRung(cons, before, 10*time.Second)
	t.Logf("before the deletion: %s", rb)
	if len(rb.Missing) > 0 || rb.max() > 500*time.Millisecond {
		t.Fatalf("hints did not work even before the deletion: %s", rb)
	}

	deleteExchange(t, e.AMQP, e.Exchange+".hints")
	// the first hint after the deletion: published into a missing exchange
	probe := map[int64]clusterClock{}
	p := create("probe")
	probe[p.ID] = p
	time.Sleep((probeLost + 1) * bindCheck) // every instance has found its binding gone

	const n = 10
	clocks := map[int64]clusterClock{}
	for i := 0; i < n; i++ {
		p := create("after")
		clocks[p.ID] = p
		time.Sleep(100 * time.Millisecond)
	}
	r := clusterWaitRung(cons, clocks, 40*time.Second)
	all := map[int64]clusterClock{}
	for _, m := range []map[int64]clusterClock{before, probe, clocks} {
		for id, c := range m {
			all[id] = c
		}
	}
	clusterAnalyze(cons, all).check(t, true)
	pr := clusterAnalyze(cons, probe)
	t.Logf("the first clock after the deletion: %s", pr)
	t.Logf("clocks created through the non-owner once the instances could bind again: %s", r)
	for _, nd := range nodes {
		t.Logf("%s: hints not sent %v, rebinds of the hints exchange %v", nd.ID,
			clusterMetric(t, nd, `clockd_hints_dropped_total{reason="not_sent"}`),
			clusterMetric(t, nd, `clockd_hints_rebinds_total{exchange="hints"}`))
	}
	// a hint arrives within milliseconds; the fallback (a rescan asked
	// through the shard's row) within a lease round; an unbound owner
	// binds again and rescans within probeLost + 1 checks, before the clock is due
	limit := leaseRound + 500*time.Millisecond
	if pr.max() > limit {
		t.Errorf("the clock whose hint was published into the deleted exchange rang %v late, want at most %v",
			pr.max().Round(time.Millisecond), limit)
	}
	if r.max() > limit {
		t.Errorf("after the hints exchange was deleted, clocks created through a non-owner rang up to %v late (p50 %v), want at most %v: the owner's hint queue is no longer bound and it does not notice",
			r.max().Round(time.Millisecond), r.pct(.5).Round(time.Millisecond), limit)
	}
	// the owner's queue was unbound: it says so, once
	if got := clusterMetric(t, owner, `clockd_hints_rebinds_total{exchange="hints"}`); got != 1 {
		t.Errorf("the owner counted %v rebinds of the hints exchange, want 1", got)
	}
	if c := strings.Count(owner.Logs(), "deleted on the broker"); c != 1 {
		t.Errorf("the owner logged %d lines about the deleted exchange, want 1", c)
	}
}

// The same for the tokens exchange (<exchange>.tokens), through which an
// instance tells the others of a token revoked through it. Before, once
// it was deleted no other instance heard of a revocation again: each
// revocation waited its whole second for acknowledgements that never
// came, and the others accepted the token until their cache entries
// expired (auth.cache_ttl). Now each instance binds again within probeLost + 1
// checks and forgets its cached tokens (it may have missed revocations):
// the revocation made right after the deletion stops the token there
// then, and the next ones stop it at once again.
func TestTokensExchangeDeletedByOperator(t *testing.T) {
	e := newEnv(t)
	// a long cache: only the word over the broker (or its loss noticed)
	// stops a revoked token on the other instance within this test
	a, b, adminA := tokenPair(t, e, "60s")
	ctx := context.Background()
	// a token used through B (cached there), revoked through A: how long
	// the revocation took to answer
	revoke := func(name string) (viaB *client.Client, took time.Duration) {
		t.Helper()
		tok, err := adminA.CreateToken(ctx, client.NewToken{Application: "order", Scopes: []string{"read"}, Name: name})
		if err != nil {
			t.Fatal(err)
		}
		viaB, err = client.New(b.URL, client.WithToken(tok.Secret))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := viaB.ListPage(ctx, client.Query{Application: "order"}); err != nil {
			t.Fatalf("token %s through B before its revocation: %v", name, err)
		}
		start := time.Now()
		if _, err := adminA.RevokeToken(ctx, tok.ID); err != nil {
			t.Fatal(err)
		}
		return viaB, time.Since(start)
	}
	refused := func(c *client.Client) bool {
		_, err := c.ListPage(ctx, client.Query{Application: "order"})
		return errors.Is(err, client.ErrUnauthenticated)
	}
	// both instances' hint connections are up once a revocation is
	// acknowledged
	for start := time.Now(); ; {
		if _, took := revoke("warm-up"); took < 500*time.Millisecond {
			break
		}
		if time.Since(start) > 15*time.Second {
			t.Fatal("no revocation acknowledged by the other instance within 15 s")
		}
	}

	deleteExchange(t, e.AMQP, e.Exchange+".tokens")
	deleted := time.Now()
	viaB, took := revoke("right-after")
	t.Logf("the revocation right after the deletion answered in %v", took.Round(time.Millisecond))
	for !refused(viaB) {
		if time.Since(deleted) > (probeLost+1)*bindCheck+2*time.Second {
			t.Fatalf("the token revoked through A right after the tokens exchange was deleted still works through B %v after the deletion (its cache keeps it for 60 s): B did not notice that it no longer hears of revocations",
				time.Since(deleted).Round(time.Millisecond))
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("refused through B %v after the deletion", time.Since(deleted).Round(time.Millisecond))

	time.Sleep((probeLost + 1) * bindCheck) // both bound again by now
	for i := range 3 {
		viaB, took := revoke(fmt.Sprintf("later-%d", i))
		if took > 500*time.Millisecond {
			t.Errorf("revocation %d after the instances bound again took %v: B did not acknowledge it", i, took)
		}
		if !refused(viaB) {
			t.Fatalf("token %d through B right after its revocation through A: still accepted, want 401 at once", i)
		}
	}
	if c := strings.Count(a.Logs()+b.Logs(), "deleted on the broker"); c < 1 || c > 2 {
		t.Errorf("%d lines about the deleted exchange from the two instances, want one or two", c)
	}
}
