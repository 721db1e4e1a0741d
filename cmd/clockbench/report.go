package main

import (
	"cmp"
	"encoding/json"
	"fmt"
	"html/template"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Report is everything one run measured; report.json is its JSON form.
type Report struct {
	Tool       string              `json:"tool"`
	RunID      string              `json:"run_id"`
	StartedAt  time.Time           `json:"started_at"`
	FinishedAt time.Time           `json:"finished_at"`
	Addr       string              `json:"clockd_addr"`
	Machine    Machine             `json:"machine"`
	Flags      map[string]string   `json:"flags"`
	Scenarios  []string            `json:"scenarios"`
	Backlog    *BacklogResult      `json:"backlog,omitempty"`
	MySQL      *MySQLCeilingResult `json:"mysql_ceiling,omitempty"`
	Broker     *BrokerResult       `json:"broker,omitempty"`
	Create     *CreateResult       `json:"create,omitempty"`
	Batch      *CreateResult       `json:"batch,omitempty"`
	Ring       *RingResult         `json:"ring,omitempty"`
	Hot        *RingResult         `json:"hot,omitempty"`
	Sweep      *SweepResult        `json:"sweep,omitempty"`
	Recurring  *RecurringResult    `json:"recurring,omitempty"`
	RSS        *RSSResult          `json:"rss,omitempty"`
	CPU        map[string]CPUUse   `json:"cpu_by_scenario,omitempty"`
	// Quiet is the wait for a quiet machine before each scenario
	Quiet map[string]QuietWait `json:"quiet_wait_by_scenario,omitempty"`
	Costs []Cost               `json:"clockd_cpu_cost,omitempty"`
	// the local MySQL and RabbitMQ processes whose CPU time is reported
	// beside clockd's, and why one is not
	Servers     []server `json:"servers,omitempty"`
	ServerNotes []string `json:"server_notes,omitempty"`
	Targets     []Target `json:"targets,omitempty"`
	Failures    []string `json:"failures,omitempty"`
	Errors      []string `json:"errors,omitempty"`
}

// Machine describes where the run happened.
type Machine struct {
	NProc       int     `json:"nproc"`
	MemTotalMiB float64 `json:"mem_total_mib"`
	CPUModel    string  `json:"cpu_model,omitempty"`
	Kernel      string  `json:"kernel,omitempty"`
	Hostname    string  `json:"hostname,omitempty"`
	OSArch      string  `json:"os_arch"`
	GoVersion   string  `json:"go_version"`
	LoadAvg     string  `json:"loadavg_at_start"`
	Time        string  `json:"time"`
}

// addCosts records clockd's CPU time per 1,000 creates or rings of the
// scenario that just ran (rep.CPU[s] must be set).
func (r *Report) addCosts(s string) {
	cpu, servers := r.CPU[s].ClockdCPUS, r.CPU[s].ServerCPUS
	switch s {
	case "create":
		if r.Create != nil {
			r.Costs = append(r.Costs, newCost(s, "creates", r.Create.Clocks, cpu, servers))
		}
	case "batch":
		if r.Batch != nil {
			r.Costs = append(r.Costs, newCost(s, "creates", r.Batch.Clocks, cpu, servers))
		}
	case "ring", "hot":
		g := r.Ring
		if s == "hot" {
			g = r.Hot
		}
		if g != nil {
			r.Costs = append(r.Costs, newCost(s+" (create phase)", "creates", g.Created, g.ClockdCPUCreateS, g.ServerCPUCreateS),
				newCost(s, "rings", g.Received, g.ClockdCPURingS, g.ServerCPURingS))
		}
	case "sweep":
		if r.Sweep != nil {
			for _, p := range r.Sweep.Points {
				if !p.FromRing && p.Error == "" {
					r.Costs = append(r.Costs, newCost(fmt.Sprintf("sweep %g%%", p.Pct), "rings", p.Received, p.ClockdCPUS, p.ServerCPUS))
				}
			}
		}
	}
}

// ceilings are the figures of the run's ceiling scenarios, 0 when not
// measured.
type ceilings struct {
	broker, insertOne, insertMulti, update float64
	multiRows                              int
	// brokerCPU is the machine's CPU time per message at the broker
	// ceiling, in microseconds (0: not measured)
	brokerCPU float64
}

func (r *Report) ceilings() ceilings {
	var c ceilings
	if r.Broker != nil {
		c.broker, c.brokerCPU = r.Broker.Rate, r.Broker.CPUPerMsgUS
	}
	if m := r.MySQL; m != nil {
		if m.InsertOne != nil {
			c.insertOne = m.InsertOne.Rate
		}
		if m.InsertBatch != nil {
			c.insertMulti, c.multiRows = m.InsertBatch.Rate, m.InsertBatch.RowsPerStmt
		}
		if m.Update != nil {
			c.update = m.Update.Rate
		}
	}
	return c
}

// brokerName names the broker ceiling with its configurations.
func (r *Report) brokerName() string {
	if r.Broker == nil || len(r.Broker.Runs) < 2 {
		return "broker ceiling"
	}
	var chs []string
	for _, x := range r.Broker.Runs {
		chs = append(chs, strconv.Itoa(x.Publishers))
	}
	return fmt.Sprintf("broker ceiling, %d channel(s) (the best of %s)", r.Broker.Publishers, strings.Join(chs, " and "))
}

// evaluate fills in the ratios to the ceilings, the targets of issue 15
// and the failures (early or lost rings) from the results.
func (r *Report) evaluate() {
	r.Targets, r.Failures = nil, nil
	add := func(t Target) { r.Targets = append(r.Targets, t) }
	ceil := r.ceilings()
	multi := "multi-row INSERT ceiling"
	if ceil.multiRows > 0 {
		multi = fmt.Sprintf("%d-row INSERT ceiling", ceil.multiRows)
	}
	insertOne := "one-row autocommit INSERT ceiling"
	if r.MySQL != nil && r.MySQL.InsertOne != nil {
		insertOne = fmt.Sprintf("one-row autocommit INSERT ceiling (%d clients)", r.MySQL.InsertOne.Clients)
	}
	for _, x := range []*RingResult{r.Ring, r.Hot} {
		if x != nil {
			x.RingRatePctBroker = pct(x.RingRate, ceil.broker)
		}
	}
	if h := r.Hot; h != nil {
		add(ratioTarget(fmt.Sprintf("hot-second drain (%s clocks due within one second)", fmtInt(h.N)),
			">= 85% of the broker ceiling", h.RingRate, r.brokerName(), ceil.broker, 0.85))
		if h.RingRate > 0 {
			bound := float64(h.N)/h.RingRate + 1
			t := Target{Figure: fmt.Sprintf("hot second of %s clocks: last delivered", fmtInt(h.N)), Target: "within n / drain rate + 1 s",
				Measured: fmt.Sprintf("%.2f s after the second began (bound %.2f s)", h.LastReceiptS, bound),
				Met:      h.LastReceiptS <= bound && h.Lost == 0}
			t.Status = statusOf(t.Met)
			add(t)
		}
	}
	if g := r.Ring; g != nil {
		at := fmt.Sprintf(" (ring at %s", fmtRate(g.TargetRate))
		switch {
		case g.PctOfCeiling > 0:
			at += fmt.Sprintf(" = %g%% of the broker ceiling)", g.PctOfCeiling)
		case ceil.broker > 0:
			at += fmt.Sprintf(" = %.0f%% of the broker ceiling, set by -n)", pct(g.TargetRate, ceil.broker))
		default:
			at += ", no broker ceiling in this run)"
		}
		add(limitTarget("lateness p50"+at, g.Lateness.P50, 3, g.Received))
		add(limitTarget("lateness p99"+at, g.Lateness.P99, 15, g.Received))
		add(limitTarget("lateness p99.9"+at, g.Lateness.P999, 100, g.Received))
		t := Target{Figure: "early / lost rings" + at, Target: "0 / 0", Measured: fmt.Sprintf("%d / %d", g.Early, g.Lost), Met: g.Early == 0 && g.Lost == 0}
		t.Status = statusOf(t.Met)
		add(t)
	}
	if c := r.Create; c != nil {
		add(ratioTarget(fmt.Sprintf("single-clock REST creates, %d clients", c.Clients), ">= 2× the one-row autocommit INSERT ceiling",
			c.Rate, insertOne, ceil.insertOne, 2))
		add(limitTarget("single-clock create latency p99", c.Latency.P99, 25, c.Latency.Count))
	}
	if b := r.Batch; b != nil {
		add(ratioTarget(fmt.Sprintf("batch creates (%d per batch, %d clients)", b.BatchSize, b.Clients), ">= 80% of the "+multi,
			b.Rate, multi, ceil.insertMulti, 0.8))
	}
	if r.RSS != nil && r.RSS.MaxMiB > 0 {
		t := Target{Figure: "clockd max RSS", Target: "<= 300 MiB (with 10,000,000 pending)", Measured: fmt.Sprintf("%.1f MiB", r.RSS.MaxMiB), Met: r.RSS.MaxMiB <= 300}
		t.Status = statusOf(t.Met)
		add(t)
	}
	rings := []struct {
		name string
		r    *RingResult
	}{{"ring", r.Ring}, {"hot", r.Hot}}
	if r.Sweep != nil {
		for _, p := range r.Sweep.Points {
			if !p.FromRing {
				rings = append(rings, struct {
					name string
					r    *RingResult
				}{fmt.Sprintf("sweep %g%%", p.Pct), &RingResult{Early: p.Early, Lost: p.Lost}})
			}
		}
	}
	for _, x := range rings {
		if x.r == nil {
			continue
		}
		if x.r.Early > 0 {
			r.Failures = append(r.Failures, fmt.Sprintf("%s: %d clocks rang early", x.name, x.r.Early))
		}
		if x.r.Lost > 0 {
			r.Failures = append(r.Failures, fmt.Sprintf("%s: %d clocks lost (not received %s after the last ring time)", x.name, x.r.Lost, r.Flags["grace"]))
		}
	}
}

// section is one block of the report, shared by the text and HTML forms.
type section struct {
	Title  string
	Rows   [][2]string
	Notes  []string
	Charts []template.HTML
}

// fmtBrokerCPU tells the machine's CPU in a broker run's measured window
// (empty when not measured).
func fmtBrokerCPU(x BrokerRun) string {
	if x.CPU == nil || x.CPUPerMsgUS <= 0 {
		return ""
	}
	return fmt.Sprintf("; machine %.0f%% busy, %.0f µs of CPU per message", x.CPU.Machine, x.CPUPerMsgUS)
}

// fmtDrainCPU tells the machine's CPU use between the first ring received
// and the last, its CPU time per ring, and what rate the machine's cores
// would allow at that cost, against the broker ceiling's cost per message.
func fmtDrainCPU(u CPUUse, perRing float64, ceil ceilings) string {
	var procs []string
	if u.Clockd > 0 {
		procs = append(procs, fmt.Sprintf("clockd %.0f%%", u.Clockd))
	}
	for _, k := range sortedFloatKeys(u.Servers) {
		procs = append(procs, fmt.Sprintf("%s %.0f%%", k, u.Servers[k]))
	}
	procs = append(procs, fmt.Sprintf("clockbench %.0f%%", u.Clockbench))
	out := fmt.Sprintf("first to last receipt: machine %.0f%% busy (%g cores; %s of a core); %.0f µs of the machine's CPU per ring",
		u.Machine, u.Cores, strings.Join(procs, ", "), perRing)
	if ceil.brokerCPU > 0 {
		out += fmt.Sprintf(" (%.0f µs per message at the broker ceiling)", ceil.brokerCPU)
	}
	if u.Cores > 0 {
		allow := u.Cores * 1e6 / perRing
		out += fmt.Sprintf("; at that cost the cores allow %s", fmtRate(allow))
		if ceil.broker > 0 {
			out += fmt.Sprintf(" = %.0f%% of the broker ceiling", pct(allow, ceil.broker))
		}
	}
	return out
}

func fmtInt(n int) string {
	s := strconv.Itoa(n)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

func fmtRate(f float64) string { return fmtInt(int(math.Round(f))) + "/s" }

func fmtMs(f float64) string {
	switch {
	case f >= 100:
		return fmt.Sprintf("%.0f ms", f)
	case f >= 10:
		return fmt.Sprintf("%.1f ms", f)
	default:
		return fmt.Sprintf("%.2f ms", f)
	}
}

func fmtSummary(s Summary) string {
	if s.Count == 0 {
		return "no samples"
	}
	return fmt.Sprintf("p50 %s  p90 %s  p99 %s  p99.9 %s  max %s  (n=%s)",
		fmtMs(s.P50), fmtMs(s.P90), fmtMs(s.P99), fmtMs(s.P999), fmtMs(s.Max), fmtInt(s.Count))
}

func fmtErrors(total int, kinds map[string]int) string {
	if total == 0 {
		return "0"
	}
	var parts []string
	for _, k := range sortedKinds(kinds) {
		parts = append(parts, fmt.Sprintf("%s %s", k, fmtInt(kinds[k])))
	}
	return fmtInt(total) + " (" + strings.Join(parts, ", ") + ")"
}

func (r *Report) sections(withCharts bool) []section {
	var out []section
	m := r.Machine
	out = append(out, section{Title: "run", Rows: [][2]string{
		{"run", r.RunID + "  " + r.StartedAt.Format(time.RFC3339) + "  (" + fmt.Sprintf("%.0f s", r.FinishedAt.Sub(r.StartedAt).Seconds()) + ")"},
		{"clockd", r.Addr},
		{"machine", fmt.Sprintf("%d CPUs %s, %.1f GiB RAM, %s, %s, %s", m.NProc, m.CPUModel, m.MemTotalMiB/1024, m.Kernel, m.OSArch, m.GoVersion)},
		{"load average at start", m.LoadAvg + "  (clockd, MySQL, RabbitMQ and clockbench share this machine; anything else running skews the figures)"},
		{"scenarios", strings.Join(r.Scenarios, ",")},
	}})
	if b := r.Backlog; b != nil {
		s := section{Title: "backlog", Rows: [][2]string{
			{"application", b.Application},
			{"target", fmtInt(b.Target) + " pending clocks"},
		}}
		if b.Skipped {
			s.Rows = append(s.Rows, [2]string{"insert", "skipped"})
		} else {
			s.Rows = append(s.Rows,
				[2]string{"inserted", fmt.Sprintf("%s new + %s already present, from index %s, in %.1f s = %s",
					fmtInt(b.Inserted), fmtInt(b.Present), fmtInt(b.ResumedFrom), b.ElapsedS, fmtRate(b.Rate))},
				[2]string{"errors", fmtErrors(b.Errors, b.ErrorKinds)})
		}
		s.Notes = append(s.Notes, b.Note)
		s.Notes = append(s.Notes, b.ErrorSamples...)
		out = append(out, s)
	}
	ceil := r.ceilings()
	if m := r.MySQL; m != nil {
		s := section{Title: "MySQL ceilings", Rows: [][2]string{
			{"what", fmt.Sprintf("%s at %s, scratch database %s (dropped: %v), a table shaped like clockd's clock, %d-byte payloads; %.0f s warm-up, then %.0f s measured each",
				m.Version, m.Server, m.Database, m.Dropped, m.PayloadBytes, m.WarmupS, m.DurationS)},
		}}
		for _, c := range []*CeilingRun{m.InsertOne, m.InsertBatch, m.Update} {
			if c == nil {
				continue
			}
			v := fmt.Sprintf("%s rows/s, %d clients (%s statements; statement p50 %s p99 %s)",
				fmtInt(int(math.Round(c.Rate))), c.Clients, fmtInt(c.Statements), fmtMs(c.Latency.P50), fmtMs(c.Latency.P99))
			if c.Errors > 0 {
				v += fmt.Sprintf(", %d errors", c.Errors)
			}
			s.Rows = append(s.Rows, [2]string{c.What, v})
			s.Notes = append(s.Notes, c.ErrorSamples...)
		}
		if u, ok := r.CPU["mysql"]; ok && r.RSS != nil {
			idle := "idle"
			if u.Clockd > 5 {
				idle = "NOT idle: the ceilings are understated"
			}
			s.Rows = append(s.Rows, [2]string{"clockd meanwhile", fmt.Sprintf("%.1f%% of a core (%s)", u.Clockd, idle)})
		}
		s.Notes = append(s.Notes, m.Notes...)
		out = append(out, s)
	}
	if b := r.Broker; b != nil {
		s := section{Title: "broker ceiling", Rows: [][2]string{
			{"what", fmt.Sprintf("persistent mandatory publishes, confirm window %d per channel, %d-byte body, durable queue drained by a consumer; %.0f s warm-up, then %.0f s measured per channel count",
				b.Window, b.BodyBytes, b.WarmupS, b.DurationS)},
		}}
		for _, x := range b.Runs {
			mark := ""
			if len(b.Runs) > 1 && x.Publishers == b.Publishers {
				mark = "  <- ceiling"
			}
			cpu := fmtBrokerCPU(x)
			s.Rows = append(s.Rows, [2]string{fmt.Sprintf("%d channel(s)", x.Publishers),
				fmt.Sprintf("%s confirmed (%s in all, %.1f s), publish->consume p50 %s p99 %s%s%s",
					fmtRate(x.Rate), fmtInt(x.Acked), x.ElapsedS, fmtMs(x.HopLatency.P50), fmtMs(x.HopLatency.P99), cpu, mark)})
		}
		s.Rows = append(s.Rows,
			[2]string{"ceiling", fmt.Sprintf("%s with %d channel(s)", fmtRate(b.Rate), b.Publishers)},
			[2]string{"nacked/returned/unconfirmed", fmt.Sprintf("%d / %d / %d", b.Nacked, b.Returned, b.Unconfirm)},
			[2]string{"publish->consume", fmtSummary(b.HopLatency)})
		if x := b.Paced; x != nil {
			s.Rows = append(s.Rows, [2]string{fmt.Sprintf("paced at %g%% (1 channel)", x.PacedPct),
				fmt.Sprintf("%s asked, %s confirmed; publish->consume %s%s", fmtRate(x.TargetRate), fmtRate(x.Rate), fmtSummary(x.HopLatency), fmtBrokerCPU(*x))})
			s.Notes = append(s.Notes, x.Notes...)
		}
		for _, x := range b.Runs {
			s.Notes = append(s.Notes, x.Notes...)
		}
		if withCharts {
			s.Charts = append(s.Charts, svgTimeline(fmt.Sprintf("broker, %d channel(s): messages per second", b.Publishers), b.Timeline))
		}
		out = append(out, s)
	}
	for _, x := range []struct {
		title string
		c     *CreateResult
	}{{"create (single clock)", r.Create}, {"batch create", r.Batch}} {
		c := x.c
		if c == nil {
			continue
		}
		dur := time.Duration(c.DurationS * float64(time.Second)).String()
		what := fmt.Sprintf("%d clients for %s", c.Clients, dur)
		lat := "request latency"
		if c.BatchSize > 0 {
			what = fmt.Sprintf("%d clients x %d clocks per batch for %s", c.Clients, c.BatchSize, dur)
			lat = "batch request latency"
		}
		vs := "no MySQL ceiling in this run"
		if c.BatchSize > 0 && ceil.insertMulti > 0 {
			vs = fmt.Sprintf("%.0f%% of the %d-row INSERT ceiling (%s rows/s)", pct(c.Rate, ceil.insertMulti), ceil.multiRows, fmtInt(int(ceil.insertMulti)))
		} else if c.BatchSize == 0 && ceil.insertOne > 0 {
			vs = fmt.Sprintf("%.2f× the one-row autocommit INSERT ceiling (%s rows/s)", c.Rate/ceil.insertOne, fmtInt(int(ceil.insertOne)))
		}
		s := section{Title: x.title, Rows: [][2]string{
			{"what", what},
			{"created", fmt.Sprintf("%s clocks in %.1f s = %s (%s requests/s)", fmtInt(c.Clocks), c.ElapsedS, fmtRate(c.Rate), fmtInt(int(math.Round(c.RequestRate))))},
			{"vs ceiling", vs},
			{lat, fmtSummary(c.Latency)},
			{"errors", fmtErrors(c.Errors, c.ErrorKinds)},
		}, Notes: append([]string{c.Note}, c.ErrorSamples...)}
		if withCharts {
			s.Charts = append(s.Charts, svgTimeline(x.title+": clocks created per second", c.Timeline))
			if len(c.LatencyHist) > 0 {
				s.Charts = append(s.Charts, svgHistogram(x.title+": request latency", c.LatencyHist))
			}
		}
		out = append(out, s)
	}
	for _, x := range []struct {
		title string
		g     *RingResult
	}{{"ring", r.Ring}, {"hot second", r.Hot}} {
		g := x.g
		if g == nil {
			continue
		}
		verdict := "OK"
		if g.Early > 0 || g.Lost > 0 {
			verdict = "FAIL"
		}
		rr := fmtRate(g.RingRate)
		if g.RingRatePctBroker > 0 {
			rr += fmt.Sprintf(" (%.0f%% of the broker ceiling %s)", g.RingRatePctBroker, fmtRate(ceil.broker))
		}
		if x.g == r.Hot {
			rr = "drain " + rr
		}
		if ceil.update > 0 && g.RingRate > 0 {
			// a ring costs two row updates: the claim and the rung mark
			rr += fmt.Sprintf("; the %s rows/s UPDATE ceiling allows %s rings/s (claim + mark), this is %.0f%% of it",
				fmtInt(int(ceil.update)), fmtInt(int(ceil.update/2)), pct(g.RingRate, ceil.update/2))
		}
		target := fmtRate(g.TargetRate)
		if g.PctOfCeiling > 0 {
			target += fmt.Sprintf(" = %g%% of the broker ceiling", g.PctOfCeiling)
		}
		s := section{Title: x.title, Rows: [][2]string{
			{"what", fmt.Sprintf("%s clocks due %s .. %s (%.1f s, target %s), application %s",
				fmtInt(g.N), g.FirstDue.Format("15:04:05.000"), g.LastDue.Format("15:04:05.000"), g.SpanS, target, g.Application)},
			{"create phase", fmt.Sprintf("%s created in %.2f s = %s, lead %.2f s, errors %s",
				fmtInt(g.Created), g.CreateS, fmtRate(g.CreateRate), g.LeadS, fmtErrors(g.CreateErrors, g.CreateKinds))},
			{"received", fmt.Sprintf("%s of %s (%s deliveries), first %.3f s / last %.3f s after the first ring time",
				fmtInt(g.Received), fmtInt(g.Created), fmtInt(g.Deliveries), g.FirstReceiptS, g.LastReceiptS)},
			{"ring rate", rr},
			{"lateness", fmtSummary(g.Lateness)},
		}}
		if g.DrainCPU != nil && g.CPUPerRingUS > 0 {
			s.Rows = append(s.Rows, [2]string{"CPU while ringing", fmtDrainCPU(*g.DrainCPU, g.CPUPerRingUS, ceil)})
		}
		if len(g.WorstWindows) > 0 {
			worst := make([]string, len(g.WorstWindows))
			for i, w := range g.WorstWindows {
				worst[i] = w.String()
			}
			s.Rows = append(s.Rows, [2]string{"worst 0.5 s of ring times", strings.Join(worst, "; ")})
		}
		if b := r.Broker; x.g == r.Ring && b != nil && b.Paced != nil && b.Paced.PacedPct == g.PctOfCeiling {
			s.Rows = append(s.Rows, [2]string{"the broker alone", fmt.Sprintf("at this rate (broker scenario, paced): publish->consume p50 %s p99 %s p99.9 %s%s",
				fmtMs(b.Paced.HopLatency.P50), fmtMs(b.Paced.HopLatency.P99), fmtMs(b.Paced.HopLatency.P999), fmtBrokerCPU(*b.Paced))})
		}
		s.Rows = append(s.Rows, [][2]string{
			{"early / lost / duplicates", fmt.Sprintf("%d / %d / %d   %s", g.Early, g.Lost, g.Duplicates, verdict)},
			{"retried (attempt > 1)", fmtInt(g.Retried)},
			{"marked rung", g.RungCheck},
		}...)
		if len(g.Anomalies) > 0 {
			s.Rows = append(s.Rows, [2]string{"message anomalies", fmtErrors(sumKinds(g.Anomalies), g.Anomalies)})
		}
		if len(g.LostStatus) > 0 {
			s.Rows = append(s.Rows, [2]string{"lost clocks by status", fmtErrors(sumKinds(g.LostStatus), g.LostStatus)})
		}
		s.Notes = append(s.Notes, g.Notes...)
		s.Notes = append(s.Notes, g.EarlySamples...)
		s.Notes = append(s.Notes, g.LostSamples...)
		s.Notes = append(s.Notes, g.AnomalySamples...)
		s.Notes = append(s.Notes, g.CreateSamples...)
		if withCharts {
			s.Charts = append(s.Charts, svgTimeline(x.title+": clocks per second (created, due, received)", g.Timeline))
			if len(g.LatenessHist) > 0 {
				s.Charts = append(s.Charts, svgHistogram(x.title+": lateness (receipt - ring_at)", g.LatenessHist))
			}
		}
		out = append(out, s)
	}
	if g := r.Recurring; g != nil {
		out = append(out, g.section())
	}
	if w := r.Sweep; w != nil {
		s := section{Title: "sweep (ring rate as a share of the broker ceiling)", Rows: [][2]string{
			{"what", fmt.Sprintf("ring scenarios over %.0f s each at increasing shares of the broker ceiling %s; the knee is the first rate whose lateness p99 passes %s",
				w.SpanS, fmtRate(w.Ceiling), fmtMs(w.KneeP99Ms))},
		}}
		for _, p := range w.Points {
			v := fmt.Sprintf("target %s, rang %s; lateness p50 %s  p99 %s  p99.9 %s  max %s; early/lost/dup %d/%d/%d",
				fmtRate(p.TargetRate), fmtRate(p.RingRate), fmtMs(p.Lateness.P50), fmtMs(p.Lateness.P99), fmtMs(p.Lateness.P999), fmtMs(p.Lateness.Max),
				p.Early, p.Lost, p.Duplicates)
			if p.ClockdCPUMsPer1000 > 0 {
				v += fmt.Sprintf("; clockd %.0f ms CPU per 1,000 rings", p.ClockdCPUMsPer1000)
			}
			if p.FromRing {
				v += " (the ring scenario)"
			}
			if p.Error != "" {
				v = "failed: " + p.Error
			}
			s.Rows = append(s.Rows, [2]string{fmt.Sprintf("%g%%", p.Pct), v})
		}
		knee := fmt.Sprintf("p99 stayed under %s up to %g%% of the ceiling", fmtMs(w.KneeP99Ms), w.Points[len(w.Points)-1].Pct)
		if w.Knee >= 0 {
			knee = fmt.Sprintf("%s = %g%% of the broker ceiling (p99 first passes %s there)", fmtRate(w.KneeRate), w.KneePct, fmtMs(w.KneeP99Ms))
		}
		s.Rows = append(s.Rows, [2]string{"knee", knee})
		if len(w.Skipped) > 0 {
			var sk []string
			for _, p := range w.Skipped {
				sk = append(sk, fmt.Sprintf("%g%%", p))
			}
			s.Notes = append(s.Notes, "not run, past the knee: "+strings.Join(sk, ", ")+" (-sweep-all runs them)")
		}
		s.Notes = append(s.Notes, w.Notes...)
		out = append(out, s)
	}
	if len(r.Costs) > 0 {
		s := section{Title: "cost: clockd CPU time (utime+stime of its process); beside it, the local MySQL's and RabbitMQ's"}
		for _, c := range r.Costs {
			v := fmt.Sprintf("%6.0f ms per 1,000 %s  (%.2f s for %s)", c.MsPer1000, c.Per, c.ClockdCPUS, fmtInt(c.Count))
			for _, k := range sortedFloatKeys(c.ServerMsPer1000) {
				v += fmt.Sprintf("; %s %.0f ms", k, c.ServerMsPer1000[k])
			}
			s.Rows = append(s.Rows, [2]string{c.Scenario, v})
		}
		for _, sv := range r.Servers {
			s.Notes = append(s.Notes, fmt.Sprintf("%s: pid %d (the process listening on the address clockbench was given)", sv.Name, sv.PID))
		}
		s.Notes = append(s.Notes, r.ServerNotes...)
		out = append(out, s)
	}
	if r.RSS != nil {
		s := section{Title: "clockd memory", Rows: [][2]string{{"pid", strconv.Itoa(r.RSS.PID)}, {"max RSS", fmt.Sprintf("%.1f MiB", r.RSS.MaxMiB)}}}
		for _, k := range sortedFloatKeys(r.RSS.ByScenario) {
			s.Rows = append(s.Rows, [2]string{"max RSS during " + k, fmt.Sprintf("%.1f MiB", r.RSS.ByScenario[k])})
		}
		s.Notes = r.RSS.Notes
		out = append(out, s)
	}
	if len(r.CPU) > 0 {
		s := section{Title: "CPU (percent of one core; machine: of all cores)"}
		for _, name := range scenarioOrder {
			if u, ok := r.CPU[name]; ok {
				v := fmt.Sprintf("machine %3.0f%%  clockbench %3.0f%%", u.Machine, u.Clockbench)
				if r.RSS != nil {
					v += fmt.Sprintf("  clockd %3.0f%%", u.Clockd)
				}
				for _, k := range sortedFloatKeys(u.Servers) {
					v += fmt.Sprintf("  %s %3.0f%%", k, u.Servers[k])
				}
				v += "  load " + u.LoadAvg
				if q, ok := r.Quiet[name]; ok {
					if q.Quiet {
						v += fmt.Sprintf("  (began after %.1f s, the machine %.0f%% busy)", q.WaitedS, q.BusyPct)
					} else {
						v += fmt.Sprintf("  (began NOT quiet: the machine still %.0f%% busy after %.1f s)", q.BusyPct, q.WaitedS)
					}
				}
				s.Rows = append(s.Rows, [2]string{name, v})
			}
		}
		out = append(out, s)
	}
	if len(r.Targets) > 0 {
		s := section{Title: "targets (issue 15: ratios to this run's own ceilings)"}
		for _, t := range r.Targets {
			v := fmt.Sprintf("%-4s  %s (target %s)", t.Status, t.Measured, t.Target)
			if t.Ceiling != "" {
				v += "; " + t.Ceiling
			}
			s.Rows = append(s.Rows, [2]string{t.Figure, v})
		}
		out = append(out, s)
	}
	if len(r.Failures) > 0 || len(r.Errors) > 0 {
		s := section{Title: "FAILED"}
		for _, f := range r.Failures {
			s.Rows = append(s.Rows, [2]string{"failure", f})
		}
		for _, e := range r.Errors {
			s.Rows = append(s.Rows, [2]string{"error", e})
		}
		out = append(out, s)
	}
	return out
}

func sumKinds(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

// writeText prints the human-readable report.
func (r *Report) writeText(w io.Writer) error {
	var b strings.Builder
	for _, s := range r.sections(false) {
		fmt.Fprintf(&b, "\n== %s ==\n", s.Title)
		width := 0
		for _, row := range s.Rows {
			width = max(width, len(row[0]))
		}
		for _, row := range s.Rows {
			fmt.Fprintf(&b, "  %-*s  %s\n", width, row[0], row[1])
		}
		for _, n := range s.Notes {
			if n != "" {
				fmt.Fprintf(&b, "  - %s\n", n)
			}
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// writeJSON writes the report as indented JSON.
func (r *Report) writeJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

var pageTmpl = template.Must(template.New("page").Parse(`<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<title>clockbench {{.Report.RunID}}</title>
<style>
body{font-family:system-ui,sans-serif;margin:2em auto;max-width:1000px;color:#222}
h1{font-size:1.4em} h2{font-size:1.15em;border-bottom:1px solid #ccc;padding-bottom:.2em;margin-top:1.6em}
table{border-collapse:collapse;font-size:.92em} td{padding:.15em .8em .15em 0;vertical-align:top}
td:first-child{color:#555;white-space:nowrap} ul{font-size:.85em;color:#444}
.chart{margin:.8em 0} .fail{color:#b00;font-weight:bold}
</style></head><body>
<h1>clockbench report {{.Report.RunID}}</h1>
{{range .Sections}}<h2{{if eq .Title "FAILED"}} class="fail"{{end}}>{{.Title}}</h2>
<table>{{range .Rows}}<tr><td>{{index . 0}}</td><td>{{index . 1}}</td></tr>{{end}}</table>
{{if .Notes}}<ul>{{range .Notes}}{{if .}}<li>{{.}}</li>{{end}}{{end}}</ul>{{end}}
{{range .Charts}}<div class="chart">{{.}}</div>{{end}}
{{end}}
<h2>flags</h2><table>{{range $k, $v := .Report.Flags}}<tr><td>-{{$k}}</td><td>{{$v}}</td></tr>{{end}}</table>
</body></html>
`))

// writeHTML writes a self-contained page with inline SVG charts.
func (r *Report) writeHTML(w io.Writer) error {
	return pageTmpl.Execute(w, struct {
		Report   *Report
		Sections []section
	}{r, r.sections(true)})
}

// writeFiles writes report.json and report.html into dir.
func (r *Report) writeFiles(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for name, write := range map[string]func(io.Writer) error{"report.json": r.writeJSON, "report.html": r.writeHTML} {
		f, err := os.Create(filepath.Join(dir, name))
		if err != nil {
			return err
		}
		werr := write(f)
		if err := f.Close(); werr == nil {
			werr = err
		}
		if werr != nil {
			return fmt.Errorf("write %s: %w", name, werr)
		}
	}
	return nil
}

// SVG charts

const (
	chartW, chartH                     = 960, 300
	padL, padR, padT, padB             = 70, 20, 30, 45
	plotW, plotH                       = chartW - padL - padR, chartH - padT - padB
	svgHead                            = `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="11">`
	axisStyle                          = `stroke="#888" stroke-width="1"`
	gridStyle                          = `stroke="#e4e4e4" stroke-width="1"`
	seriesCreate, seriesDue, seriesRcv = "#1f77b4", "#aaaaaa", "#d62728"
)

var seriesColors = map[string]string{"create": seriesCreate, "due": seriesDue, "ring": seriesRcv, "confirmed": "#2ca02c", "consumed": "#ff7f0e"}

// niceStep returns a round step so that max/step gives about n ticks.
func niceStep(maxV float64, n int) float64 {
	if maxV <= 0 {
		return 1
	}
	raw := maxV / float64(n)
	mag := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 2.5, 5, 10} {
		if m*mag >= raw {
			return m * mag
		}
	}
	return 10 * mag
}

func fmtAxis(v float64) string {
	switch {
	case v >= 1e6:
		return strconv.FormatFloat(v/1e6, 'f', -1, 64) + "M"
	case v >= 1e3:
		return strconv.FormatFloat(v/1e3, 'f', -1, 64) + "k"
	default:
		return strconv.FormatFloat(v, 'f', -1, 64)
	}
}

// svgTimeline draws every series of a timeline as a rate (events per
// second) over time.
func svgTimeline(title string, tl *TimelineJSON) template.HTML {
	var b strings.Builder
	fmt.Fprintf(&b, svgHead, chartW, chartH, chartW, chartH)
	fmt.Fprintf(&b, `<text x="%d" y="18" font-size="13" font-weight="bold">%s</text>`, padL, template.HTMLEscapeString(title))
	if tl == nil || len(tl.Series) == 0 || len(tl.Series[0].Counts) == 0 {
		b.WriteString(`<text x="400" y="150">no data</text></svg>`)
		return template.HTML(b.String())
	}
	perSec := 1000 / tl.BucketMs
	n := len(tl.Series[0].Counts)
	maxV := 0.0
	for _, s := range tl.Series {
		for _, c := range s.Counts {
			maxV = max(maxV, float64(c)*perSec)
		}
	}
	step := niceStep(maxV, 5)
	top := math.Max(step, math.Ceil(maxV/step)*step)
	x := func(i float64) float64 { return padL + i/float64(n)*plotW }
	y := func(v float64) float64 { return padT + plotH - v/top*plotH }
	for v := 0.0; v <= top+step/2; v += step {
		fmt.Fprintf(&b, `<line x1="%d" x2="%d" y1="%.1f" y2="%.1f" %s/>`, padL, padL+plotW, y(v), y(v), gridStyle)
		fmt.Fprintf(&b, `<text x="%d" y="%.1f" text-anchor="end">%s/s</text>`, padL-5, y(v)+4, fmtAxis(v))
	}
	totalS := float64(n) * tl.BucketMs / 1000
	tstep := niceStep(totalS, 10)
	for t := 0.0; t <= totalS+1e-9; t += tstep {
		xi := x(t * 1000 / tl.BucketMs)
		fmt.Fprintf(&b, `<line x1="%.1f" x2="%.1f" y1="%d" y2="%d" %s/>`, xi, xi, padT+plotH, padT+plotH+4, axisStyle)
		fmt.Fprintf(&b, `<text x="%.1f" y="%d" text-anchor="middle">%ss</text>`, xi, padT+plotH+16, strconv.FormatFloat(t, 'f', -1, 64))
	}
	fmt.Fprintf(&b, `<line x1="%d" x2="%d" y1="%d" y2="%d" %s/>`, padL, padL+plotW, padT+plotH, padT+plotH, axisStyle)
	fmt.Fprintf(&b, `<line x1="%d" x2="%d" y1="%d" y2="%d" %s/>`, padL, padL, padT, padT+plotH, axisStyle)
	fmt.Fprintf(&b, `<text x="%d" y="%d" text-anchor="middle">time since the scenario started (%.0f ms buckets)</text>`, padL+plotW/2, chartH-8, tl.BucketMs)
	// the schedule ("due") first, so that what was measured is drawn over it
	series := slices.Clone(tl.Series)
	slices.SortStableFunc(series, func(a, b Series) int {
		return cmp.Compare(boolInt(a.Name != "due"), boolInt(b.Name != "due"))
	})
	for k, s := range series {
		color := seriesColors[s.Name]
		if color == "" {
			color = "#9467bd"
		}
		var pts strings.Builder
		for i, c := range s.Counts {
			// a step line: flat across each bucket
			v := y(float64(c) * perSec)
			fmt.Fprintf(&pts, "%.1f,%.1f %.1f,%.1f ", x(float64(i)), v, x(float64(i+1)), v)
		}
		fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="1.5" points="%s"/>`, color, strings.TrimSpace(pts.String()))
		lx := padL + plotW - 130
		ly := padT + 10 + 16*k
		fmt.Fprintf(&b, `<line x1="%d" x2="%d" y1="%d" y2="%d" stroke="%s" stroke-width="3"/>`, lx, lx+20, ly, ly, color)
		fmt.Fprintf(&b, `<text x="%d" y="%d">%s</text>`, lx+26, ly+4, template.HTMLEscapeString(s.Name))
	}
	b.WriteString(`</svg>`)
	return template.HTML(b.String())
}

// svgHistogram draws log-scaled buckets as equal-width bars with a log
// count axis, so that the tail stays visible.
func svgHistogram(title string, buckets []Bucket) template.HTML {
	var b strings.Builder
	fmt.Fprintf(&b, svgHead, chartW, chartH, chartW, chartH)
	fmt.Fprintf(&b, `<text x="%d" y="18" font-size="13" font-weight="bold">%s (log-scaled buckets, log count axis)</text>`, padL, template.HTMLEscapeString(title))
	if len(buckets) == 0 {
		b.WriteString(`<text x="400" y="150">no data</text></svg>`)
		return template.HTML(b.String())
	}
	maxC := 0
	for _, k := range buckets {
		maxC = max(maxC, k.Count)
	}
	top := math.Ceil(math.Log10(float64(maxC) + 1))
	top = math.Max(top, 1)
	y := func(c int) float64 { return padT + plotH - math.Log10(float64(c)+1)/top*plotH }
	for p := 0.0; p <= top; p++ {
		v := math.Pow(10, p)
		yy := padT + plotH - math.Log10(v+1)/top*plotH
		if p == 0 {
			yy = padT + plotH
			v = 0
		}
		fmt.Fprintf(&b, `<line x1="%d" x2="%d" y1="%.1f" y2="%.1f" %s/>`, padL, padL+plotW, yy, yy, gridStyle)
		fmt.Fprintf(&b, `<text x="%d" y="%.1f" text-anchor="end">%s</text>`, padL-5, yy+4, fmtAxis(v))
	}
	bw := float64(plotW) / float64(len(buckets))
	labelEvery := int(math.Ceil(float64(len(buckets)) / 16))
	for i, k := range buckets {
		x0 := padL + float64(i)*bw
		color := "#1f77b4"
		label := fmtEdge(k.Lo)
		if k.Hi <= 0 {
			color, label = "#d62728", "early"
		}
		yy := y(k.Count)
		fmt.Fprintf(&b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s"><title>%s .. %s ms: %d</title></rect>`,
			x0+1, yy, math.Max(bw-2, 1), padT+plotH-yy, color, fmtEdge(k.Lo), fmtEdge(k.Hi), k.Count)
		if i%labelEvery == 0 || k.Hi <= 0 {
			fmt.Fprintf(&b, `<text x="%.1f" y="%d" text-anchor="middle">%s</text>`, x0, padT+plotH+16, label)
		}
	}
	fmt.Fprintf(&b, `<line x1="%d" x2="%d" y1="%d" y2="%d" %s/>`, padL, padL+plotW, padT+plotH, padT+plotH, axisStyle)
	fmt.Fprintf(&b, `<text x="%d" y="%d" text-anchor="middle">milliseconds (bucket lower edge)</text>`, padL+plotW/2, chartH-8)
	b.WriteString(`</svg>`)
	return template.HTML(b.String())
}

// fmtEdge formats a bucket edge in ms, or in seconds from 1 s on.
func fmtEdge(v float64) string {
	if math.Abs(v) >= 1000 {
		return strconv.FormatFloat(v/1000, 'g', 3, 64) + "s"
	}
	return strconv.FormatFloat(v, 'g', 3, 64)
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}
