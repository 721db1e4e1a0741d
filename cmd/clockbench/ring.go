package main

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/clockd/clockd/internal/benchkit"
)

// dialAMQP connects to RabbitMQ.
func dialAMQP(url, name string) (*amqp.Connection, error) {
	props := amqp.NewConnectionProperties()
	props.SetClientConnectionName(name)
	conn, err := amqp.DialConfig(url, amqp.Config{
		Dial:       amqp.DefaultDial(5 * time.Second),
		Heartbeat:  10 * time.Second,
		Properties: props,
	})
	if err != nil {
		return nil, fmt.Errorf("connect to RabbitMQ at %s: %w", redactURL(url), err)
	}
	return conn, nil
}

// declareBoundQueue makes sure the direct exchange exists (it declares it
// only when it does not, so whatever clockd declared stays as it is), and
// declares a durable queue bound to it with key.
func declareBoundQueue(conn *amqp.Connection, exchange, queue, key string) error {
	ch, err := conn.Channel()
	if err != nil {
		return fmt.Errorf("open channel: %w", err)
	}
	if err := ch.ExchangeDeclarePassive(exchange, amqp.ExchangeDirect, true, false, false, false, nil); err != nil {
		// the failed passive declare closed the channel
		if ch, err = conn.Channel(); err != nil {
			return fmt.Errorf("open channel: %w", err)
		}
		if err := ch.ExchangeDeclare(exchange, amqp.ExchangeDirect, true, false, false, false, nil); err != nil {
			return fmt.Errorf("declare exchange %s: %w", exchange, err)
		}
	}
	defer ch.Close()
	if _, err := ch.QueueDeclare(queue, true, false, false, false, nil); err != nil {
		return fmt.Errorf("declare queue %s: %w", queue, err)
	}
	if err := ch.QueueBind(queue, key, exchange, false, nil); err != nil {
		return fmt.Errorf("bind queue %s to %s with key %s: %w", queue, exchange, key, err)
	}
	return nil
}

// deleteQueue deletes a queue on a fresh channel.
func deleteQueue(conn *amqp.Connection, queue string) error {
	ch, err := conn.Channel()
	if err != nil {
		return err
	}
	defer ch.Close()
	_, err = ch.QueueDelete(queue, false, false, false)
	return err
}

// consumer reads a queue on its own channel and hands every delivery,
// stamped with its receipt time, to handle (in the consumer's goroutine).
// It acknowledges with multiple acks every prefetch/4 deliveries.
type consumer struct {
	ch      *amqp.Channel
	tag     string
	done    chan struct{}
	err     error
	handled atomic.Int64 // deliveries handed to handle so far
}

func startConsumer(conn *amqp.Connection, queue string, prefetch int, handle func(time.Time, *amqp.Delivery)) (*consumer, error) {
	ch, err := conn.Channel()
	if err != nil {
		return nil, fmt.Errorf("open consumer channel: %w", err)
	}
	if err := ch.Qos(prefetch, 0, false); err != nil {
		ch.Close()
		return nil, fmt.Errorf("qos: %w", err)
	}
	c := &consumer{ch: ch, tag: "clockbench-" + queue, done: make(chan struct{})}
	deliveries, err := ch.Consume(queue, c.tag, false, true, false, false, nil)
	if err != nil {
		ch.Close()
		return nil, fmt.Errorf("consume %s: %w", queue, err)
	}
	ackEvery := max(1, prefetch/4)
	go func() {
		defer close(c.done)
		n := 0
		var last amqp.Delivery
		for d := range deliveries {
			now := time.Now()
			handle(now, &d)
			c.handled.Add(1)
			n++
			last = d
			if n%ackEvery == 0 {
				if err := d.Ack(true); err != nil && c.err == nil {
					c.err = fmt.Errorf("ack: %w", err)
				}
			}
		}
		// ack the tail too: unacked deliveries would go back to the queue
		// when the channel closes, and reach whoever consumes it next
		if n%ackEvery != 0 {
			if err := last.Ack(true); err != nil && c.err == nil && !errors.Is(err, amqp.ErrClosed) {
				c.err = fmt.Errorf("ack: %w", err)
			}
		}
	}()
	return c, nil
}

// stop cancels the consumer, waits for its goroutine and closes the channel.
func (c *consumer) stop() error {
	cerr := c.ch.Cancel(c.tag, false)
	select {
	case <-c.done:
	case <-time.After(5 * time.Second):
		c.ch.Close()
		<-c.done
	}
	c.ch.Close()
	if c.err != nil {
		return c.err
	}
	if cerr != nil && !errors.Is(cerr, amqp.ErrClosed) {
		return cerr
	}
	return nil
}

// RingResult holds the figures of the ring and hot scenarios.
type RingResult struct {
	Application string `json:"application"`
	Queue       string `json:"queue"`
	N           int    `json:"n"`

	Created        int            `json:"created"`
	CreateErrors   int            `json:"create_errors"`
	CreateKinds    map[string]int `json:"create_error_kinds,omitempty"`
	CreateSamples  []string       `json:"create_error_samples,omitempty"`
	CreateS        float64        `json:"create_phase_s"`
	CreateRate     float64        `json:"create_rate"`
	LeadS          float64        `json:"lead_s"`
	SpanS          float64        `json:"span_s"`
	FirstDue       time.Time      `json:"first_ring_at"`
	LastDue        time.Time      `json:"last_ring_at"`
	CreateOverranS float64        `json:"create_overran_s"`
	TargetRate     float64        `json:"target_rate"`
	// PctOfCeiling is the target rate as a percentage of the broker
	// ceiling when the rate was picked from it, else 0.
	PctOfCeiling float64 `json:"target_pct_of_broker_ceiling,omitempty"`

	Received       int            `json:"received"`
	Deliveries     int            `json:"deliveries"`
	Duplicates     int            `json:"duplicates"`
	Early          int            `json:"early"`
	EarlySamples   []string       `json:"early_samples,omitempty"`
	Lost           int            `json:"lost"`
	LostStatus     map[string]int `json:"lost_status,omitempty"`
	LostSamples    []string       `json:"lost_samples,omitempty"`
	Unexpected     int            `json:"unexpected"`
	Anomalies      map[string]int `json:"anomalies,omitempty"`
	AnomalySamples []string       `json:"anomaly_samples,omitempty"`
	Retried        int            `json:"retried_attempt_gt_1"`
	Lateness       Summary        `json:"lateness"`
	LatenessHist   []Bucket       `json:"lateness_histogram,omitempty"`
	// LatenessWindows is the lateness of the clocks due in each
	// lateWindow of ring time (not for the hot second), and
	// WorstWindows the three of them with the highest max: a stall (a
	// periodic job, a slow statement) shows as one window far above the
	// rest, a machine at its limit as many.
	LatenessWindows   []LateWindow `json:"lateness_windows,omitempty"`
	WorstWindows      []LateWindow `json:"worst_windows,omitempty"`
	RingRate          float64      `json:"ring_rate"`
	RingRatePctBroker float64      `json:"ring_rate_pct_of_broker,omitempty"`
	FirstReceiptS     float64      `json:"first_receipt_after_first_ring_at_s"`
	LastReceiptS      float64      `json:"last_receipt_after_first_ring_at_s"`
	WaitedS           float64      `json:"waited_after_last_ring_at_s"`
	RungCheck         string       `json:"rung_check,omitempty"`
	// clockd's CPU seconds (utime+stime) in the create phase and from its
	// end until the last ring arrived (plus -settle); 0 without -rss-pid.
	ClockdCPUCreateS float64 `json:"clockd_cpu_create_phase_s,omitempty"`
	ClockdCPURingS   float64 `json:"clockd_cpu_ring_phase_s,omitempty"`
	// the same for the local MySQL and RabbitMQ processes, by name
	ServerCPUCreateS map[string]float64 `json:"server_cpu_create_phase_s,omitempty"`
	ServerCPURingS   map[string]float64 `json:"server_cpu_ring_phase_s,omitempty"`
	// DrainCPU is the machine's CPU use between two readings of the CPU
	// counters that lie between the first ring received and the last (when
	// those are at least minDrainCPUSpan apart), and CPUPerRingUS the
	// machine's CPU time per ring received between those readings: with
	// the broker ceiling's CPU per message it tells whether the cores were
	// the limit.
	DrainCPU     *CPUUse       `json:"cpu_first_to_last_receipt,omitempty"`
	CPUPerRingUS float64       `json:"machine_cpu_us_per_ring,omitempty"`
	Timeline     *TimelineJSON `json:"timeline,omitempty"`
	Notes        []string      `json:"notes,omitempty"`
}

// ringRec is one received message, reduced to what the checks need.
type ringRec struct {
	recv         time.Time
	routingKey   string
	messageID    string
	contentType  string
	deliveryMode uint8
	redelivered  bool
	body         []byte
	hApp         string
	hBiz         string
	hRingAt      string
	hAttempt     int64
	hAttemptOK   bool
}

func headerString(t amqp.Table, k string) string {
	switch v := t[k].(type) {
	case string:
		return v
	case []byte:
		return string(v)
	case nil:
		return ""
	default:
		return fmt.Sprint(v)
	}
}

func headerInt(t amqp.Table, k string) (int64, bool) {
	switch v := t[k].(type) {
	case int8:
		return int64(v), true
	case int16:
		return int64(v), true
	case int32:
		return int64(v), true
	case int64:
		return v, true
	case int:
		return int64(v), true
	case uint8:
		return int64(v), true
	case uint16:
		return int64(v), true
	case uint32:
		return int64(v), true
	case string:
		n, err := strconv.ParseInt(v, 10, 64)
		return n, err == nil
	}
	return 0, false
}

// ringPlan describes a ring or hot run.
type ringPlan struct {
	name     string // "ring" or "hot"
	app      string
	n        int
	firstDue time.Time
	span     time.Duration // ring times are firstDue + span*i/n
	prefix   string        // business id prefix
}

func (p *ringPlan) ringAt(i int) time.Time {
	off := time.Duration(float64(p.span) * float64(i) / float64(p.n))
	return p.firstDue.Add(off).Truncate(time.Millisecond)
}

// leadFor returns the time to allow for creating n clocks: the -lead flag
// when given, else its default raised to 2 s + 2 × n / the create rate measured earlier in the run.
func leadFor(cfg *config, n int, batchRate float64) time.Duration {
	lead := cfg.lead
	if batchRate > 0 && !cfg.leadSet {
		est := 2*time.Second + time.Duration(2*float64(n)/batchRate*float64(time.Second))
		lead = max(lead, est)
	}
	return lead
}

// runRing creates n clocks (batch creates, in ring time order) due from
// now+lead over span, consumes the rings from its own bound queue, and
// measures lateness, early, lost and duplicate rings. With hot set, all
// clocks are due within one whole second.
func runRing(ctx context.Context, cfg *config, a *api, app string, hot bool, batchRate float64, logf func(string, ...any)) (*RingResult, error) {
	name, n, span := "ring", cfg.n, cfg.span
	if hot {
		name, n, span = "hot", cfg.hotN, time.Second
	}
	start := time.Now()
	mark0 := readCPU(cfg.rssPID)
	lead := leadFor(cfg, n, batchRate)
	firstDue := start.Add(lead)
	if hot {
		firstDue = firstDue.Truncate(time.Second).Add(time.Second)
	}
	plan := &ringPlan{name: name, app: app, n: n, firstDue: firstDue.Truncate(time.Millisecond), span: span, prefix: name[:1]}
	lastDue := plan.ringAt(n - 1)
	res := &RingResult{
		Application: app, Queue: "clockbench." + app, N: n,
		LeadS: plan.firstDue.Sub(start).Seconds(), SpanS: span.Seconds(),
		FirstDue: plan.firstDue.UTC(), LastDue: lastDue.UTC(),
		TargetRate: float64(n) / span.Seconds(),
		Anomalies:  map[string]int{},
	}
	tl := newTimeline(start, 100*time.Millisecond)

	conn, err := dialAMQP(cfg.amqpURL, "clockbench "+name)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	if err := declareBoundQueue(conn, cfg.exchange, res.Queue, app); err != nil {
		return nil, err
	}
	defer func() {
		if err := deleteQueue(conn, res.Queue); err != nil {
			logf("%s: delete queue %s: %v", name, res.Queue, err)
		}
	}()

	// receive
	recs := make([]ringRec, 0, n+n/8)
	seen := make([]bool, n)
	var distinct atomic.Int64
	cons, err := startConsumer(conn, res.Queue, cfg.prefetch, func(now time.Time, d *amqp.Delivery) {
		r := ringRec{
			recv: now, routingKey: d.RoutingKey, messageID: d.MessageId, contentType: d.ContentType,
			deliveryMode: d.DeliveryMode, redelivered: d.Redelivered, body: d.Body,
			hApp: headerString(d.Headers, "x-clock-application"), hBiz: headerString(d.Headers, "x-clock-business-id"),
			hRingAt: headerString(d.Headers, "x-clock-ring-at"),
		}
		r.hAttempt, r.hAttemptOK = headerInt(d.Headers, "x-clock-attempt")
		recs = append(recs, r)
		if i, ok := plan.index(r.hBiz); ok && !seen[i] {
			seen[i] = true
			distinct.Add(1)
		}
	})
	if err != nil {
		return nil, err
	}
	consumerStopped := false
	stopConsumer := func() {
		if !consumerStopped {
			consumerStopped = true
			if err := cons.stop(); err != nil {
				res.Notes = append(res.Notes, "consumer: "+err.Error())
			}
		}
	}
	defer stopConsumer()

	// create, in ring time order
	logf("%s: creating %d clocks due %s .. %s (lead %.1fs)", name, n,
		plan.firstDue.Format("15:04:05.000"), lastDue.Format("15:04:05.000"), res.LeadS)
	ids := make([]int64, n)
	bc := &batchCreator{a: a, app: app, tl: tl, series: "create", wantIDs: true}
	var next atomic.Int64
	var wg sync.WaitGroup
	payloads := func(i int) []byte { return makePayload(app+"/"+plan.bid(i), cfg.payloadSize) }
	for range cfg.batchClients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var body []byte
			var resp bytes.Buffer
			cs := make([]clockSpec, 0, cfg.batchSize)
			for ctx.Err() == nil {
				lo := int(next.Add(int64(cfg.batchSize))) - cfg.batchSize
				if lo >= n {
					return
				}
				hi := min(lo+cfg.batchSize, n)
				cs = cs[:0]
				for i := lo; i < hi; i++ {
					cs = append(cs, clockSpec{businessID: plan.bid(i), payload: payloads(i), ringAt: plan.ringAt(i)})
				}
				var got []int64
				got, _, _, body = bc.post(ctx, cs, body, &resp)
				copy(ids[lo:hi], got)
			}
		}()
	}
	wg.Wait()
	createEnd := time.Now()
	mark1 := readCPU(cfg.rssPID)
	series := startCPUSeries(cfg.rssPID, cpuSeriesEvery)
	defer series.Stop()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	for _, id := range ids {
		if id != 0 {
			res.Created++
		}
	}
	res.CreateErrors, res.CreateKinds, res.CreateSamples = bc.errs.total, bc.errs.kinds, bc.errs.samples
	res.CreateS = createEnd.Sub(start).Seconds()
	res.CreateRate = rate(res.Created, createEnd.Sub(start))
	if over := createEnd.Sub(plan.firstDue); over > 0 {
		res.CreateOverranS = over.Seconds()
		res.Notes = append(res.Notes, fmt.Sprintf("the create phase ended %.2fs after the first ring time: raise -lead (rings overlapped creates; clocks created after their ring time count as late)", over.Seconds()))
	}
	logf("%s: created %d clocks in %.2fs = %.0f/s, %d errors; first ring in %.2fs",
		name, res.Created, res.CreateS, res.CreateRate, res.CreateErrors, time.Until(plan.firstDue).Seconds())

	// wait for every created clock, or the grace after the last ring time
	deadline := lastDue.Add(cfg.grace)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	var allAt time.Time
wait:
	for {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case now := <-tick.C:
			if allAt.IsZero() && int(distinct.Load()) >= res.Created {
				allAt = now
			}
			if !allAt.IsZero() && now.Sub(allAt) >= cfg.settle || now.After(deadline) {
				break wait
			}
		}
	}
	res.WaitedS = time.Since(lastDue).Seconds()
	series.Stop()
	if cfg.rssPID > 0 {
		mark2 := readCPU(cfg.rssPID)
		res.ClockdCPUCreateS, res.ClockdCPURingS = clockdSeconds(mark0, mark1), clockdSeconds(mark1, mark2)
		res.ServerCPUCreateS, res.ServerCPURingS = serverSeconds(mark0, mark1), serverSeconds(mark1, mark2)
	}
	stopConsumer()

	// evaluate
	var lateness []time.Duration
	var byWindow map[int][]time.Duration
	if !hot {
		byWindow = map[int][]time.Duration{}
	}
	count := make([]int, n)
	var first, last time.Time
	anomaly := func(kind, sample string) {
		res.Anomalies[kind]++
		if len(res.AnomalySamples) < 10 {
			res.AnomalySamples = append(res.AnomalySamples, kind+": "+sample)
		}
	}
	for k := range recs {
		r := &recs[k]
		res.Deliveries++
		tl.Add("ring", r.recv, 1)
		i, ok := plan.index(r.hBiz)
		if !ok {
			res.Unexpected++
			anomaly("unexpected business id", fmt.Sprintf("%q message_id %q", r.hBiz, r.messageID))
			continue
		}
		count[i]++
		if count[i] > 1 {
			res.Duplicates++
			continue
		}
		if first.IsZero() || r.recv.Before(first) {
			first = r.recv
		}
		if r.recv.After(last) {
			last = r.recv
		}
		due := plan.ringAt(i)
		late := r.recv.Sub(due)
		lateness = append(lateness, late)
		if byWindow != nil {
			w := int(due.Sub(plan.firstDue) / lateWindow)
			byWindow[w] = append(byWindow[w], late)
		}
		if late < 0 {
			res.Early++
			if len(res.EarlySamples) < 10 {
				res.EarlySamples = append(res.EarlySamples, fmt.Sprintf("%s ring_at %s received %s (%.3f ms early)",
					r.hBiz, due.UTC().Format(time.RFC3339Nano), r.recv.UTC().Format(time.RFC3339Nano), -benchkit.MS(late)))
			}
		}
		// the message must be what the SPEC promises
		if ids[i] == 0 {
			anomaly("received a clock whose create failed", r.hBiz)
		} else if r.messageID != strconv.FormatInt(ids[i], 10) {
			anomaly("message_id is not the clock id", fmt.Sprintf("%s: message_id %q, id %d", r.hBiz, r.messageID, ids[i]))
		}
		if r.routingKey != app {
			anomaly("routing key", r.routingKey)
		}
		if r.hApp != app {
			anomaly("x-clock-application", r.hApp)
		}
		if t, err := time.Parse(time.RFC3339Nano, r.hRingAt); err != nil || !t.Equal(due) {
			anomaly("x-clock-ring-at", fmt.Sprintf("%s: header %q, set %s", r.hBiz, r.hRingAt, due.UTC().Format(time.RFC3339Nano)))
		}
		if !r.hAttemptOK || r.hAttempt < 1 {
			anomaly("x-clock-attempt", fmt.Sprintf("%s: %v", r.hBiz, r.hAttempt))
		} else if r.hAttempt > 1 {
			res.Retried++
		}
		if r.deliveryMode != amqp.Persistent {
			anomaly("delivery_mode not 2", fmt.Sprint(r.deliveryMode))
		}
		if r.contentType != "application/json" {
			anomaly("content_type", r.contentType)
		}
		if !bytes.Equal(r.body, payloads(i)) {
			anomaly("body differs from payload", r.hBiz+": "+snippet(r.body))
		}
	}
	if len(res.Anomalies) == 0 {
		res.Anomalies = nil
	}
	res.Received = len(lateness)
	for i := range n {
		tl.Add("due", plan.ringAt(i), 1)
		if ids[i] != 0 && count[i] == 0 {
			res.Lost++
		}
	}
	if res.Received > 1 {
		res.RingRate = float64(res.Received-1) / last.Sub(first).Seconds()
	}
	if !first.IsZero() {
		res.FirstReceiptS = first.Sub(plan.firstDue).Seconds()
		res.LastReceiptS = last.Sub(plan.firstDue).Seconds()
	}
	if last.Sub(first) >= minDrainCPUSpan {
		if a, b, ok := series.Window(first, last); ok {
			u := cpuBetween(a, b, cfg.rssPID)
			res.DrainCPU, res.CPUPerRingUS = &u, u.perOp(receivedBetween(recs, a.When, b.When))
		}
	}
	res.Lateness = benchkit.Summarize(lateness)
	res.LatenessHist = histogram(lateness)
	res.LatenessWindows, res.WorstWindows = lateWindows(byWindow)
	res.Timeline = tl.Export()

	if res.Lost > 0 {
		diagnoseLost(ctx, a, plan, ids, count, res)
	}
	res.RungCheck = checkRung(ctx, a, app)
	logf("%s: received %d/%d, ring rate %.0f/s, lateness p50 %.2f p99 %.2f p99.9 %.2f max %.2f ms, early %d, lost %d, duplicates %d",
		name, res.Received, res.Created, res.RingRate, res.Lateness.P50, res.Lateness.P99, res.Lateness.P999, res.Lateness.Max,
		res.Early, res.Lost, res.Duplicates)
	return res, nil
}

// receivedBetween counts the receipts in [from, to].
func receivedBetween(recs []ringRec, from, to time.Time) int {
	n := 0
	for i := range recs {
		if t := recs[i].recv; !t.Before(from) && !t.After(to) {
			n++
		}
	}
	return n
}

// The CPU counters are read every cpuSeriesEvery while the rings come; the
// CPU of a drain shorter than minDrainCPUSpan is not told (the counters
// tick every 10 ms, and the readings bracket the drain).
const (
	cpuSeriesEvery  = 100 * time.Millisecond
	minDrainCPUSpan = time.Second
)

// lateWindow is the span of ring times whose lateness LateWindow sums up.
const lateWindow = 500 * time.Millisecond

// LateWindow is the lateness of the clocks due in one lateWindow.
type LateWindow struct {
	StartS float64 `json:"start_s"` // after the first ring time
	Count  int     `json:"count"`
	P50    float64 `json:"p50_ms"`
	P99    float64 `json:"p99_ms"`
	Max    float64 `json:"max_ms"`
}

func (w LateWindow) String() string {
	return fmt.Sprintf("%.1f-%.1f s: p50 %s p99 %s max %s", w.StartS, w.StartS+lateWindow.Seconds(), fmtMs(w.P50), fmtMs(w.P99), fmtMs(w.Max))
}

// lateWindows sums up the lateness of each window, in time order, and
// picks the three with the highest max (worst first).
func lateWindows(byWindow map[int][]time.Duration) (all, worst []LateWindow) {
	for _, w := range slices.Sorted(maps.Keys(byWindow)) {
		s := benchkit.Summarize(byWindow[w])
		all = append(all, LateWindow{StartS: (time.Duration(w) * lateWindow).Seconds(), Count: s.Count, P50: s.P50, P99: s.P99, Max: s.Max})
	}
	worst = slices.Clone(all)
	slices.SortStableFunc(worst, func(a, b LateWindow) int { return cmp.Compare(b.Max, a.Max) })
	return all, worst[:min(3, len(worst))]
}

func (p *ringPlan) bid(i int) string { return p.prefix + strconv.Itoa(i) }

func (p *ringPlan) index(bid string) (int, bool) {
	if len(bid) < 2 || bid[:len(p.prefix)] != p.prefix {
		return 0, false
	}
	i, err := strconv.Atoi(bid[len(p.prefix):])
	if err != nil || i < 0 || i >= p.n {
		return 0, false
	}
	return i, true
}

// diagnoseLost reads up to 200 lost clocks to tell what became of them, and
// cancels those still pending so they do not retry against the deleted
// queue forever.
func diagnoseLost(ctx context.Context, a *api, plan *ringPlan, ids []int64, count []int, res *RingResult) {
	res.LostStatus = map[string]int{}
	looked := 0
	for i := range plan.n {
		if ids[i] == 0 || count[i] > 0 {
			continue
		}
		if looked == 200 {
			res.LostStatus["not looked up"] = res.Lost - looked
			break
		}
		looked++
		c, st, err := a.get(ctx, plan.app, plan.bid(i))
		switch {
		case err != nil:
			res.LostStatus["get error"]++
		case st != 200:
			res.LostStatus["get "+strconv.Itoa(st)]++
		default:
			res.LostStatus[c.Status]++
			if len(res.LostSamples) < 5 {
				res.LostSamples = append(res.LostSamples, fmt.Sprintf("%s id %d status %s attempts %d last_error %v ring_at %s",
					plan.bid(i), c.ID, c.Status, c.Attempts, c.LastError, plan.ringAt(i).UTC().Format(time.RFC3339Nano)))
			}
		}
	}
	cancelled := 0
	for i := range plan.n {
		if ids[i] != 0 && count[i] == 0 && ctx.Err() == nil {
			if st, err := a.cancel(ctx, plan.app, plan.bid(i)); err == nil && st == 200 {
				cancelled++
			}
		}
	}
	if cancelled > 0 {
		res.Notes = append(res.Notes, fmt.Sprintf("cancelled %d lost clocks that were still pending", cancelled))
	}
}

// checkRung waits up to 10 s for the application to have no clock left
// pending or firing: every ring must be confirmed and marked rung.
func checkRung(ctx context.Context, a *api, app string) string {
	start := time.Now()
	for {
		var left []string
		for _, st := range []string{"pending", "firing"} {
			cs, _, err := a.list(ctx, app, st, 1, "")
			if err != nil {
				return "could not check: " + err.Error()
			}
			if len(cs) > 0 {
				left = append(left, st)
			}
		}
		if len(left) == 0 {
			return fmt.Sprintf("no clock pending or firing %.0f ms after the consumer stopped", benchkit.MS(time.Since(start)))
		}
		if time.Since(start) > 10*time.Second || ctx.Err() != nil {
			msg := "after 10 s still:"
			for _, st := range left {
				n, more := countStatus(ctx, a, app, st)
				msg += fmt.Sprintf(" %d%s %s", n, map[bool]string{true: "+", false: ""}[more], st)
			}
			return msg
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func countStatus(ctx context.Context, a *api, app, status string) (int, bool) {
	n, after := 0, ""
	for range 20 {
		cs, next, err := a.list(ctx, app, status, 1000, after)
		if err != nil {
			return n, true
		}
		n += len(cs)
		if next == "" || len(cs) == 0 {
			return n, false
		}
		after = next
	}
	return n, true
}

// pct returns a as a percentage of b, or 0.
func pct(a, b float64) float64 {
	if b <= 0 || math.IsNaN(a) {
		return 0
	}
	return 100 * a / b
}
