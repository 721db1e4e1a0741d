package main

import (
	"context"
	"encoding/binary"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/clockd/clockd/internal/benchkit"
)

// BrokerResult is the raw RabbitMQ ceiling: persistent, mandatory
// publishes with pipelined confirms to a durable queue that a consumer
// drains, as clockd's rings are. Each count of publishing channels in
// -broker-publishers is measured in turn; the ceiling is the best of them,
// and its figures are the top-level ones.
type BrokerResult struct {
	Exchange  string  `json:"exchange"`
	Queue     string  `json:"queue"`
	Window    int     `json:"window"`
	BodyBytes int     `json:"body_bytes"`
	WarmupS   float64 `json:"warmup_s"`
	DurationS float64 `json:"duration_s"`
	BrokerRun
	Runs []BrokerRun `json:"runs"`
	// Paced is the broker alone at the ring scenario's rate (-ring-pct of
	// the ceiling), publishes spread evenly on one channel: its
	// publish->consume latency is the broker's own share of a ring's
	// lateness at that rate, on the machine as it is in this run.
	Paced *BrokerRun `json:"paced,omitempty"`
}

// BrokerRun is one configuration of the broker ceiling.
type BrokerRun struct {
	Publishers int           `json:"publishers"`
	PacedPct   float64       `json:"paced_pct_of_ceiling,omitempty"`
	TargetRate float64       `json:"target_rate_per_s,omitempty"`
	ElapsedS   float64       `json:"elapsed_s"`
	MeasuredS  float64       `json:"measured_s"`
	Published  int           `json:"published"`
	Acked      int           `json:"acked"`
	Nacked     int           `json:"nacked"`
	Returned   int           `json:"returned"`
	Unconfirm  int           `json:"unconfirmed"`
	Rate       float64       `json:"confirmed_per_s"`
	Consumed   int           `json:"consumed"`
	HopLatency Summary       `json:"publish_to_consume_latency"`
	Timeline   *TimelineJSON `json:"timeline,omitempty"`
	// CPU is the machine's CPU use in the measured window, and
	// CPUPerMsgUS its CPU time per message confirmed in it: what the broker
	// and its clients (clockbench publishing and consuming) cost a message.
	CPU         *CPUUse  `json:"cpu_measured_window,omitempty"`
	CPUPerMsgUS float64  `json:"machine_cpu_us_per_msg,omitempty"`
	Notes       []string `json:"notes,omitempty"`
}

// bestRun returns the index of the run with the highest confirmed rate
// (the first of equals), or -1 for none.
func bestRun(runs []BrokerRun) int {
	best := -1
	for i, r := range runs {
		if best < 0 || r.Rate > runs[best].Rate {
			best = i
		}
	}
	return best
}

// runBroker measures every configuration of -broker-publishers for
// -ceiling-warmup + -ceiling-duration each and reports the best.
func runBroker(ctx context.Context, cfg *config, name string, logf func(string, ...any)) (*BrokerResult, error) {
	res := &BrokerResult{
		Exchange: "clockbench." + name, Queue: "clockbench." + name,
		Window: cfg.brokerWindow, WarmupS: cfg.ceilingWarmup.Seconds(), DurationS: cfg.ceilingDuration.Seconds(),
	}
	conn, err := dialAMQP(cfg.amqpURL, "clockbench broker")
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		return nil, err
	}
	defer ch.Close()
	if err := ch.ExchangeDeclare(res.Exchange, amqp.ExchangeDirect, false, true, false, false, nil); err != nil {
		return nil, fmt.Errorf("declare exchange: %w", err)
	}
	defer func() {
		if err := deleteQueue(conn, res.Queue); err != nil {
			logf("broker: delete queue: %v", err)
		}
		if c, err := conn.Channel(); err == nil {
			_ = c.ExchangeDelete(res.Exchange, false, false)
			c.Close()
		}
	}()
	key := "bench"
	if err := declareBoundQueue(conn, res.Exchange, res.Queue, key); err != nil {
		return nil, err
	}
	// the consumer is another application: its own connection
	cconn, err := dialAMQP(cfg.amqpURL, "clockbench broker consumer")
	if err != nil {
		return nil, err
	}
	defer cconn.Close()

	// a body and headers the size and shape of a ring
	body := makePayload(name, cfg.payloadSize)
	if len(body) < 8 {
		body = make([]byte, 8)
	}
	res.BodyBytes = len(body)

	for _, pubs := range cfg.brokerPublishers {
		run, err := brokerRun(ctx, cfg, conn, cconn, res.Exchange, res.Queue, key, body, pubs, 0)
		if err != nil {
			return nil, err
		}
		logf("broker: %d channel(s), window %d: %.0f confirmed msgs/s (%d confirmed in %.1fs), publish->consume p50 %.2f p99 %.2f ms, %d nacked, %d returned",
			pubs, res.Window, run.Rate, run.Acked, run.ElapsedS, run.HopLatency.P50, run.HopLatency.P99, run.Nacked, run.Returned)
		res.Runs = append(res.Runs, *run)
	}
	res.BrokerRun = res.Runs[bestRun(res.Runs)]
	if len(res.Runs) > 1 {
		logf("broker: ceiling %.0f msgs/s with %d channel(s)", res.Rate, res.Publishers)
	}
	if cfg.brokerPaced && cfg.ringPct > 0 && res.Rate > 0 {
		run, err := brokerRun(ctx, cfg, conn, cconn, res.Exchange, res.Queue, key, body, 1, res.Rate*cfg.ringPct/100)
		if err != nil {
			return nil, err
		}
		run.PacedPct = cfg.ringPct
		logf("broker: paced at %g%% of the ceiling (%.0f msgs/s asked), 1 channel: %.0f confirmed msgs/s, publish->consume p50 %.2f p99 %.2f p99.9 %.2f ms",
			run.PacedPct, run.TargetRate, run.Rate, run.HopLatency.P50, run.HopLatency.P99, run.HopLatency.P999)
		res.Paced = run
	}
	return res, nil
}

// brokerRun publishes from pubs channels for warm-up + duration and
// reports the rate confirmed inside the measured window. With pace > 0
// (messages per second, all channels together) the publishes are spread
// evenly instead of as fast as the confirm window allows.
func brokerRun(ctx context.Context, cfg *config, conn, cconn *amqp.Connection, exchange, queue, key string, body []byte, pubs int, pace float64) (*BrokerRun, error) {
	res := &BrokerRun{Publishers: pubs, TargetRate: pace}
	start := time.Now()
	tl := newTimeline(start, 100*time.Millisecond)
	var hops []time.Duration
	var consumed int
	cons, err := startConsumer(cconn, queue, cfg.prefetch, func(now time.Time, d *amqp.Delivery) {
		consumed++
		if len(d.Body) >= 8 {
			sent := int64(binary.BigEndian.Uint64(d.Body))
			hops = append(hops, time.Duration(now.UnixNano()-sent))
		}
		tl.Add("consumed", now, 1)
	})
	if err != nil {
		return nil, err
	}
	stopped := false
	defer func() {
		if !stopped {
			_ = cons.stop()
		}
	}()

	t0 := start.Add(cfg.ceilingWarmup)
	deadline := t0.Add(cfg.ceilingDuration)
	var published, acked, nacked, returned atomic.Int64
	var wg sync.WaitGroup
	errc := make(chan error, pubs)
	for p := range pubs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := publishLoop(ctx, conn, exchange, key, body, cfg.brokerWindow, deadline, pace/float64(pubs), p, tl, &published, &acked, &nacked, &returned); err != nil {
				errc <- err
			}
		}()
	}
	// the confirms counted at the edges of the measured window
	var a [2]int64
	var at [2]time.Time
	var marks [2]cpuMark
	for i, edge := range []time.Time{t0, deadline} {
		select {
		case <-ctx.Done():
		case <-time.After(time.Until(edge)):
		}
		a[i], at[i] = acked.Load(), time.Now()
		marks[i] = readCPU(cfg.rssPID)
	}
	wg.Wait()
	close(errc)
	end := time.Now()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	for err := range errc {
		res.Notes = append(res.Notes, "publisher: "+err.Error())
	}
	// let the consumer drain what was confirmed
	drainBy := time.Now().Add(10 * time.Second)
	for time.Now().Before(drainBy) {
		time.Sleep(20 * time.Millisecond)
		if int(cons.handled.Load()) >= int(acked.Load()) {
			break
		}
	}
	stopped = true
	if err := cons.stop(); err != nil {
		res.Notes = append(res.Notes, "consumer: "+err.Error())
	}
	// what is left (the consumer did not get it all within 10 s) must not
	// reach the next configuration's consumer
	if ch, err := conn.Channel(); err == nil {
		if n, err := ch.QueuePurge(queue, false); err == nil && n > 0 {
			res.Notes = append(res.Notes, fmt.Sprintf("%d messages left in the queue after the run were purged", n))
		}
		ch.Close()
	}
	res.ElapsedS = end.Sub(start).Seconds()
	res.Published = int(published.Load())
	res.Acked = int(acked.Load())
	res.Nacked = int(nacked.Load())
	res.Returned = int(returned.Load())
	res.Unconfirm = res.Published - res.Acked - res.Nacked
	res.MeasuredS = at[1].Sub(at[0]).Seconds()
	res.Rate = rate(int(a[1]-a[0]), at[1].Sub(at[0]))
	u := cpuBetween(marks[0], marks[1], cfg.rssPID)
	res.CPU, res.CPUPerMsgUS = &u, u.perOp(int(a[1]-a[0]))
	res.Consumed = consumed
	res.HopLatency = benchkit.Summarize(hops)
	res.Timeline = tl.Export()
	return res, nil
}

// publishLoop publishes on its own confirm-mode channel, keeping at most
// window messages unconfirmed, until deadline; then it waits (up to 10 s)
// for the outstanding confirms. With pace > 0 it publishes pace messages a
// second, spread evenly (those due together go out together, as a ring
// loop's would).
func publishLoop(ctx context.Context, conn *amqp.Connection, exchange, key string, body []byte, window int, deadline time.Time,
	pace float64, p int, tl *Timeline, published, acked, nacked, returned *atomic.Int64) error {
	ch, err := conn.Channel()
	if err != nil {
		return err
	}
	defer ch.Close()
	if err := ch.Confirm(false); err != nil {
		return fmt.Errorf("confirm mode: %w", err)
	}
	confirms := ch.NotifyPublish(make(chan amqp.Confirmation, window))
	returns := ch.NotifyReturn(make(chan amqp.Return, 64))
	tokens := make(chan struct{}, window)
	var outstanding atomic.Int64
	readerDone := make(chan struct{})
	go func() {
		defer close(readerDone)
		for c := range confirms {
			now := time.Now()
			if c.Ack {
				acked.Add(1)
				tl.Add("confirmed", now, 1)
			} else {
				nacked.Add(1)
			}
			outstanding.Add(-1)
			<-tokens
		}
	}()
	retDone := make(chan struct{})
	go func() {
		defer close(retDone)
		for range returns {
			returned.Add(1)
		}
	}()

	msg := amqp.Publishing{
		ContentType:  "application/json",
		DeliveryMode: amqp.Persistent,
		Body:         append([]byte(nil), body...),
		Headers: amqp.Table{
			"x-clock-application": key,
			"x-clock-business-id": "",
			"x-clock-ring-at":     time.Now().UTC().Format(time.RFC3339Nano),
			"x-clock-attempt":     int32(1),
		},
	}
	var perr error
	paceStart := time.Now()
	pacer := time.NewTimer(time.Hour) // one timer for every wait (Reset needs no drain since Go 1.23)
	defer pacer.Stop()
	for i := 0; ctx.Err() == nil && time.Now().Before(deadline); i++ {
		if pace > 0 {
			if wait := time.Until(paceStart.Add(time.Duration(float64(i) / pace * float64(time.Second)))); wait > 0 {
				pacer.Reset(wait)
				select {
				case <-pacer.C:
				case <-ctx.Done():
					continue
				}
			}
		}
		select {
		case tokens <- struct{}{}:
		case <-ctx.Done():
			continue
		}
		bid := "p" + strconv.Itoa(p) + "-" + strconv.Itoa(i)
		msg.Headers["x-clock-business-id"] = bid
		msg.MessageId = bid
		msg.Timestamp = time.Now()
		binary.BigEndian.PutUint64(msg.Body, uint64(time.Now().UnixNano()))
		outstanding.Add(1)
		if err := ch.PublishWithContext(ctx, exchange, key, true, false, msg); err != nil {
			perr = fmt.Errorf("publish: %w", err)
			break
		}
		published.Add(1)
	}
	// wait for the outstanding confirms
	waitUntil := time.Now().Add(10 * time.Second)
	for outstanding.Load() > 0 && time.Now().Before(waitUntil) && perr == nil {
		time.Sleep(5 * time.Millisecond)
	}
	ch.Close()
	<-readerDone
	<-retDone
	return perr
}
