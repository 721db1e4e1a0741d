// Command clockbench drives a running clockd over REST, consumes the rings
// from a queue it binds itself, and reports create rates, request
// latencies, ring rate, lateness, early, lost and duplicate rings, and the
// raw RabbitMQ ceiling measured in the same run.
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
	var rss *rssSampler
	if cfg.rssPID > 0 {
		rss = startRSS(cfg.rssPID)
	}
	a := newAPI(cfg.addr, cfg.clients+cfg.batchClients+8, cfg.httpTimeout)
	defer a.close()

	needClockd := cfg.backlog > 0
	for _, s := range cfg.scenarios {
		needClockd = needClockd || s != "broker"
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
	if cfg.backlog > 0 {
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
	// createRate is the latest measured batch create rate: ring and hot
	// derive from it the lead time their create phase needs.
	var createRate float64
	for _, s := range cfg.scenarios {
		if ctx.Err() != nil {
			break
		}
		if rss != nil {
			rss.resetPhase()
		}
		mark := readCPU(cfg.rssPID)
		app := prefix + "-" + s
		switch s {
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
			if createRate == 0 {
				createRate = calibrate(ctx, cfg, a, prefix+"-calibrate", logf)
			}
			var g *RingResult
			g, err = runRing(ctx, cfg, a, app, s == "hot", createRate, logf)
			if g != nil && g.CreateRate > 0 {
				createRate = g.CreateRate
			}
			if s == "ring" {
				rep.Ring = g
			} else {
				rep.Hot = g
			}
		}
		if err != nil {
			failed(s, err)
		}
		rep.CPU[s] = cpuBetween(mark, readCPU(cfg.rssPID), cfg.rssPID)
		if rss != nil {
			rss.phase(s)
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
