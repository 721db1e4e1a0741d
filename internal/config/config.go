// Package config loads clockd's configuration: defaults, then a YAML file,
// then environment variables, then validation. Every error names the key.
package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"
	"gopkg.in/yaml.v3"
)

// Config is the whole configuration; config/clockd.yaml documents each key.
type Config struct {
	HTTP    HTTP    `yaml:"http"`
	MySQL   MySQL   `yaml:"mysql"`
	AMQP    AMQP    `yaml:"amqp"`
	Clock   Clock   `yaml:"clock"`
	Preload Preload `yaml:"preload"`
	Ring    Ring    `yaml:"ring"`
	Cluster Cluster `yaml:"cluster"`
	Log     Log     `yaml:"log"`
}

// HTTP is the REST server.
type HTTP struct {
	Addr            string        `yaml:"addr"`
	MaxBodyBytes    int           `yaml:"max_body_bytes"`
	ShutdownTimeout time.Duration `yaml:"shutdown_timeout"`
	PprofAddr       string        `yaml:"pprof_addr"`
}

// MySQL is the clock store.
type MySQL struct {
	DSN            string `yaml:"dsn"`
	MaxOpenConns   int    `yaml:"max_open_conns"`
	MigrateOnStart bool   `yaml:"migrate_on_start"`
	Writers        int    `yaml:"writers"`
	BatchRows      int    `yaml:"batch_rows"`
	// RequestTimeout bounds the MySQL work of one API request.
	RequestTimeout time.Duration `yaml:"request_timeout"`
	// ResolveTimeout bounds the search for the outcome of a change whose
	// COMMIT was sent but not answered.
	ResolveTimeout time.Duration `yaml:"resolve_timeout"`
}

// AMQP is the broker rings go to.
type AMQP struct {
	URL            string        `yaml:"url"`
	Exchange       string        `yaml:"exchange"`
	ConfirmTimeout time.Duration `yaml:"confirm_timeout"`
}

// Clock holds limits and the shard count.
type Clock struct {
	MaxPayloadBytes int `yaml:"max_payload_bytes"`
	Shards          int `yaml:"shards"`
}

// Preload is the preloader.
type Preload struct {
	Window   time.Duration `yaml:"window"`
	Interval time.Duration `yaml:"interval"`
	Rescan   time.Duration `yaml:"rescan"`
	Batch    int           `yaml:"batch"`
	HeapCap  int           `yaml:"heap_cap"`
}

// Ring is the ring loop.
type Ring struct {
	ClaimAhead    time.Duration `yaml:"claim_ahead"`
	ClaimBatch    int           `yaml:"claim_batch"`
	MaxInFlight   int           `yaml:"max_in_flight"`
	RetryMin      time.Duration `yaml:"retry_min"`
	RetryMax      time.Duration `yaml:"retry_max"`
	FiringTimeout time.Duration `yaml:"firing_timeout"`
}

// Cluster is how instances share shards.
type Cluster struct {
	InstanceID string        `yaml:"instance_id"`
	LeaseTTL   time.Duration `yaml:"lease_ttl"`
}

// Log is logging.
type Log struct {
	Level  string `yaml:"level"`
	Format string `yaml:"format"`
}

// Default returns the configuration with every default.
func Default() Config {
	return Config{
		HTTP: HTTP{Addr: "127.0.0.1:8080", MaxBodyBytes: 8 << 20, ShutdownTimeout: 15 * time.Second},
		MySQL: MySQL{DSN: "root:@tcp(127.0.0.1:3306)/clock", MaxOpenConns: 32, MigrateOnStart: true, Writers: 4, BatchRows: 500,
			RequestTimeout: 5 * time.Second, ResolveTimeout: 30 * time.Second},
		AMQP:    AMQP{URL: "amqp://guest:guest@127.0.0.1:5672/", Exchange: "clock.ring", ConfirmTimeout: 5 * time.Second},
		Clock:   Clock{MaxPayloadBytes: 64 << 10, Shards: 32},
		Preload: Preload{Window: 10 * time.Second, Interval: time.Second, Rescan: 30 * time.Second, Batch: 2000, HeapCap: 200000},
		Ring: Ring{ClaimAhead: 100 * time.Millisecond, ClaimBatch: 500, MaxInFlight: 20000,
			RetryMin: time.Second, RetryMax: 5 * time.Minute, FiringTimeout: 2 * time.Minute},
		Cluster: Cluster{LeaseTTL: 10 * time.Second},
		Log:     Log{Level: "info", Format: "json"},
	}
}

// envVar binds an environment variable to a key.
type envVar struct {
	name string
	key  string
	ptr  any
}

func (c *Config) env() []envVar {
	return []envVar{
		{"CLOCKD_HTTP_ADDR", "http.addr", &c.HTTP.Addr},
		{"CLOCKD_HTTP_MAX_BODY_BYTES", "http.max_body_bytes", &c.HTTP.MaxBodyBytes},
		{"CLOCKD_HTTP_SHUTDOWN_TIMEOUT", "http.shutdown_timeout", &c.HTTP.ShutdownTimeout},
		{"CLOCKD_PPROF_ADDR", "http.pprof_addr", &c.HTTP.PprofAddr},
		{"CLOCKD_MYSQL_DSN", "mysql.dsn", &c.MySQL.DSN},
		{"CLOCKD_MYSQL_MAX_OPEN_CONNS", "mysql.max_open_conns", &c.MySQL.MaxOpenConns},
		{"CLOCKD_MYSQL_MIGRATE_ON_START", "mysql.migrate_on_start", &c.MySQL.MigrateOnStart},
		{"CLOCKD_MYSQL_WRITERS", "mysql.writers", &c.MySQL.Writers},
		{"CLOCKD_MYSQL_BATCH_ROWS", "mysql.batch_rows", &c.MySQL.BatchRows},
		{"CLOCKD_MYSQL_REQUEST_TIMEOUT", "mysql.request_timeout", &c.MySQL.RequestTimeout},
		{"CLOCKD_MYSQL_RESOLVE_TIMEOUT", "mysql.resolve_timeout", &c.MySQL.ResolveTimeout},
		{"CLOCKD_AMQP_URL", "amqp.url", &c.AMQP.URL},
		{"CLOCKD_EXCHANGE", "amqp.exchange", &c.AMQP.Exchange},
		{"CLOCKD_AMQP_CONFIRM_TIMEOUT", "amqp.confirm_timeout", &c.AMQP.ConfirmTimeout},
		{"CLOCKD_MAX_PAYLOAD_BYTES", "clock.max_payload_bytes", &c.Clock.MaxPayloadBytes},
		{"CLOCKD_SHARDS", "clock.shards", &c.Clock.Shards},
		{"CLOCKD_PRELOAD_WINDOW", "preload.window", &c.Preload.Window},
		{"CLOCKD_PRELOAD_INTERVAL", "preload.interval", &c.Preload.Interval},
		{"CLOCKD_PRELOAD_RESCAN", "preload.rescan", &c.Preload.Rescan},
		{"CLOCKD_PRELOAD_BATCH", "preload.batch", &c.Preload.Batch},
		{"CLOCKD_HEAP_CAP", "preload.heap_cap", &c.Preload.HeapCap},
		{"CLOCKD_RING_CLAIM_AHEAD", "ring.claim_ahead", &c.Ring.ClaimAhead},
		{"CLOCKD_RING_CLAIM_BATCH", "ring.claim_batch", &c.Ring.ClaimBatch},
		{"CLOCKD_RING_MAX_IN_FLIGHT", "ring.max_in_flight", &c.Ring.MaxInFlight},
		{"CLOCKD_RETRY_MIN", "ring.retry_min", &c.Ring.RetryMin},
		{"CLOCKD_RETRY_MAX", "ring.retry_max", &c.Ring.RetryMax},
		{"CLOCKD_FIRING_TIMEOUT", "ring.firing_timeout", &c.Ring.FiringTimeout},
		{"CLOCKD_INSTANCE_ID", "cluster.instance_id", &c.Cluster.InstanceID},
		{"CLOCKD_LEASE_TTL", "cluster.lease_ttl", &c.Cluster.LeaseTTL},
		{"CLOCKD_LOG_LEVEL", "log.level", &c.Log.Level},
		{"CLOCKD_LOG_FORMAT", "log.format", &c.Log.Format},
	}
}

// EnvNames lists the environment variables with the key each overrides.
func EnvNames() map[string]string {
	var c Config
	out := map[string]string{}
	for _, e := range c.env() {
		out[e.name] = e.key
	}
	return out
}

// Load builds the configuration: defaults, the YAML file at path (if path is
// not empty), the environment (getenv), then validation.
func Load(path string, getenv func(string) string) (Config, error) {
	c := Default()
	if path != "" {
		data, err := os.ReadFile(path)
		if err != nil {
			return Config{}, fmt.Errorf("config: %w", err)
		}
		dec := yaml.NewDecoder(bytes.NewReader(data))
		dec.KnownFields(true)
		if err := dec.Decode(&c); err != nil && !errors.Is(err, io.EOF) {
			return Config{}, fmt.Errorf("config %s: %w", path, nameKeys(data, err))
		}
	}
	for _, e := range c.env() {
		v, ok := lookup(getenv, e.name)
		if !ok {
			continue
		}
		if err := set(e.ptr, v); err != nil {
			return Config{}, fmt.Errorf("config: %s (%s) = %q: %w", e.name, e.key, v, err)
		}
	}
	if c.Cluster.InstanceID == "" {
		host, _ := os.Hostname()
		if host == "" {
			host = "clockd"
		}
		c.Cluster.InstanceID = host + "-" + strconv.Itoa(os.Getpid())
	}
	if err := c.Validate(); err != nil {
		return Config{}, err
	}
	return c, nil
}

// nameKeys adds the key to each of yaml.v3's "line N: cannot unmarshal ..."
// errors, which name only the line.
func nameKeys(data []byte, err error) error {
	var te *yaml.TypeError
	if !errors.As(err, &te) {
		return err
	}
	var doc yaml.Node
	if yaml.Unmarshal(data, &doc) != nil {
		return err
	}
	keys := map[int]string{} // line -> dotted key; the deepest wins
	var walk func(n *yaml.Node, prefix string)
	walk = func(n *yaml.Node, prefix string) {
		switch n.Kind {
		case yaml.DocumentNode:
			for _, c := range n.Content {
				walk(c, prefix)
			}
		case yaml.MappingNode:
			for i := 0; i+1 < len(n.Content); i += 2 {
				k, v := n.Content[i], n.Content[i+1]
				key := prefix + k.Value
				keys[k.Line], keys[v.Line] = key, key
				walk(v, key+".")
			}
		}
	}
	walk(&doc, "")
	msgs := make([]string, len(te.Errors))
	for i, m := range te.Errors {
		var line int
		if _, serr := fmt.Sscanf(m, "line %d:", &line); serr == nil && keys[line] != "" {
			m = strings.Replace(m, ":", ": "+keys[line]+":", 1)
		}
		msgs[i] = m
	}
	return errors.New(strings.Join(msgs, "; "))
}

func lookup(getenv func(string) string, name string) (string, bool) {
	v := getenv(name)
	return v, v != ""
}

func set(ptr any, v string) error {
	switch p := ptr.(type) {
	case *string:
		*p = v
	case *int:
		n, err := strconv.Atoi(strings.TrimSpace(v))
		if err != nil {
			return errors.New("not a whole number")
		}
		*p = n
	case *bool:
		b, err := strconv.ParseBool(strings.TrimSpace(v))
		if err != nil {
			return errors.New("not true or false")
		}
		*p = b
	case *time.Duration:
		d, err := time.ParseDuration(strings.TrimSpace(v))
		if err != nil {
			return errors.New("not a duration such as 500ms, 10s or 5m")
		}
		*p = d
	default:
		return fmt.Errorf("unsupported type %T", ptr)
	}
	return nil
}

// Validate checks every key; the error names the first bad one.
func (c Config) Validate() error {
	var errs []error
	bad := func(key, format string, args ...any) {
		errs = append(errs, fmt.Errorf("config: %s: %s", key, fmt.Sprintf(format, args...)))
	}
	if c.HTTP.Addr == "" || !strings.Contains(c.HTTP.Addr, ":") {
		bad("http.addr", "must be host:port, got %q", c.HTTP.Addr)
	}
	if c.HTTP.MaxBodyBytes < 1024 {
		bad("http.max_body_bytes", "must be at least 1024, got %d", c.HTTP.MaxBodyBytes)
	}
	if c.HTTP.ShutdownTimeout <= 0 {
		bad("http.shutdown_timeout", "must be positive")
	}
	if cfg, err := mysql.ParseDSN(c.MySQL.DSN); err != nil {
		bad("mysql.dsn", "%v", err)
	} else if cfg.DBName == "" {
		bad("mysql.dsn", "names no database (add /clock)")
	}
	if c.MySQL.MaxOpenConns < 4 {
		bad("mysql.max_open_conns", "must be at least 4, got %d", c.MySQL.MaxOpenConns)
	}
	if c.MySQL.Writers < 1 || c.MySQL.Writers > 64 {
		bad("mysql.writers", "must be between 1 and 64, got %d", c.MySQL.Writers)
	}
	if c.MySQL.BatchRows < 1 || c.MySQL.BatchRows > 5000 {
		bad("mysql.batch_rows", "must be between 1 and 5000, got %d", c.MySQL.BatchRows)
	}
	if c.MySQL.RequestTimeout < 100*time.Millisecond || c.MySQL.RequestTimeout > 5*time.Minute {
		bad("mysql.request_timeout", "must be between 100ms and 5m, got %s", c.MySQL.RequestTimeout)
	}
	if c.MySQL.ResolveTimeout < time.Second || c.MySQL.ResolveTimeout > 10*time.Minute {
		bad("mysql.resolve_timeout", "must be between 1s and 10m, got %s", c.MySQL.ResolveTimeout)
	}
	if !strings.HasPrefix(c.AMQP.URL, "amqp://") && !strings.HasPrefix(c.AMQP.URL, "amqps://") {
		bad("amqp.url", "must start with amqp:// or amqps://")
	}
	if c.AMQP.Exchange == "" || len(c.AMQP.Exchange) > 255 {
		bad("amqp.exchange", "must be 1 to 255 characters")
	}
	if c.AMQP.ConfirmTimeout <= 0 {
		bad("amqp.confirm_timeout", "must be positive")
	}
	if c.Clock.MaxPayloadBytes < 1 || c.Clock.MaxPayloadBytes > 16<<20-1 {
		bad("clock.max_payload_bytes", "must be between 1 and 16 MiB, got %d", c.Clock.MaxPayloadBytes)
	}
	if c.Clock.Shards < 1 || c.Clock.Shards > 4096 {
		bad("clock.shards", "must be between 1 and 4096, got %d", c.Clock.Shards)
	}
	if c.Preload.Window < 100*time.Millisecond {
		bad("preload.window", "must be at least 100ms, got %s", c.Preload.Window)
	}
	if c.Preload.Interval <= 0 || c.Preload.Interval > c.Preload.Window {
		bad("preload.interval", "must be positive and at most preload.window, got %s", c.Preload.Interval)
	}
	if c.Preload.Rescan < c.Preload.Interval {
		bad("preload.rescan", "must be at least preload.interval, got %s", c.Preload.Rescan)
	}
	if c.Preload.Batch < 1 {
		bad("preload.batch", "must be positive")
	}
	if c.Preload.HeapCap < c.Clock.Shards {
		bad("preload.heap_cap", "must be at least clock.shards (%d), got %d", c.Clock.Shards, c.Preload.HeapCap)
	}
	if c.Ring.ClaimAhead < 0 || c.Ring.ClaimAhead > c.Preload.Window/2 {
		bad("ring.claim_ahead", "must be between 0 and half of preload.window, got %s", c.Ring.ClaimAhead)
	}
	if c.Ring.ClaimBatch < 1 || c.Ring.ClaimBatch > 5000 {
		bad("ring.claim_batch", "must be between 1 and 5000, got %d", c.Ring.ClaimBatch)
	}
	if c.Ring.MaxInFlight < c.Ring.ClaimBatch {
		bad("ring.max_in_flight", "must be at least ring.claim_batch")
	}
	if c.Ring.RetryMin <= 0 {
		bad("ring.retry_min", "must be positive")
	}
	if c.Ring.RetryMax < c.Ring.RetryMin {
		bad("ring.retry_max", "must be at least ring.retry_min")
	}
	if c.Ring.FiringTimeout < c.AMQP.ConfirmTimeout+c.Ring.ClaimAhead+time.Second {
		bad("ring.firing_timeout", "must exceed amqp.confirm_timeout + ring.claim_ahead by a second or more")
	}
	if c.Cluster.InstanceID == "" || len(c.Cluster.InstanceID) > 128 {
		bad("cluster.instance_id", "must be 1 to 128 characters")
	}
	if c.Cluster.LeaseTTL < time.Second {
		bad("cluster.lease_ttl", "must be at least 1s, got %s", c.Cluster.LeaseTTL)
	}
	switch strings.ToLower(c.Log.Level) {
	case "debug", "info", "warn", "error":
	default:
		bad("log.level", "must be debug, info, warn or error, got %q", c.Log.Level)
	}
	switch c.Log.Format {
	case "json", "text":
	default:
		bad("log.format", "must be json or text, got %q", c.Log.Format)
	}
	return errors.Join(errs...)
}
