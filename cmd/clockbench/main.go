// Command clockbench drives a running clockd over REST, consumes the rings
// from a queue it binds itself, and reports create rates, request
// latencies, ring rate, lateness, early, lost and duplicate rings, and the
// machine's own ceilings measured in the same run (RabbitMQ publishing with
// confirms; MySQL one-row and multi-row INSERTs and id UPDATEs in a scratch
// database): every rate is judged as a ratio to its ceiling.
package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr)
	stop()
	if err != nil {
		var ue usageError
		if errors.As(err, &ue) {
			fmt.Fprintln(os.Stderr, "clockbench:", err)
			os.Exit(2)
		}
		fmt.Fprintln(os.Stderr, "clockbench:", err)
		os.Exit(1)
	}
}

type usageError struct{ error }

func (u usageError) Unwrap() error { return u.error }

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// run executes the selected scenarios and writes the report. It returns an
// error when a scenario could not run, or a ring or hot scenario saw early
// or lost rings.
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	cfg, err := parseConfig(args, getenv, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return nil
	}
	if err != nil {
		return usageError{err}
	}
	if cfg.cpuProfile != "" {
		f, err := os.Create(cfg.cpuProfile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	logf := func(format string, a ...any) {
		fmt.Fprintf(stderr, time.Now().Format("15:04:05.000")+" "+format+"\n", a...)
	}
	runID := randomHex(4)
	prefix := "bench-" + runID
	rep := &Report{
		Tool: "clockbench", RunID: runID, StartedAt: time.Now().UTC(), Addr: cfg.addr,
		Machine: machineInfo(), Flags: cfg.flags, Scenarios: cfg.scenarios, CPU: map[string]CPUUse{},
	}
	localServers, rep.ServerNotes = findServers("/proc", cfg.mysqlDSN, cfg.amqpURL)
	rep.Servers = localServers
	var rss *rssSampler
	if cfg.rssPID > 0 {
		rss = startRSS(cfg.rssPID)
	}
	a, err := newAPI(cfg.addr, cfg.clients+cfg.batchClients+8, cfg.httpTimeout, cfg.token)
	if err != nil {
		return err
	}
	defer a.close()

	needClockd := cfg.backlog > 0
	for _, s := range cfg.scenarios {
		needClockd = needClockd || !slices.Contains(ceilingScenarios, s)
	}
	if needClockd {
		if err := a.ready(ctx); err != nil {
			return err
		}
	}
	failed := func(name string, err error) {
		rep.Errors = append(rep.Errors, fmt.Sprintf("%s: %v", name, err))
		logf("%s failed: %v", name, err)
	}
	// createRate is the latest measured batch create rate: ring, hot and
	// sweep derive from it the lead time their create phase needs.
	var createRate float64
	ringCfg := func() (*config, float64) {
		c := *cfg
		if !cfg.nSet && rep.Broker != nil && rep.Broker.Rate > 0 {
			c.n = ringN(rep.Broker.Rate, cfg.ringPct, cfg.span)
			return &c, cfg.ringPct
		}
		return &c, 0
	}
	runScenario := func(s string) {
		if q, ok := quietBefore(ctx, cfg, s, logf); ok {
			if rep.Quiet == nil {
				rep.Quiet = map[string]QuietWait{}
			}
			rep.Quiet[s] = q
		}
		if rss != nil {
			rss.resetPhase()
		}
		mark := readCPU(cfg.rssPID)
		app := prefix + "-" + s
		var err error
		if (s == "ring" || s == "hot" || s == "sweep" && rep.Broker != nil) && createRate == 0 {
			createRate = calibrate(ctx, cfg, a, prefix+"-calibrate", logf)
		}
		switch s {
		case "mysql":
			rep.MySQL, err = runMySQLCeilings(ctx, cfg, runID, logf)
		case "broker":
			rep.Broker, err = runBroker(ctx, cfg, app, logf)
		case "create":
			rep.Create, err = runCreate(ctx, cfg, a, app, logf)
		case "batch":
			rep.Batch, err = runBatch(ctx, cfg, a, app, logf)
			if rep.Batch != nil {
				createRate = rep.Batch.Rate
			}
		case "ring", "hot":
			c, pct := ringCfg()
			if pct > 0 && s == "ring" {
				logf("ring: %g%% of the broker ceiling %s = %s (%d clocks over %s)", pct, fmtRate(rep.Broker.Rate),
					fmtRate(float64(c.n)/c.span.Seconds()), c.n, c.span)
			}
			var g *RingResult
			g, err = runRing(ctx, c, a, app, s == "hot", createRate, logf)
			if g != nil && g.CreateRate > 0 {
				createRate = g.CreateRate
			}
			if s == "ring" {
				if g != nil {
					g.PctOfCeiling = pct
				}
				rep.Ring = g
			} else {
				rep.Hot = g
			}
		case "recurring":
			rep.Recurring, err = runRecurring(ctx, cfg, a, app, logf)
		case "sweep":
			var ceiling float64
			if rep.Broker != nil {
				ceiling = rep.Broker.Rate
			}
			rep.Sweep, createRate, err = runSweep(ctx, cfg, a, prefix, ceiling, createRate, rep.Ring, logf)
		}
		if err != nil {
			failed(s, err)
		}
		rep.CPU[s] = cpuBetween(mark, readCPU(cfg.rssPID), cfg.rssPID)
		if cfg.rssPID > 0 {
			rep.addCosts(s)
		}
		if rss != nil {
			rss.phase(s)
		}
	}
	// The ceilings first, before a backlog insert too: they measure the
	// machine, with clockd idle.
	for _, s := range cfg.scenarios {
		if slices.Contains(ceilingScenarios, s) && ctx.Err() == nil {
			runScenario(s)
		}
	}
	if cfg.backlog > 0 && ctx.Err() == nil {
		if rss != nil {
			rss.resetPhase()
		}
		if rep.Backlog, err = runBacklog(ctx, cfg, a, logf); err != nil {
			failed("backlog", err)
		}
		if rss != nil {
			rss.phase("backlog")
		}
	}
	for _, s := range cfg.scenarios {
		if !slices.Contains(ceilingScenarios, s) && ctx.Err() == nil {
			runScenario(s)
		}
	}
	if rss != nil {
		rep.RSS = rss.stop()
	}
	rep.FinishedAt = time.Now().UTC()
	rep.evaluate()
	if err := rep.writeText(stdout); err != nil {
		return err
	}
	if cfg.out != "" {
		if err := rep.writeFiles(cfg.out); err != nil {
			return fmt.Errorf("write report: %w", err)
		}
		fmt.Fprintf(stdout, "\nreport written to %s/report.json and %s/report.html\n", cfg.out, cfg.out)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if n := len(rep.Failures) + len(rep.Errors); n > 0 {
		return fmt.Errorf("%s", strings.Join(append(rep.Failures, rep.Errors...), "; "))
	}
	return nil
}

// calibrate measures the batch create rate for a second, when no
// scenario measured it yet, so that ring and hot can size their lead time.
func calibrate(ctx context.Context, cfg *config, a *api, app string, logf func(string, ...any)) float64 {
	c := *cfg
	c.duration = time.Second
	res, err := runBatch(ctx, &c, a, app, func(string, ...any) {})
	if err != nil {
		logf("calibration failed (%v); using -lead %s", err, cfg.lead)
		return 0
	}
	logf("calibration: batch creates at %.0f clocks/s (1 s under application %s)", res.Rate, app)
	return res.Rate
}

// machineInfo describes the machine the bench runs on.
func machineInfo() Machine {
	m := Machine{
		NProc:     runtime.NumCPU(),
		OSArch:    runtime.GOOS + "/" + runtime.GOARCH,
		GoVersion: runtime.Version(),
		Time:      time.Now().UTC().Format(time.RFC3339),
	}
	m.Hostname, _ = os.Hostname()
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = strings.TrimSpace(string(b))
	}
	if v := procField("/proc/meminfo", "MemTotal"); v != "" {
		if kb, err := strconv.ParseFloat(strings.Fields(v)[0], 64); err == nil {
			m.MemTotalMiB = kb / 1024
		}
	}
	m.CPUModel = procField("/proc/cpuinfo", "model name")
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		if f := strings.Fields(string(b)); len(f) >= 3 {
			m.LoadAvg = strings.Join(f[:3], " ")
		}
	}
	return m
}

// procField returns the value of the first "key: value" line of a /proc file.
func procField(path, key string) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if ok && strings.TrimSpace(k) == key {
			return strings.TrimSpace(v)
		}
	}
	return ""
}
