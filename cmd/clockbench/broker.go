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
)

// BrokerResult is the raw RabbitMQ ceiling: persistent, mandatory
// publishes with pipelined confirms to a durable queue that a consumer
// drains, as clockd's rings are.
type BrokerResult struct {
	Exchange   string        `json:"exchange"`
	Queue      string        `json:"queue"`
	Publishers int           `json:"publishers"`
	Window     int           `json:"window"`
	BodyBytes  int           `json:"body_bytes"`
	DurationS  float64       `json:"duration_s"`
	ElapsedS   float64       `json:"elapsed_s"`
	Published  int           `json:"published"`
	Acked      int           `json:"acked"`
	Nacked     int           `json:"nacked"`
	Returned   int           `json:"returned"`
	Unconfirm  int           `json:"unconfirmed"`
	Rate       float64       `json:"confirmed_per_s"`
	Consumed   int           `json:"consumed"`
	HopLatency Summary       `json:"publish_to_consume_latency"`
	Timeline   *TimelineJSON `json:"timeline,omitempty"`
	Notes      []string      `json:"notes,omitempty"`
}

// runBroker publishes for cfg.duration and reports the confirmed rate.
func runBroker(ctx context.Context, cfg *config, name string, logf func(string, ...any)) (*BrokerResult, error) {
	res := &BrokerResult{
		Exchange: "clockbench." + name, Queue: "clockbench." + name,
		Publishers: cfg.brokerPublishers, Window: cfg.brokerWindow, DurationS: cfg.duration.Seconds(),
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

	start := time.Now()
	tl := newTimeline(start, 100*time.Millisecond)
	var hops []time.Duration
	var consumed int
	// the consumer is another application: its own connection
	cconn, err := dialAMQP(cfg.amqpURL, "clockbench broker consumer")
	if err != nil {
		return nil, err
	}
	defer cconn.Close()
	cons, err := startConsumer(cconn, res.Queue, cfg.prefetch, func(now time.Time, d *amqp.Delivery) {
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

	// a body and headers the size and shape of a ring
	body := makePayload(name, cfg.payloadSize)
	if len(body) < 8 {
		body = make([]byte, 8)
	}
	res.BodyBytes = len(body)

	deadline := start.Add(cfg.duration)
	var published, acked, nacked, returned atomic.Int64
	var wg sync.WaitGroup
	errc := make(chan error, cfg.brokerPublishers)
	for p := range cfg.brokerPublishers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := publishLoop(ctx, conn, res.Exchange, key, body, cfg.brokerWindow, deadline, p, tl, &published, &acked, &nacked, &returned); err != nil {
				errc <- err
			}
		}()
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
	res.ElapsedS = end.Sub(start).Seconds()
	res.Published = int(published.Load())
	res.Acked = int(acked.Load())
	res.Nacked = int(nacked.Load())
	res.Returned = int(returned.Load())
	res.Unconfirm = res.Published - res.Acked - res.Nacked
	res.Rate = rate(res.Acked, end.Sub(start))
	res.Consumed = consumed
	res.HopLatency = summarize(hops)
	res.Timeline = tl.Export()
	logf("broker: %d confirmed in %.1fs = %.0f msgs/s (%d publishers, window %d), publish->consume p50 %.2f p99 %.2f ms, %d nacked, %d returned",
		res.Acked, res.ElapsedS, res.Rate, res.Publishers, res.Window, res.HopLatency.P50, res.HopLatency.P99, res.Nacked, res.Returned)
	return res, nil
}

// publishLoop publishes on its own confirm-mode channel, keeping at most
// window messages unconfirmed, until deadline; then it waits (up to 10 s)
// for the outstanding confirms.
func publishLoop(ctx context.Context, conn *amqp.Connection, exchange, key string, body []byte, window int, deadline time.Time,
	p int, tl *Timeline, published, acked, nacked, returned *atomic.Int64) error {
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
	for i := 0; ctx.Err() == nil && time.Now().Before(deadline); i++ {
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
