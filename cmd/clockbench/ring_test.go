package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/clockd/clockd/internal/benchkit"
	"github.com/clockd/clockd/internal/testenv"
)

// fakeClockd is a minimal stand-in for clockd: it accepts creates and
// publishes each clock at its ring time the way the SPEC says. fault, when
// set, can make a clock ring early ("early"), never ("drop") or twice
// ("dup").
type fakeClockd struct {
	t        *testing.T
	exchange string
	fault    func(bid string) string

	mu     sync.Mutex
	ch     *amqp.Channel
	nextID int64
	timers []*time.Timer
}

type fakeClock struct {
	Application string `json:"application"`
	BusinessID  string `json:"business_id"`
	Payload     string `json:"payload"`
	RingAt      string `json:"ring_at"`
	MaxAttempts int    `json:"max_attempts"`
}

func startFake(t *testing.T, url, exchange string, fault func(string) string) *httptest.Server {
	conn, err := amqp.Dial(url)
	if err != nil {
		t.Fatal(err)
	}
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if err := ch.ExchangeDeclare(exchange, "direct", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	f := &fakeClockd{t: t, exchange: exchange, fault: fault, ch: ch}
	srv := httptest.NewServer(f)
	t.Cleanup(func() {
		srv.Close()
		f.mu.Lock()
		for _, tm := range f.timers {
			tm.Stop()
		}
		f.mu.Unlock()
		_ = ch.ExchangeDelete(exchange, false, false)
		conn.Close()
	})
	return srv
}

func (f *fakeClockd) create(c fakeClock) (map[string]any, error) {
	ringAt, err := time.Parse(time.RFC3339Nano, c.RingAt)
	if err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.nextID++
	id := f.nextID
	fault := ""
	if f.fault != nil {
		fault = f.fault(c.BusinessID)
	}
	publish := func() {
		f.mu.Lock()
		defer f.mu.Unlock()
		_ = f.ch.Publish(f.exchange, c.Application, true, false, amqp.Publishing{
			ContentType: "application/json", DeliveryMode: amqp.Persistent, MessageId: strconv.FormatInt(id, 10),
			Timestamp: time.Now(), Body: []byte(c.Payload),
			Headers: amqp.Table{"x-clock-application": c.Application, "x-clock-business-id": c.BusinessID,
				"x-clock-ring-at": ringAt.UTC().Format("2006-01-02T15:04:05.000Z07:00"), "x-clock-attempt": int32(1)},
		})
	}
	at := time.Until(ringAt)
	switch fault {
	case "drop":
	case "early":
		// at once: as early as the test's lead time allows, so that a slow
		// delivery on a busy machine cannot make it on time
		f.timers = append(f.timers, time.AfterFunc(0, publish))
	case "dup":
		f.timers = append(f.timers, time.AfterFunc(at, publish), time.AfterFunc(at+time.Millisecond, publish))
	default:
		f.timers = append(f.timers, time.AfterFunc(at, publish))
	}
	return map[string]any{"id": id, "application": c.Application, "business_id": c.BusinessID, "status": "pending"}, nil
}

func (f *fakeClockd) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	switch {
	case r.URL.Path == "/readyz":
		fmt.Fprint(w, "{}")
	case r.Method == http.MethodPost && r.URL.Path == "/v1/clocks":
		var c fakeClock
		if err := json.NewDecoder(r.Body).Decode(&c); err != nil {
			http.Error(w, err.Error(), 400)
			return
		}
		out, err := f.create(c)
		if err != nil {
			http.Error(w, err.Error(), 400)
			return
		}
		w.WriteHeader(201)
		_ = json.NewEncoder(w).Encode(out)
	case r.Method == http.MethodPost && r.URL.Path == "/v1/clocks/batch":
		var req struct {
			Clocks []fakeClock `json:"clocks"`
		}
		dec := json.NewDecoder(r.Body)
		dec.DisallowUnknownFields()
		if err := dec.Decode(&req); err != nil {
			http.Error(w, err.Error(), 400)
			return
		}
		var results []map[string]any
		for _, c := range req.Clocks {
			out, err := f.create(c)
			if err != nil {
				results = append(results, map[string]any{"status": 400, "error": map[string]string{"code": "invalid_argument", "message": err.Error()}})
				continue
			}
			results = append(results, map[string]any{"status": 201, "clock": out})
		}
		b, _ := json.Marshal(map[string]any{"results": results})
		_, _ = w.Write(b)
	case r.Method == http.MethodGet && r.URL.Path == "/v1/clocks":
		fmt.Fprint(w, `{"clocks":[],"next":""}`)
	default:
		w.WriteHeader(404)
		fmt.Fprint(w, `{"error":{"code":"not_found","message":"no such clock"}}`)
	}
}

func TestRingScenarioAgainstFake(t *testing.T) {
	url := testenv.AMQPURL(t)
	exchange := testenv.Name("clockbench_x_")
	faults := map[string]string{"r5": "early", "r7": "drop", "r9": "dup"}
	srv := startFake(t, url, exchange, func(bid string) string { return faults[bid] })
	cfg := testConfig(t, "-addr", srv.URL, "-amqp", url, "-exchange", exchange,
		"-n", "300", "-span", "1200ms", "-lead", "500ms", "-grace", "1s", "-settle", "200ms", "-batch-size", "100")
	a, err := newAPI(cfg.addr, 8, 10*time.Second, "")
	if err != nil {
		t.Fatal(err)
	}
	defer a.close()
	res, err := runRing(context.Background(), cfg, a, testenv.Name("bench-"), false, 0, t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	if res.Created != 300 || res.Received != 299 || res.Early != 1 || res.Lost != 1 || res.Duplicates != 1 {
		t.Errorf("created %d received %d early %d lost %d duplicates %d, want 300 299 1 1 1",
			res.Created, res.Received, res.Early, res.Lost, res.Duplicates)
	}
	if res.Lateness.Count != 299 || res.Lateness.Min >= 0 || res.Lateness.P50 < 0 {
		t.Errorf("lateness %+v", res.Lateness)
	}
	if len(res.Anomalies) != 0 {
		t.Errorf("anomalies %v %q", res.Anomalies, res.AnomalySamples)
	}
	if res.LostStatus["get 404"] != 1 {
		t.Errorf("lost status %v", res.LostStatus)
	}
	if res.RingRate <= 0 || res.Timeline == nil || len(res.LatenessHist) == 0 {
		t.Errorf("rate %v timeline %v hist %v", res.RingRate, res.Timeline, res.LatenessHist)
	}
	// 1.2 s of ring times: three windows, holding every received clock
	inWindows := 0
	for _, w := range res.LatenessWindows {
		inWindows += w.Count
	}
	if len(res.LatenessWindows) != 3 || inWindows != 299 || len(res.WorstWindows) != 3 {
		t.Errorf("lateness windows %+v (worst %+v), want 3 holding 299 clocks", res.LatenessWindows, res.WorstWindows)
	}
	// over a second from the first receipt to the last: the machine's CPU
	// in between is told, per ring
	if u := res.DrainCPU; u == nil || u.Cores < 1 || u.Machine < 0 || u.Machine > 100 || u.WallS < 0.5 || res.CPUPerRingUS <= 0 {
		t.Errorf("CPU while ringing %+v, %v µs per ring", u, res.CPUPerRingUS)
	}
}

// The CPU of a drain is told between two readings within it (benchkit's
// series), and per ring received between those readings.
func TestCPUSeriesWindow(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 10, 0, 0, 0, time.UTC)
	s := &cpuSeries{}
	for i := range 10 { // a reading every 100 ms; the machine 2 cores, half busy
		s.Add(cpuMark{Mark: benchkit.Mark{When: t0.Add(time.Duration(i) * 100 * time.Millisecond),
			Total: float64(i) * 20, Idle: float64(i) * 10}, pid: float64(i) * 3})
	}
	a, b, ok := s.Window(t0.Add(150*time.Millisecond), t0.Add(720*time.Millisecond))
	if !ok || !a.When.Equal(t0.Add(200*time.Millisecond)) || !b.When.Equal(t0.Add(700*time.Millisecond)) {
		t.Fatalf("window = %v .. %v (%v), want the readings at 200 and 700 ms", a.When, b.When, ok)
	}
	u := cpuBetween(a, b, 1)
	if u.Machine != 50 || u.Cores != 2 || math.Abs(u.MachineBusyS-0.5) > 1e-9 || math.Abs(u.ClockdCPUS-0.15) > 1e-9 {
		t.Errorf("use %+v, want 50%% of 2 cores, 0.5 CPU s, clockd 0.15 s", u)
	}
	if got := u.perOp(1000); math.Abs(got-500) > 1e-9 {
		t.Errorf("per op = %v µs, want 500", got)
	}
	if got := u.perOp(0); got != 0 {
		t.Errorf("per op of nothing = %v, want 0", got)
	}
	recs := []ringRec{{recv: t0.Add(100 * time.Millisecond)}, {recv: t0.Add(200 * time.Millisecond)},
		{recv: t0.Add(450 * time.Millisecond)}, {recv: t0.Add(700 * time.Millisecond)}, {recv: t0.Add(701 * time.Millisecond)}}
	if n := receivedBetween(recs, a.When, b.When); n != 3 {
		t.Errorf("received between = %d, want 3", n)
	}
}

// The lateness of each half second of ring times, in order, and the three
// windows with the latest ring first: a stall stands out.
func TestLateWindows(t *testing.T) {
	ms := func(v ...int) []time.Duration {
		var out []time.Duration
		for _, x := range v {
			out = append(out, time.Duration(x)*time.Millisecond)
		}
		return out
	}
	all, worst := lateWindows(map[int][]time.Duration{
		0: ms(1, 2, 3), 1: ms(2, 2, 200), 3: ms(1, 1, 1), 4: ms(5, 6, 40), 7: ms(9),
	})
	var starts []float64
	for _, w := range all {
		starts = append(starts, w.StartS)
	}
	if !slices.Equal(starts, []float64{0, 0.5, 1.5, 2, 3.5}) || all[1].Count != 3 || all[1].P50 != 2 || all[1].Max != 200 {
		t.Fatalf("windows %+v", all)
	}
	if len(worst) != 3 || worst[0].StartS != 0.5 || worst[1].StartS != 2 || worst[2].StartS != 3.5 {
		t.Fatalf("worst %+v, want the windows at 0.5, 2 and 3.5 s", worst)
	}
	if got := worst[0].String(); got != "0.5-1.0 s: p50 2.00 ms p99 200 ms max 200 ms" {
		t.Fatalf("printed %q", got)
	}
	if all, worst := lateWindows(nil); all != nil || len(worst) != 0 {
		t.Fatalf("no clocks: %+v %+v", all, worst)
	}
}

func TestRunAgainstFake(t *testing.T) {
	url := testenv.AMQPURL(t)
	exchange := testenv.Name("clockbench_x_")
	srv := startFake(t, url, exchange, nil)
	out := filepath.Join(t.TempDir(), "bench-out")
	mysqlDSN := serverDSN(t)
	args := []string{"-scenario", "create,batch,ring,hot,ceilings,sweep", "-exchange", exchange, "-out", out,
		"-mysql", mysqlDSN, "-ceiling-warmup", "100ms", "-ceiling-duration", "300ms", "-sweep", "1,2", "-sweep-all",
		"-duration", "300ms", "-clients", "4", "-batch-size", "50", "-batch-clients", "2",
		"-n", "200", "-span", "300ms", "-lead", "400ms", "-hot-n", "500", "-grace", "1s", "-settle", "100ms",
		"-rss-pid", strconv.Itoa(os.Getpid()), "-quiet-max", "500ms"}
	env := map[string]string{"CLOCKD_ADDR": srv.URL, "CLOCKD_AMQP_URL": url}
	var stdout, stderr bytes.Buffer
	err := run(context.Background(), args, func(k string) string { return env[k] }, &stdout, &stderr)
	if err != nil {
		t.Fatalf("run: %v\n%s\n%s", err, stdout.String(), stderr.String())
	}
	for _, want := range []string{"== create (single clock) ==", "== batch create ==", "== ring ==", "== hot second ==", "== broker ceiling ==",
		"== clockd memory ==", "0 / 0 / 0   OK", "== MySQL ceilings ==", "== sweep", "== cost: clockd CPU time", "targets (issue 15"} {
		if !strings.Contains(stdout.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, stdout.String())
		}
	}
	b, err := os.ReadFile(filepath.Join(out, "report.json"))
	if err != nil {
		t.Fatal(err)
	}
	var rep Report
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatal(err)
	}
	if rep.Ring == nil || rep.Hot == nil || rep.Create == nil || rep.Batch == nil || rep.Broker == nil || rep.RSS == nil || rep.MySQL == nil || rep.Sweep == nil {
		t.Fatalf("report lacks a scenario: %s", b)
	}
	if strings.Join(rep.Scenarios, ",") != "mysql,broker,create,batch,ring,hot,sweep" {
		t.Errorf("scenarios %v", rep.Scenarios)
	}
	if m := rep.MySQL; m.InsertOne == nil || m.InsertOne.Rate <= 0 || m.InsertBatch.Rate <= 0 || m.Update.Rate <= 0 || !m.Dropped {
		t.Errorf("mysql ceilings %+v", m)
	}
	if len(rep.Broker.Runs) != 2 {
		t.Errorf("broker runs %+v, want 1 and 4 channels", rep.Broker.Runs)
	}
	if sw := rep.Sweep; len(sw.Points) != 2 || sw.Points[0].Received != sw.Points[0].N || sw.Points[1].N != ringN(rep.Broker.Rate, 2, 300*time.Millisecond) {
		t.Errorf("sweep %+v", sw)
	}
	statuses := map[string]int{}
	for _, tg := range rep.Targets {
		statuses[tg.Status]++
		if tg.Status == statusSkip {
			t.Errorf("target %q skipped although every ceiling ran", tg.Figure)
		}
	}
	if statuses[statusPass] == 0 {
		t.Errorf("no target passed: %+v", rep.Targets)
	}
	// clockbench's own pid stands in for clockd's: the costs are there
	if len(rep.Costs) < 6 {
		t.Errorf("costs %+v", rep.Costs)
	}
	if rep.Hot.Received != 500 || rep.Ring.Received != 200 || rep.Create.Clocks == 0 || rep.Batch.Clocks == 0 {
		t.Errorf("hot %d ring %d create %d batch %d", rep.Hot.Received, rep.Ring.Received, rep.Create.Clocks, rep.Batch.Clocks)
	}
	if rep.Hot.FirstDue.Nanosecond() != 0 {
		t.Errorf("hot second starts at %v, not on a whole second", rep.Hot.FirstDue)
	}
	if rep.Machine.NProc == 0 || rep.Machine.MemTotalMiB == 0 || rep.Flags["n"] != "200" {
		t.Errorf("machine %+v flags %v", rep.Machine, rep.Flags)
	}
	if rep.RSS.MaxMiB <= 0 {
		t.Errorf("rss %+v", rep.RSS)
	}
	// each scenario looked at the machine's CPU first (half a second, as
	// -quiet-max allows one look)
	for _, s := range rep.Scenarios {
		if q, ok := rep.Quiet[s]; !ok || q.WaitedS < 0.45 || q.WaitedS > 5 || q.BusyPct < 0 || q.BusyPct > 100 {
			t.Errorf("%s: quiet wait %+v (%v)", s, q, ok)
		}
	}
}

func TestRunFailsOnEarlyRing(t *testing.T) {
	url := testenv.AMQPURL(t)
	exchange := testenv.Name("clockbench_x_")
	srv := startFake(t, url, exchange, func(bid string) string {
		if bid == "r3" {
			return "early"
		}
		return ""
	})
	args := []string{"-addr", srv.URL, "-amqp", url, "-scenario", "ring", "-exchange", exchange, "-out", "",
		"-n", "50", "-span", "200ms", "-lead", "300ms", "-grace", "1s", "-settle", "100ms"}
	var stdout bytes.Buffer
	err := run(context.Background(), args, func(string) string { return "" }, &stdout, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "1 clocks rang early") {
		t.Errorf("run = %v, want an early-ring failure\n%s", err, stdout.String())
	}
}

func TestParseConfig(t *testing.T) {
	env := map[string]string{"CLOCKD_ADDR": "127.0.0.1:9999/", "CLOCKD_AMQP_URL": "amqp://u:secret@h:5672/"}
	cfg, err := parseConfig([]string{"-scenario", "hot, ring,broker"}, func(k string) string { return env[k] }, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.addr != "http://127.0.0.1:9999" || cfg.amqpURL != "amqp://u:secret@h:5672/" {
		t.Errorf("addr %q amqp %q", cfg.addr, cfg.amqpURL)
	}
	if strings.Join(cfg.scenarios, ",") != "broker,ring,hot" {
		t.Errorf("scenarios %v", cfg.scenarios)
	}
	if strings.Contains(cfg.flags["amqp"], "secret") {
		t.Errorf("password in the report: %q", cfg.flags["amqp"])
	}
	all := testConfig(t)
	if strings.Join(all.scenarios, ",") != "mysql,broker,create,batch,ring,hot,sweep" || all.clients != 64 || all.batchSize != 500 || all.n != 50000 || all.nSet {
		t.Errorf("defaults: %+v", all)
	}
	if fmt.Sprint(all.brokerPublishers) != "[1 4]" || fmt.Sprint(all.sweepPcts) != "[10 25 50 70 85]" || all.ringPct != 50 ||
		all.ceilingDuration != 5*time.Second || all.mysqlDSN != "root:@tcp(127.0.0.1:3306)/" {
		t.Errorf("defaults: %+v", all)
	}
	if c := testConfig(t, "-n", "100", "-mysql", "u:pw@tcp(db:3306)/x"); !c.nSet || strings.Contains(c.flags["mysql"], "pw") {
		t.Errorf("-n given: nSet %v; mysql flag %q", c.nSet, c.flags["mysql"])
	}
	for _, args := range [][]string{
		{"-scenario", "nope"}, {"-batch-size", "1001"}, {"-clients", "0"}, {"-span", "0s"}, {"extra"},
		{"-broker-publishers", "0"}, {"-broker-publishers", ""}, {"-sweep", "x"}, {"-sweep", "", "-scenario", "sweep"},
		{"-ring-pct", "0"}, {"-ceiling-duration", "0s"}, {"-mysql", "not a dsn"},
		{"-quiet-busy", "-1"}, {"-quiet-busy", "101"}, {"-quiet-max", "-1s"},
	} {
		if _, err := parseConfig(args, func(string) string { return "" }, io.Discard); err == nil {
			t.Errorf("parseConfig(%q) accepted", args)
		}
	}
	if err := run(context.Background(), []string{"-h"}, func(string) string { return "" }, io.Discard, io.Discard); err != nil {
		t.Errorf("-h: %v", err)
	}
}
