package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"
)

// scenarioOrder is the order in which selected scenarios run. The
// machine's ceilings come first: the MySQL ceiling while clockd is still
// idle (nothing is due, nothing is being created), then the broker ceiling;
// every later figure is judged as a ratio to them. batch runs before ring,
// hot and sweep (their lead time is derived from the measured batch rate);
// ring picks its rate from the broker ceiling; the sweep comes last because
// its points past the knee leave clockd behind.
var scenarioOrder = []string{"mysql", "broker", "create", "batch", "ring", "hot", "sweep", "recurring"}

// scenarioGroups are names that select several scenarios.
var scenarioGroups = map[string][]string{
	"all":      scenarioOrder[:len(scenarioOrder)-1], // recurring (ten minutes) only when named
	"ceilings": {"mysql", "broker"},
}

// ceilingScenarios need no clockd.
var ceilingScenarios = []string{"mysql", "broker"}

type config struct {
	addr     string
	amqpURL  string
	exchange string

	scenarios []string
	rec       recurringConfig // the recurring scenario (recurring.go)

	clients      int
	duration     time.Duration
	batchSize    int
	batchClients int
	payloadSize  int
	httpTimeout  time.Duration
	token        string // API token (clockd with auth.mode tokens)

	n       int
	nSet    bool // -n given: ring uses it as is instead of picking from the broker ceiling
	span    time.Duration
	lead    time.Duration
	leadSet bool // -lead given: use it as is
	grace   time.Duration
	settle  time.Duration
	// quietBusy, quietMax: before each scenario, wait (quietMax at most)
	// until the machine is less than quietBusy % busy
	quietBusy float64
	quietMax  time.Duration
	hotN      int
	prefetch  int

	brokerPublishers []int
	brokerWindow     int
	brokerPaced      bool

	mysqlDSN            string
	ceilingDuration     time.Duration
	ceilingWarmup       time.Duration
	insertClients       int
	ceilingBatchClients int
	updateRows          int

	ringPct   float64
	sweepPcts []float64
	sweepAll  bool
	kneeP99Ms float64

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
			"Every rate is also given as a ratio to a ceiling of the machine measured in the same\n"+
			"run (scenarios mysql and broker), and the targets of issue 15 are checked by ratio.\n"+
			"Exits non-zero when a ring, hot or sweep scenario saw an early or lost ring.\n\nflags:\n")
		// the defaults of -token, -amqp and -mysql come from the
		// environment: never print a secret (-h goes into CI logs)
		fs.VisitAll(func(f *flag.Flag) { f.DefValue = redactFlag(f.Name, f.DefValue) })
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
	mysqlDSN := getenv("CLOCKD_MYSQL_DSN")
	if mysqlDSN == "" {
		mysqlDSN = "root:@tcp(127.0.0.1:3306)/"
	}
	var scen, brokerPubs, sweep string
	fs.StringVar(&c.addr, "addr", addr, "clockd base URL (env CLOCKD_ADDR)")
	fs.StringVar(&c.amqpURL, "amqp", amqpURL, "RabbitMQ URL (env CLOCKD_AMQP_URL)")
	fs.StringVar(&c.exchange, "exchange", "clock.ring", "exchange clockd rings to")
	fs.StringVar(&scen, "scenario", "all", "comma-separated scenarios: mysql,broker,create,batch,ring,hot,sweep,recurring; ceilings = mysql,broker; all = every one but recurring")

	fs.IntVar(&c.clients, "clients", 64, "create: concurrent single-clock clients")
	fs.DurationVar(&c.duration, "duration", 10*time.Second, "create, batch: how long each runs")
	fs.IntVar(&c.batchSize, "batch-size", 500, "clocks per batch create (1..1000)")
	fs.IntVar(&c.batchClients, "batch-clients", 4, "concurrent batch-create clients (batch scenario, ring/hot create phase, backlog)")
	fs.IntVar(&c.payloadSize, "payload-size", 64, "approximate payload size in bytes")
	fs.DurationVar(&c.httpTimeout, "http-timeout", 60*time.Second, "timeout of one HTTP request")
	fs.StringVar(&c.token, "token", getenv("CLOCKD_TOKEN"), "API token sent as Authorization: Bearer, for a clockd with auth.mode tokens (env CLOCKD_TOKEN)")

	fs.IntVar(&c.n, "n", 50000, "ring: clocks to ring; unless given, ring picks n = -ring-pct % of the broker ceiling x -span when the run measured that ceiling")
	fs.DurationVar(&c.span, "span", 10*time.Second, "ring: the ring times are spread evenly over this span (target rate = n/span)")
	fs.DurationVar(&c.lead, "lead", 5*time.Second, "ring, hot: time from the start of the create phase to the first ring time; unless given, raised to 2s + 2 × n / the create rate measured in the run")
	fs.DurationVar(&c.grace, "grace", 30*time.Second, "ring, hot: a clock not received this long after the last ring time is lost")
	fs.DurationVar(&c.settle, "settle", time.Second, "ring, hot: keep consuming this long after the last clock arrived, to catch duplicates")
	fs.Float64Var(&c.quietBusy, "quiet-busy", 20, "before each scenario, wait until the machine's cores are less than this % busy over half a second (what the previous scenario left behind, such as MySQL flushing, is done), -quiet-max at most; 0: do not wait")
	fs.DurationVar(&c.quietMax, "quiet-max", 30*time.Second, "the longest wait for a quiet machine before a scenario")
	fs.IntVar(&c.hotN, "hot-n", 100000, "hot: clocks all due within the same second")
	fs.IntVar(&c.prefetch, "prefetch", 1000, "consumer prefetch (acks are sent every prefetch/4 messages, multiple)")

	fs.StringVar(&brokerPubs, "broker-publishers", "1,4", "broker: publishing channels, a comma-separated list: each count is measured and the ceiling is the best")
	fs.IntVar(&c.brokerWindow, "broker-window", 1000, "broker: unconfirmed messages in flight per channel")
	fs.BoolVar(&c.brokerPaced, "broker-paced", true, "broker: after the ceiling, publish at -ring-pct % of it on 1 channel, spread evenly, and report the publish->consume latency: the broker's own share of a ring's lateness at the ring scenario's rate")

	fs.StringVar(&c.mysqlDSN, "mysql", mysqlDSN, "mysql: go-sql-driver DSN of the MySQL server whose ceilings are measured, in a scratch database clockbench_ceiling_<run id> created and dropped on it (the DSN's own database is not touched; env CLOCKD_MYSQL_DSN)")
	fs.DurationVar(&c.ceilingDuration, "ceiling-duration", 5*time.Second, "mysql, broker: how long each ceiling is measured, after -ceiling-warmup")
	fs.DurationVar(&c.ceilingWarmup, "ceiling-warmup", time.Second, "mysql, broker: load applied before each ceiling's measured window")
	fs.IntVar(&c.insertClients, "ceiling-insert-clients", 64, "mysql: clients of the one-row autocommit INSERT ceiling")
	fs.IntVar(&c.ceilingBatchClients, "ceiling-batch-clients", 4, "mysql: clients of the multi-row INSERT and the UPDATE ceilings (rows per statement: -batch-size)")
	fs.IntVar(&c.updateRows, "ceiling-update-rows", 200000, "mysql: at most this many rows of the scratch table take part in the UPDATE ceiling")

	fs.Float64Var(&c.ringPct, "ring-pct", 50, "ring: rate as a percentage of the broker ceiling measured in the run (unless -n is given)")
	fs.StringVar(&sweep, "sweep", "10,25,50,70,85", "sweep: ring rates as percentages of the broker ceiling, each over -span")
	fs.BoolVar(&c.sweepAll, "sweep-all", false, "sweep: go on past the first rate whose lateness p99 exceeds -knee-p99 (default: stop there)")
	fs.Float64Var(&c.kneeP99Ms, "knee-p99", 100, "sweep: the knee is the first rate whose lateness p99 exceeds this many ms")

	addRecurringFlags(fs, &c.rec)
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
	var err error
	if c.scenarios, err = parseScenarios(scen); err != nil {
		bad("scenario", "%v", err)
	}
	if c.brokerPublishers, err = parseIntList(brokerPubs); err != nil {
		bad("broker-publishers", "%v", err)
	}
	if c.sweepPcts, err = parsePctList(sweep); err != nil {
		bad("sweep", "%v", err)
	}
	if slices.Contains(c.scenarios, "sweep") && len(c.sweepPcts) == 0 {
		bad("sweep", "no rate to sweep")
	}
	if c.ringPct <= 0 || c.ringPct > 1000 {
		bad("ring-pct", "must be in (0, 1000], got %v", c.ringPct)
	}
	if c.kneeP99Ms <= 0 {
		bad("knee-p99", "must be positive, got %v", c.kneeP99Ms)
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
	positive("ceiling-insert-clients", c.insertClients)
	positive("ceiling-batch-clients", c.ceilingBatchClients)
	positive("ceiling-update-rows", c.updateRows)
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
	for name, d := range map[string]time.Duration{"duration": c.duration, "span": c.span, "http-timeout": c.httpTimeout, "backlog-timeout": c.backlogTimeout, "ceiling-duration": c.ceilingDuration} {
		if d <= 0 {
			bad(name, "must be positive, got %s", d)
		}
	}
	if c.quietBusy < 0 || c.quietBusy > 100 {
		bad("quiet-busy", "must be in 0..100, got %g", c.quietBusy)
	}
	if c.quietMax < 0 {
		bad("quiet-max", "must not be negative, got %s", c.quietMax)
	}
	if c.lead < 0 || c.grace < 0 || c.settle < 0 || c.ceilingWarmup < 0 {
		bad("lead/grace/settle/ceiling-warmup", "must not be negative")
	}
	if _, err := mysql.ParseDSN(c.mysqlDSN); err != nil {
		bad("mysql", "%v", err)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}

	fs.Visit(func(f *flag.Flag) {
		c.leadSet = c.leadSet || f.Name == "lead"
		c.nSet = c.nSet || f.Name == "n"
	})
	c.flags = map[string]string{}
	fs.VisitAll(func(f *flag.Flag) { c.flags[f.Name] = redactFlag(f.Name, f.Value.String()) })
	return c, nil
}

// redactFlag is the value of flag name as the report and the usage show
// it: without its secrets.
func redactFlag(name, v string) string {
	switch name {
	case "amqp":
		return redactURL(v)
	case "mysql":
		return redactDSN(v)
	case "token":
		if v != "" {
			return "(set)"
		}
	}
	return v
}

// parseScenarios turns the -scenario list into the selected scenarios in
// run order.
func parseScenarios(list string) ([]string, error) {
	seen := map[string]bool{}
	var errs []error
	for _, s := range strings.Split(list, ",") {
		s = strings.TrimSpace(s)
		switch {
		case scenarioGroups[s] != nil:
			for _, o := range scenarioGroups[s] {
				seen[o] = true
			}
		case slices.Contains(scenarioOrder, s):
			seen[s] = true
		case s == "":
		default:
			errs = append(errs, fmt.Errorf("unknown scenario %q (want %s, ceilings or all)", s, strings.Join(scenarioOrder, ", ")))
		}
	}
	var out []string
	for _, o := range scenarioOrder {
		if seen[o] {
			out = append(out, o)
		}
	}
	return out, errors.Join(errs...)
}

// parseIntList parses "1,4" into distinct positive integers, in order.
func parseIntList(list string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(list, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		n, err := strconv.Atoi(f)
		if err != nil || n <= 0 {
			return nil, fmt.Errorf("%q is not a positive integer", f)
		}
		if !slices.Contains(out, n) {
			out = append(out, n)
		}
	}
	if len(out) == 0 {
		return nil, errors.New("empty list")
	}
	return out, nil
}

// parsePctList parses "10,25,50" (a trailing % is allowed) into distinct
// positive percentages, sorted ascending.
func parsePctList(list string) ([]float64, error) {
	var out []float64
	for _, f := range strings.Split(list, ",") {
		f = strings.TrimSuffix(strings.TrimSpace(f), "%")
		if f == "" {
			continue
		}
		v, err := strconv.ParseFloat(f, 64)
		if err != nil || v <= 0 || v > 1000 || math.IsNaN(v) {
			return nil, fmt.Errorf("%q is not a percentage in (0, 1000]", f)
		}
		if !slices.Contains(out, v) {
			out = append(out, v)
		}
	}
	slices.Sort(out)
	return out, nil
}

// redactDSN masks the password of a go-sql-driver DSN.
func redactDSN(dsn string) string {
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil || cfg.Passwd == "" {
		return dsn
	}
	cfg.Passwd = "xxx"
	return cfg.FormatDSN()
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
