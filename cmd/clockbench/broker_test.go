package main

import (
	"context"
	"io"
	"math"
	"testing"

	"github.com/clockd/clockd/internal/testenv"
)

func testConfig(t *testing.T, args ...string) *config {
	t.Helper()
	cfg, err := parseConfig(args, func(string) string { return "" }, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

func TestBrokerScenario(t *testing.T) {
	url := testenv.AMQPURL(t)
	cfg := testConfig(t, "-amqp", url, "-scenario", "broker", "-ceiling-warmup", "100ms", "-ceiling-duration", "400ms",
		"-broker-window", "200", "-broker-publishers", "1,4")
	res, err := runBroker(context.Background(), cfg, testenv.Name("clockbench_test_"), t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	if res.Acked == 0 || res.Rate <= 0 {
		t.Errorf("nothing confirmed: %+v", res)
	}
	if len(res.Runs) != 2 || res.Runs[0].Publishers != 1 || res.Runs[1].Publishers != 4 {
		t.Fatalf("runs %+v, want 1 and 4 channels", res.Runs)
	}
	for _, x := range res.Runs {
		if x.Rate <= 0 || x.Rate > res.Rate || x.MeasuredS < 0.35 || x.MeasuredS > 1 {
			t.Errorf("%d channels: rate %.0f (ceiling %.0f), measured over %.2fs", x.Publishers, x.Rate, res.Rate, x.MeasuredS)
		}
		if x.Consumed != x.Acked {
			t.Errorf("%d channels: consumed %d of %d confirmed", x.Publishers, x.Consumed, x.Acked)
		}
		if x.CPU == nil || x.CPU.Machine <= 0 || x.CPU.Cores < 1 || x.CPUPerMsgUS <= 0 {
			t.Errorf("%d channels: CPU in the measured window %+v, %v µs per message", x.Publishers, x.CPU, x.CPUPerMsgUS)
		}
	}
	if best := res.Runs[bestRun(res.Runs)]; best.Publishers != res.Publishers || best.Rate != res.Rate {
		t.Errorf("ceiling %d channels %.0f/s is not the best run %+v", res.Publishers, res.Rate, best)
	}
	if res.Nacked != 0 || res.Returned != 0 || res.Unconfirm != 0 {
		t.Errorf("nacked %d, returned %d, unconfirmed %d", res.Nacked, res.Returned, res.Unconfirm)
	}
	if res.Consumed != res.Acked {
		t.Errorf("consumed %d of %d confirmed", res.Consumed, res.Acked)
	}
	if res.HopLatency.Count != res.Consumed || res.HopLatency.P50 <= 0 {
		t.Errorf("hop latency %+v", res.HopLatency)
	}
	// the paced run: the broker alone at the ring scenario's rate
	if p := res.Paced; p == nil {
		t.Error("no paced run")
	} else {
		if p.PacedPct != 50 || p.Publishers != 1 || math.Abs(p.TargetRate-res.Rate/2) > 1e-6 {
			t.Errorf("paced run %+v, want 1 channel at 50%% of %.0f/s", p, res.Rate)
		}
		if p.Rate < 0.5*p.TargetRate || p.Rate > 1.2*p.TargetRate {
			t.Errorf("paced run confirmed %.0f/s, asked %.0f/s", p.Rate, p.TargetRate)
		}
		if p.Consumed != p.Acked || p.HopLatency.Count != p.Consumed || p.Nacked != 0 || p.Returned != 0 {
			t.Errorf("paced run: consumed %d of %d confirmed, %d latencies, %d nacked, %d returned", p.Consumed, p.Acked, p.HopLatency.Count, p.Nacked, p.Returned)
		}
	}
	if res.ElapsedS < 0.5 || res.ElapsedS > 10 {
		t.Errorf("elapsed %.2fs for a 100ms + 400ms run", res.ElapsedS)
	}
	// the temporary queue is gone
	conn, err := dialAMQP(url, "clockbench test")
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ch.QueueDeclarePassive(res.Queue, true, false, false, false, nil); err == nil {
		t.Errorf("queue %s still exists", res.Queue)
	}
}
