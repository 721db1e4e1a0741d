package main

// The recurring scenario (issue 13): N recurring clocks ringing every
// -recurring-every, their occurrences spread evenly over the period, for
// -recurring-duration; optionally clockd is killed (SIGKILL) and started
// again midway by -recurring-kill-cmd. It reports the lateness of the
// occurrences (receipt minus occurrence time, the same measure as the ring
// scenario's), and counts occurrences lost (scheduled before the cut-off,
// never received), received twice (the same message_id: at least once
// allows it around a kill), early, and off the schedule (must all be 0
// but the second).

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net/http"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/clockd/clockd/internal/benchkit"
)

// recurringConfig holds the scenario's flags.
type recurringConfig struct {
	n        int
	every    time.Duration
	duration time.Duration
	killCmd  string        // run with sh -c at killAt (kills and restarts clockd)
	killAt   time.Duration // after the first occurrence; 0: half the duration
	misfire  string
	noCancel bool // leave the clocks ringing (a scratch clockd, dropped after)
}

func addRecurringFlags(fs *flag.FlagSet, c *recurringConfig) {
	fs.IntVar(&c.n, "recurring-n", 100_000, "recurring scenario: number of recurring clocks")
	fs.DurationVar(&c.every, "recurring-every", time.Minute, "recurring scenario: their interval (occurrences spread evenly over it)")
	fs.DurationVar(&c.duration, "recurring-duration", 10*time.Minute, "recurring scenario: how long the occurrences are measured")
	fs.StringVar(&c.killCmd, "recurring-kill-cmd", "", "recurring scenario: shell command run midway that kills clockd (SIGKILL) and starts it again, e.g. 'kill -9 $(pidof clockd); setsid clockd serve >>clockd.log 2>&1 &'")
	fs.DurationVar(&c.killAt, "recurring-kill-at", 0, "recurring scenario: when to run -recurring-kill-cmd, after the first occurrence (default half the duration)")
	fs.BoolVar(&c.noCancel, "recurring-no-cancel", false, "recurring scenario: do not cancel the clocks at the end (for a scratch clockd and database thrown away after the run)")
	fs.StringVar(&c.misfire, "recurring-misfire", "catch_up", "recurring scenario: misfire rule of the clocks (catch_up rings the occurrences of the outage late; skip drops them)")
}

// RecurringResult is the report of the recurring scenario.
type RecurringResult struct {
	Clocks      int     `json:"clocks"`
	EveryS      float64 `json:"every_s"`
	DurationS   float64 `json:"duration_s"`
	Misfire     string  `json:"misfire"`
	CreateRate  float64 `json:"create_rate"`
	CreateFails int     `json:"create_failures"`
	// Killed: seconds after the first occurrence the kill command ran;
	// ReadyAfterS: how long until /readyz answered 200 again.
	Killed      *float64 `json:"killed_at_s,omitempty"`
	ReadyAfterS float64  `json:"ready_after_s,omitempty"`
	KillOutput  string   `json:"kill_output,omitempty"`
	Expected    int      `json:"expected_occurrences"`
	Received    int      `json:"received_messages"`
	Lost        int      `json:"lost"`
	Twice       int      `json:"same_message_id_twice"`
	Early       int      `json:"early"`
	OffSchedule int      `json:"off_schedule"`
	RingRate    float64  `json:"ring_rate"`
	// Lateness of the first receipt of each occurrence due by the cut-off
	// (those Expected counts): all, and outside the outage (occurrences due
	// from the kill until 10 s after ready).
	Lateness        Summary  `json:"lateness"`
	LatenessSteady  Summary  `json:"lateness_outside_outage"`
	LostSamples     []string `json:"lost_samples,omitempty"`
	CancelFailures  int      `json:"cancel_failures"`
	ClockdErrorNote string   `json:"note,omitempty"`
}

func (g *RecurringResult) section() section {
	s := section{Title: "recurring", Rows: [][2]string{
		{"clocks", fmt.Sprintf("%s recurring clocks every %s (misfire %s), occurrences spread evenly; created at %s (%d failures)",
			fmtInt(g.Clocks), time.Duration(g.EveryS*float64(time.Second)), g.Misfire, fmtRate(g.CreateRate), g.CreateFails)},
		{"measured", fmt.Sprintf("%.0f s: %s occurrences due, %s messages received, %s", g.DurationS, fmtInt(g.Expected), fmtInt(g.Received), fmtRate(g.RingRate))},
		{"lost / twice / early / off schedule", fmt.Sprintf("%d / %d / %d / %d", g.Lost, g.Twice, g.Early, g.OffSchedule)},
		{"lateness", fmtSummary(g.Lateness)},
		{"lateness outside the outage", fmtSummary(g.LatenessSteady)},
	}}
	if g.Killed != nil {
		s.Rows = append(s.Rows, [2]string{"kill", fmt.Sprintf("SIGKILL and restart at %.1f s; ready again after %.1f s", *g.Killed, g.ReadyAfterS)})
	}
	s.Notes = append(s.Notes, "twice: an occurrence received again with the same message_id (confirmed by the broker, clockd killed before it recorded it): at least once allows it")
	s.Notes = append(s.Notes, g.LostSamples...)
	if g.ClockdErrorNote != "" {
		s.Notes = append(s.Notes, g.ClockdErrorNote)
	}
	return s
}

type occKey struct {
	id int64
	ms int64
}

func runRecurring(ctx context.Context, cfg *config, a *api, app string, logf func(string, ...any)) (*RecurringResult, error) {
	rc := cfg.rec
	if rc.n <= 0 || rc.every < time.Second || rc.duration <= 0 {
		return nil, fmt.Errorf("recurring: -recurring-n must be positive, -recurring-every at least 1s, -recurring-duration positive")
	}
	res := &RecurringResult{Clocks: rc.n, EveryS: rc.every.Seconds(), DurationS: rc.duration.Seconds(), Misfire: rc.misfire}
	conn, err := dialAMQP(cfg.amqpURL, "clockbench-recurring")
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	queue := app + "-q"
	if err := declareBoundQueue(conn, cfg.exchange, queue, app); err != nil {
		return nil, err
	}
	defer deleteQueue(conn, queue)

	var mu sync.Mutex
	seen := make(map[occKey]time.Time, rc.n*int(rc.duration/rc.every+2))
	received, twice, early, bad := 0, 0, 0, 0
	cons, err := startConsumer(conn, queue, max(cfg.prefetch, 1000), func(now time.Time, d *amqp.Delivery) {
		idText, msText, ok := strings.Cut(d.MessageId, ":")
		id, err1 := strconv.ParseInt(idText, 10, 64)
		occ, err2 := strconv.ParseInt(msText, 10, 64)
		mu.Lock()
		defer mu.Unlock()
		received++
		if !ok || err1 != nil || err2 != nil {
			bad++
			return
		}
		k := occKey{id, occ}
		if _, dup := seen[k]; dup {
			twice++
			return
		}
		seen[k] = now
		at := time.UnixMilli(occ)
		if now.Before(at) {
			early++
		}
	})
	if err != nil {
		return nil, err
	}

	// Create: batches of 1000; occurrences spread evenly over one period,
	// starting after the create phase (at the create rate measured so far
	// it takes n / rate; a minute of margin otherwise).
	lead := 90 * time.Second
	base := time.Now().Add(lead).Truncate(time.Second)
	starts := map[int64]time.Time{}
	bids := make([]string, 0, rc.n)
	createStart := time.Now()
	const batch = 1000
	type job struct{ from, to int }
	jobs := make(chan job)
	var wg sync.WaitGroup
	var cmu sync.Mutex
	for range max(cfg.batchClients, 4) {
		wg.Go(func() {
			var buf bytes.Buffer
			for j := range jobs {
				var b strings.Builder
				b.WriteString(`{"clocks":[`)
				for i := j.from; i < j.to; i++ {
					if i > j.from {
						b.WriteByte(',')
					}
					start := base.Add(rc.every * time.Duration(i) / time.Duration(rc.n))
					fmt.Fprintf(&b, `{"application":%q,"business_id":"r-%07d","payload":"{}","schedule":{"every":%q,"start":%q,"misfire":%q}}`,
						app, i, rc.every.String(), start.UTC().Format(time.RFC3339Nano), rc.misfire)
				}
				b.WriteString("]}")
				st, err := a.do(ctx, http.MethodPost, "/v1/clocks/batch", []byte(b.String()), &buf)
				var r struct {
					Results []struct {
						Status int `json:"status"`
						Clock  *struct {
							ID         int64  `json:"id"`
							BusinessID string `json:"business_id"`
							RingAt     string `json:"ring_at"`
						} `json:"clock"`
					} `json:"results"`
				}
				if err == nil && st == http.StatusOK {
					err = json.Unmarshal(buf.Bytes(), &r)
				}
				cmu.Lock()
				if err != nil || st != http.StatusOK {
					res.CreateFails += j.to - j.from
				}
				for _, x := range r.Results {
					if x.Clock == nil || (x.Status != 201 && x.Status != 200) {
						res.CreateFails++
						continue
					}
					at, _ := time.Parse(time.RFC3339Nano, x.Clock.RingAt)
					starts[x.Clock.ID] = at
					bids = append(bids, x.Clock.BusinessID)
				}
				cmu.Unlock()
			}
		})
	}
	for i := 0; i < rc.n; i += batch {
		jobs <- job{i, min(i+batch, rc.n)}
	}
	close(jobs)
	wg.Wait()
	res.CreateRate = float64(len(starts)) / time.Since(createStart).Seconds()
	logf("recurring: created %d clocks in %.1f s (%d failures); first occurrence at %s", len(starts), time.Since(createStart).Seconds(), res.CreateFails, base.Format(time.RFC3339))
	if time.Now().After(base) {
		res.ClockdErrorNote = "the create phase ran past the first occurrences: their lateness includes it"
	}

	// Measure; kill midway.
	end := base.Add(rc.duration)
	killAt := rc.killAt
	if killAt == 0 {
		killAt = rc.duration / 2
	}
	var outageFrom, outageTo time.Time
	if rc.killCmd != "" {
		select {
		case <-ctx.Done():
		case <-time.After(time.Until(base.Add(killAt))):
		}
		outageFrom = time.Now()
		out, err := exec.CommandContext(ctx, "sh", "-c", rc.killCmd).CombinedOutput()
		k := outageFrom.Sub(base).Seconds()
		res.Killed, res.KillOutput = &k, strings.TrimSpace(string(out))
		if err != nil {
			logf("recurring: kill command: %v: %s", err, out)
		}
		for ctx.Err() == nil && a.ready(ctx) != nil {
			time.Sleep(100 * time.Millisecond)
		}
		res.ReadyAfterS = time.Since(outageFrom).Seconds()
		outageTo = time.Now().Add(10 * time.Second)
		logf("recurring: killed and restarted at %.1f s; ready after %.1f s", k, res.ReadyAfterS)
	}
	select {
	case <-ctx.Done():
	case <-time.After(time.Until(end)):
	}
	cutoff := end.Add(-5 * time.Second) // occurrences due by then must have arrived by end+settle
	time.Sleep(cfg.settle)

	// Stop the clocks: cancel every one (they would ring on forever).
	cctx := context.WithoutCancel(ctx)
	bidc := make(chan string)
	var cancelFails int
	var fmu sync.Mutex
	var cw sync.WaitGroup
	for range 32 {
		cw.Go(func() {
			for bid := range bidc {
				for try := 0; try < 5; try++ {
					st, err := a.cancel(cctx, app, bid)
					if err == nil && (st == http.StatusOK || st == http.StatusNotFound) {
						break
					}
					if try == 4 {
						fmu.Lock()
						cancelFails++
						fmu.Unlock()
					}
					time.Sleep(50 * time.Millisecond) // 409: firing an occurrence right now
				}
			}
		})
	}
	if rc.noCancel {
		bids = nil
	}
	for _, b := range bids {
		bidc <- b
	}
	close(bidc)
	cw.Wait()
	res.CancelFailures = cancelFails
	if err := cons.stop(); err != nil {
		logf("recurring: consumer: %v", err)
	}

	mu.Lock()
	defer mu.Unlock()
	res.Received, res.Twice, res.Early, res.OffSchedule = received, twice, early, bad
	// Lateness: each occurrence of the measured window once (its first
	// arrival), as Expected counts them. Occurrences after the cutoff ring
	// while the clocks are being cancelled (thousands of DELETEs a second
	// beside them) and are not part of the measurement.
	var measured, steady []time.Duration
	for k, at := range seen {
		s, ok := starts[k.id]
		occ := time.UnixMilli(k.ms)
		if !ok || occ.Before(s) || occ.Sub(s)%rc.every != 0 {
			res.OffSchedule++
			continue
		}
		if occ.After(cutoff) {
			continue
		}
		measured = append(measured, at.Sub(occ))
		if outageFrom.IsZero() || occ.Before(outageFrom) || occ.After(outageTo) {
			steady = append(steady, at.Sub(occ))
		}
	}
	for id, s := range starts {
		for occ := s; !occ.After(cutoff); occ = occ.Add(rc.every) {
			res.Expected++
			if _, ok := seen[occKey{id, occ.UnixMilli()}]; !ok {
				res.Lost++
				if len(res.LostSamples) < 10 {
					res.LostSamples = append(res.LostSamples, fmt.Sprintf("lost: %d:%d", id, occ.UnixMilli()))
				}
			}
		}
	}
	res.RingRate = float64(len(seen)) / time.Since(base).Seconds()
	res.Lateness = benchkit.Summarize(measured)
	res.LatenessSteady = benchkit.Summarize(steady)
	if res.Lost > 0 || res.Early > 0 || res.OffSchedule > 0 {
		return res, fmt.Errorf("recurring: %d occurrences lost, %d early, %d off the schedule", res.Lost, res.Early, res.OffSchedule)
	}
	return res, nil
}
