package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"slices"
	"strings"
	"time"
)

// scenarioOrder is the order in which selected scenarios run: the broker
// ceiling first (the ring rate is judged against it), batch before ring
// and hot (their lead time can be derived from the measured batch rate).
var scenarioOrder = []string{"broker", "create", "batch", "ring", "hot"}

type config struct {
	addr     string
	amqpURL  string
	exchange string

	scenarios []string

	clients      int
	duration     time.Duration
	batchSize    int
	batchClients int
	payloadSize  int
	httpTimeout  time.Duration

	n        int
	span     time.Duration
	lead     time.Duration
	leadSet  bool // -lead given: use it as is
	grace    time.Duration
	settle   time.Duration
	hotN     int
	prefetch int

	brokerPublishers int
	brokerWindow     int

	backlog        int
	backlogSkip    bool
	backlogTimeout time.Duration
	backlogApp     string

	rssPID     int
	out        string
	cpuProfile string

	// flags holds every flag and its value for the report, secrets masked.
	flags map[string]string
}

func parseConfig(args []string, getenv func(string) string, stderr io.Writer) (*config, error) {
	c := &config{}
	fs := flag.NewFlagSet("clockbench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: clockbench [flags]\n\n"+
			"Drives a running clockd over REST, consumes the rings from a queue it binds,\n"+
			"and prints a report (also written to -out as report.json and report.html).\n"+
			"Exits non-zero when a ring or hot scenario saw an early or lost ring.\n\nflags:\n")
		fs.PrintDefaults()
	}

	addr := getenv("CLOCKD_ADDR")
	if addr == "" {
		addr = "http://127.0.0.1:8080"
	}
	amqpURL := getenv("CLOCKD_AMQP_URL")
	if amqpURL == "" {
		amqpURL = "amqp://guest:guest@127.0.0.1:5672/"
	}
	var scen string
	fs.StringVar(&c.addr, "addr", addr, "clockd base URL (env CLOCKD_ADDR)")
	fs.StringVar(&c.amqpURL, "amqp", amqpURL, "RabbitMQ URL (env CLOCKD_AMQP_URL)")
	fs.StringVar(&c.exchange, "exchange", "clock.ring", "exchange clockd rings to")
	fs.StringVar(&scen, "scenario", "all", "comma-separated scenarios: create,batch,ring,hot,broker or all")

	fs.IntVar(&c.clients, "clients", 64, "create: concurrent single-clock clients")
	fs.DurationVar(&c.duration, "duration", 10*time.Second, "create, batch, broker: how long each runs")
	fs.IntVar(&c.batchSize, "batch-size", 500, "clocks per batch create (1..1000)")
	fs.IntVar(&c.batchClients, "batch-clients", 4, "concurrent batch-create clients (batch scenario, ring/hot create phase, backlog)")
	fs.IntVar(&c.payloadSize, "payload-size", 64, "approximate payload size in bytes")
	fs.DurationVar(&c.httpTimeout, "http-timeout", 60*time.Second, "timeout of one HTTP request")

	fs.IntVar(&c.n, "n", 50000, "ring: clocks to ring")
	fs.DurationVar(&c.span, "span", 10*time.Second, "ring: the ring times are spread evenly over this span (target rate = n/span)")
	fs.DurationVar(&c.lead, "lead", 5*time.Second, "ring, hot: time from the start of the create phase to the first ring time; unless given, raised to 2s + 2 × n / the create rate measured in the run")
	fs.DurationVar(&c.grace, "grace", 30*time.Second, "ring, hot: a clock not received this long after the last ring time is lost")
	fs.DurationVar(&c.settle, "settle", time.Second, "ring, hot: keep consuming this long after the last clock arrived, to catch duplicates")
	fs.IntVar(&c.hotN, "hot-n", 100000, "hot: clocks all due within the same second")
	fs.IntVar(&c.prefetch, "prefetch", 1000, "consumer prefetch (acks are sent every prefetch/4 messages, multiple)")

	fs.IntVar(&c.brokerPublishers, "broker-publishers", 1, "broker: publishing channels")
	fs.IntVar(&c.brokerWindow, "broker-window", 1000, "broker: unconfirmed messages in flight per channel")

	fs.IntVar(&c.backlog, "backlog", 0, "insert this many pending clocks years ahead (application -backlog-app) before the scenarios")
	fs.BoolVar(&c.backlogSkip, "backlog-skip-if-present", false, "backlog: skip the insert when the backlog application already has clocks")
	fs.DurationVar(&c.backlogTimeout, "backlog-timeout", 30*time.Minute, "backlog: stop inserting after this long (a later run resumes)")
	fs.StringVar(&c.backlogApp, "backlog-app", "bench-backlog", "backlog: application of the backlog clocks")

	fs.IntVar(&c.rssPID, "rss-pid", 0, "sample VmRSS of this process (clockd) every 100ms and report the maximum")
	fs.StringVar(&c.cpuProfile, "cpuprofile", "", "write a CPU profile of clockbench itself to this file")
	fs.StringVar(&c.out, "out", "bench-out", "directory for report.json and report.html (empty: do not write)")

	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments: %q", fs.Args())
	}

	var errs []error
	bad := func(name, format string, a ...any) {
		errs = append(errs, fmt.Errorf("-%s: "+format, append([]any{name}, a...)...))
	}
	seen := map[string]bool{}
	for _, s := range strings.Split(scen, ",") {
		s = strings.TrimSpace(s)
		switch {
		case s == "all":
			for _, o := range scenarioOrder {
				seen[o] = true
			}
		case slices.Contains(scenarioOrder, s):
			seen[s] = true
		case s == "":
		default:
			bad("scenario", "unknown scenario %q (want create, batch, ring, hot, broker or all)", s)
		}
	}
	for _, o := range scenarioOrder {
		if seen[o] {
			c.scenarios = append(c.scenarios, o)
		}
	}
	if len(c.scenarios) == 0 && c.backlog == 0 {
		bad("scenario", "no scenario selected")
	}

	if !strings.Contains(c.addr, "://") {
		c.addr = "http://" + c.addr
	}
	c.addr = strings.TrimRight(c.addr, "/")
	if u, err := url.Parse(c.addr); err != nil || u.Host == "" {
		bad("addr", "not a URL: %q", c.addr)
	}
	if c.exchange == "" {
		bad("exchange", "must not be empty")
	}
	positive := func(name string, v int) {
		if v <= 0 {
			bad(name, "must be positive, got %d", v)
		}
	}
	positive("clients", c.clients)
	positive("batch-clients", c.batchClients)
	positive("n", c.n)
	positive("hot-n", c.hotN)
	positive("prefetch", c.prefetch)
	positive("broker-publishers", c.brokerPublishers)
	positive("broker-window", c.brokerWindow)
	if c.batchSize < 1 || c.batchSize > 1000 {
		bad("batch-size", "must be in 1..1000, got %d", c.batchSize)
	}
	if c.payloadSize < 0 || c.payloadSize > 64<<10 {
		bad("payload-size", "must be in 0..65536, got %d", c.payloadSize)
	}
	if c.backlog < 0 {
		bad("backlog", "must not be negative")
	}
	for name, d := range map[string]time.Duration{"duration": c.duration, "span": c.span, "http-timeout": c.httpTimeout, "backlog-timeout": c.backlogTimeout} {
		if d <= 0 {
			bad(name, "must be positive, got %s", d)
		}
	}
	if c.lead < 0 || c.grace < 0 || c.settle < 0 {
		bad("lead/grace/settle", "must not be negative")
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}

	fs.Visit(func(f *flag.Flag) { c.leadSet = c.leadSet || f.Name == "lead" })
	c.flags = map[string]string{}
	fs.VisitAll(func(f *flag.Flag) {
		v := f.Value.String()
		if f.Name == "amqp" {
			v = redactURL(v)
		}
		c.flags[f.Name] = v
	})
	return c, nil
}

// redactURL masks the password of a URL.
func redactURL(s string) string {
	u, err := url.Parse(s)
	if err != nil || u.User == nil {
		return s
	}
	if _, ok := u.User.Password(); ok {
		u.User = url.UserPassword(u.User.Username(), "xxx")
	}
	return u.String()
}
