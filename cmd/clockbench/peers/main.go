// Command peers measures two job-queue peers of clockd, asynq (Redis) and
// River (PostgreSQL), on clockbench's hot and ring scenarios, so that
// clockd's figures can be compared with theirs on the same machine.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

func main() {
	var (
		cfg        config
		peers      = flag.String("peer", "all", "asynq, river or all")
		scenarios  = flag.String("scenario", "all", "hot, ring or all (ring, then hot)")
		redisURL   = flag.String("redis", "redis://127.0.0.1:6379/15", "asynq: Redis URL; its database is flushed before each run")
		pgDSN      = flag.String("pg", "postgres://postgres@127.0.0.1:5432/peers?sslmode=disable&pool_max_conns=20", "river: PostgreSQL DSN; the database is created if missing and migrated, river_job is truncated before each run")
		aConc      = flag.Int("asynq-concurrency", 100, "asynq: server Concurrency")
		aDelayed   = flag.Duration("asynq-delayed-check", 100*time.Millisecond, "asynq: DelayedTaskCheckInterval")
		aTaskCheck = flag.Duration("asynq-task-check", 0, "asynq: TaskCheckInterval, the sleep when every queue is empty (0: asynq's default, 1s)")
		aRoundUp   = flag.Bool("asynq-round-up", false, "asynq: ProcessAt the due time rounded up to a whole second, so that no job runs early (asynq's schedule has whole seconds)")
		aEnq       = flag.Int("asynq-enqueuers", 32, "asynq: goroutines calling Client.Enqueue")
		rWorkers   = flag.Int("river-workers", 100, "river: MaxWorkers of the default queue")
		rPoll      = flag.Duration("river-poll", time.Millisecond, "river: FetchPollInterval")
		rCooldown  = flag.Duration("river-cooldown", time.Millisecond, "river: FetchCooldown (River's minimum is 1ms)")
	)
	flag.IntVar(&cfg.n, "n", 0, "jobs per run (0: 100000 for hot, 5000 for ring)")
	flag.DurationVar(&cfg.span, "span", 10*time.Second, "ring: the due times are spread evenly over this span")
	flag.DurationVar(&cfg.lead, "lead", 0, "time from the start of the enqueue to the first due time (0: at least 5s, 2s + 2 × n / the enqueue rate of a 2,000-job probe)")
	flag.DurationVar(&cfg.grace, "grace", 30*time.Second, "a job not received this long after the last due time is lost")
	flag.DurationVar(&cfg.settle, "settle", time.Second, "keep the workers running this long after the last job arrived, to catch duplicates")
	flag.Float64Var(&cfg.quietBusy, "quiet-busy", 20, "before each run, wait until the machine's cores are less than this % busy over half a second, -quiet-max at most (0: do not wait)")
	flag.DurationVar(&cfg.quietMax, "quiet-max", 30*time.Second, "the longest wait for a quiet machine before a run")
	flag.Parse()

	pick := func(v, what string, all []string) []string {
		if v == "all" {
			return all
		}
		if !slices.Contains(all, v) {
			fmt.Fprintf(os.Stderr, "-%s must be %s or all\n", what, strings.Join(all, ", "))
			os.Exit(2)
		}
		return []string{v}
	}
	peerNames := pick(*peers, "peer", []string{"asynq", "river"})
	scens := pick(*scenarios, "scenario", []string{"ring", "hot"})
	if cfg.n < 0 || cfg.span <= 0 || cfg.lead < 0 || cfg.grace < 0 || cfg.settle < 0 || cfg.quietBusy < 0 || cfg.quietMax < 0 {
		fmt.Fprintln(os.Stderr, "-n, -lead, -grace, -settle, -quiet-busy and -quiet-max must not be negative, -span must be positive")
		os.Exit(2)
	}

	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt)
	defer cancel()
	logf := func(format string, a ...any) {
		fmt.Fprintf(os.Stderr, time.Now().Format("15:04:05.000")+" "+format+"\n", a...)
	}
	var results []*Result
	failed := false
	for _, name := range peerNames {
		var pr peer
		var err error
		switch name {
		case "asynq":
			pr, err = newAsynqPeer(ctx, *redisURL, *aConc, *aEnq, *aDelayed, *aTaskCheck, *aRoundUp)
		case "river":
			pr, err = newRiverPeer(ctx, *pgDSN, *rWorkers, *rPoll, *rCooldown)
		}
		if err != nil {
			logf("%s: %v", name, err)
			failed = true
			continue
		}
		for _, s := range scens {
			res, err := run(ctx, cfg, pr, s, logf)
			if err != nil {
				logf("%s %s: %v", name, s, err)
				failed = true
				continue
			}
			line, _ := json.Marshal(res)
			fmt.Println(string(line))
			results = append(results, res)
			if res.Lost > 0 || res.Duplicates > 0 || res.Unexpected > 0 {
				failed = true
			}
		}
		if err := pr.Reset(context.WithoutCancel(ctx)); err != nil {
			logf("%s: reset: %v", name, err)
		}
		pr.Close()
	}
	printTable(results)
	if failed {
		os.Exit(1)
	}
}

func printTable(results []*Result) {
	if len(results) == 0 {
		return
	}
	fmt.Println()
	w := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(w, "peer\tversion\tscenario\tn\treceived\tlost\tdup\tearly\tmin ms\tp50 ms\tp90 ms\tp99 ms\tp99.9 ms\tmax ms\tdrain/s\tlast rx s\tbusy %\tCPU µs/job\t")
	for _, r := range results {
		busy, per := "-", "-"
		if r.DrainCPU != nil && r.CPUPerJobUS > 0 {
			busy, per = fmt.Sprintf("%.0f", r.DrainCPU.Machine), fmt.Sprintf("%.0f", r.CPUPerJobUS)
		}
		l := r.Lateness
		fmt.Fprintf(w, "%s\t%s\t%s\t%d\t%d\t%d\t%d\t%d\t%.1f\t%.1f\t%.1f\t%.1f\t%.1f\t%.1f\t%.0f\t%.2f\t%s\t%s\t\n",
			r.Peer, r.Version, r.Scenario, r.N, r.Received, r.Lost, r.Duplicates, r.Early,
			l.Min, l.P50, l.P90, l.P99, l.P999, l.Max, r.DrainRate, r.LastReceiptS, busy, per)
	}
	w.Flush()
	for _, r := range results {
		for _, n := range r.Notes {
			fmt.Printf("%s %s: %s\n", r.Peer, r.Scenario, n)
		}
	}
}
