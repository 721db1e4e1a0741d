// Package config loads clockd's configuration: defaults, then a YAML file,
// then environment variables, then validation. Every error names the key.
package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"
	"gopkg.in/yaml.v3"

	"github.com/clockd/clockd/internal/ring"
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
	Janitor Janitor `yaml:"janitor"`
	History History `yaml:"history"`
	Auth    Auth    `yaml:"auth"`
}

// HTTP is the REST server.
type HTTP struct {
	Addr            string        `yaml:"addr"`
	MaxBodyBytes    int           `yaml:"max_body_bytes"`
	ShutdownTimeout time.Duration `yaml:"shutdown_timeout"`
	PprofAddr       string        `yaml:"pprof_addr"`
	// The edge: deadlines and sizes that bound what one client can hold.
	ReadTimeout           time.Duration `yaml:"read_timeout"`
	ReadHeaderTimeout     time.Duration `yaml:"read_header_timeout"`
	WriteTimeout          time.Duration `yaml:"write_timeout"`
	IdleTimeout           time.Duration `yaml:"idle_timeout"`
	MaxHeaderBytes        int           `yaml:"max_header_bytes"`
	MaxConcurrentRequests int           `yaml:"max_concurrent_requests"`
	MaxListBytes          int           `yaml:"max_list_bytes"`
	// HTTPS when both are set.
	TLSCertFile string `yaml:"tls_cert_file"`
	TLSKeyFile  string `yaml:"tls_key_file"`
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
	// IdempotencyWindow: an identical create for a key whose clock is
	// finished answers 200 with it when that clock was created less than
	// this long ago; after it, the create sets a new clock. 0: never. At
	// most the retentions (Load caps it).
	IdempotencyWindow time.Duration `yaml:"idempotency_window"`
}

// Janitor moves finished clocks out of the clock table.
type Janitor struct {
	// Retention: how long rung and cancelled clocks stay in clock.
	Retention time.Duration `yaml:"retention"`
	// RetentionFailed: how long expired and dead clocks stay in clock.
	RetentionFailed time.Duration `yaml:"retention_failed"`
	Interval        time.Duration `yaml:"interval"`
	// Batch: the most clocks per move transaction; batches adapt below it.
	Batch int `yaml:"batch"`
	// BusyPercent: while this instance has rings due, the share of time
	// each mover works; Pause: the least rest between two batches then.
	BusyPercent int           `yaml:"busy_percent"`
	Pause       time.Duration `yaml:"pause"`
	// Movers: batches moved at once, each on a MySQL connection of its own.
	Movers int `yaml:"movers"`
}

// History is clock_history.
type History struct {
	// Keep: how long finished clocks stay in clock_history; 0: no
	// history, finished clocks are deleted.
	Keep            time.Duration `yaml:"keep"`
	PartitionsAhead int           `yaml:"partitions_ahead"`
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
	ClaimAheadMax time.Duration `yaml:"claim_ahead_max"`
	ClaimBatch    int           `yaml:"claim_batch"`
	MaxInFlight   int           `yaml:"max_in_flight"`
	RetryMin      time.Duration `yaml:"retry_min"`
	RetryMax      time.Duration `yaml:"retry_max"`
	FiringTimeout time.Duration `yaml:"firing_timeout"`
	RecordGap     time.Duration `yaml:"record_gap"`
}

// Cluster is how instances share shards.
type Cluster struct {
	InstanceID string        `yaml:"instance_id"`
	LeaseTTL   time.Duration `yaml:"lease_ttl"`
}

// Auth is who may call the API.
type Auth struct {
	// Mode is off or tokens; empty: off while http.addr is loopback,
	// tokens otherwise (Load resolves it).
	Mode string `yaml:"mode"`
	// AllowOffOnPublic acknowledges mode off on an address that is not
	// loopback (something in front of clockd authenticates): no warning
	// at start.
	AllowOffOnPublic bool `yaml:"allow_off_on_public"`
	// AdminToken is a bootstrap token of the admin kind, accepted while set.
	AdminToken string `yaml:"admin_token"`
	// CacheTTL is how long a token or quota lookup is trusted.
	CacheTTL time.Duration `yaml:"cache_ttl"`
}

// Log is logging.
type Log struct {
	Level  string `yaml:"level"`
	Format string `yaml:"format"`
}

// Default returns the configuration with every default.
func Default() Config {
	return Config{
		HTTP: HTTP{Addr: "127.0.0.1:8080", MaxBodyBytes: 8 << 20, ShutdownTimeout: 15 * time.Second,
			ReadTimeout: 30 * time.Second, ReadHeaderTimeout: 10 * time.Second, WriteTimeout: 60 * time.Second,
			IdleTimeout: 2 * time.Minute, MaxHeaderBytes: 64 << 10, MaxConcurrentRequests: 256, MaxListBytes: 1 << 20},
		MySQL: MySQL{DSN: "root:@tcp(127.0.0.1:3306)/clock", MaxOpenConns: 32, MigrateOnStart: true, Writers: 4, BatchRows: 500,
			RequestTimeout: 5 * time.Second, ResolveTimeout: 30 * time.Second},
		AMQP:    AMQP{URL: "amqp://guest:guest@127.0.0.1:5672/", Exchange: "clock.ring", ConfirmTimeout: 5 * time.Second},
		Clock:   Clock{MaxPayloadBytes: 64 << 10, Shards: 32, IdempotencyWindow: 10 * time.Minute},
		Janitor: Janitor{Retention: 24 * time.Hour, RetentionFailed: 168 * time.Hour, Interval: 30 * time.Second, Batch: 1000, BusyPercent: 10, Pause: 10 * time.Millisecond, Movers: 2},
		History: History{Keep: 720 * time.Hour, PartitionsAhead: 3},
		Preload: Preload{Window: 10 * time.Second, Interval: time.Second, Rescan: 30 * time.Second, Batch: 2000, HeapCap: 200000},
		Ring: Ring{ClaimAhead: 100 * time.Millisecond, ClaimAheadMax: time.Second, ClaimBatch: 500, MaxInFlight: 20000,
			RetryMin: time.Second, RetryMax: 5 * time.Minute, FiringTimeout: 2 * time.Minute, RecordGap: 10 * time.Millisecond},
		Cluster: Cluster{LeaseTTL: 10 * time.Second},
		Log:     Log{Level: "info", Format: "json"},
		Auth:    Auth{CacheTTL: 5 * time.Second},
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
		{"CLOCKD_IDEMPOTENCY_WINDOW", "clock.idempotency_window", &c.Clock.IdempotencyWindow},
		{"CLOCKD_RETENTION", "janitor.retention", &c.Janitor.Retention},
		{"CLOCKD_RETENTION_FAILED", "janitor.retention_failed", &c.Janitor.RetentionFailed},
		{"CLOCKD_JANITOR_INTERVAL", "janitor.interval", &c.Janitor.Interval},
		{"CLOCKD_JANITOR_BATCH", "janitor.batch", &c.Janitor.Batch},
		{"CLOCKD_JANITOR_BUSY_PERCENT", "janitor.busy_percent", &c.Janitor.BusyPercent},
		{"CLOCKD_JANITOR_PAUSE", "janitor.pause", &c.Janitor.Pause},
		{"CLOCKD_JANITOR_MOVERS", "janitor.movers", &c.Janitor.Movers},
		{"CLOCKD_HISTORY_KEEP", "history.keep", &c.History.Keep},
		{"CLOCKD_HISTORY_PARTITIONS_AHEAD", "history.partitions_ahead", &c.History.PartitionsAhead},
		{"CLOCKD_PRELOAD_WINDOW", "preload.window", &c.Preload.Window},
		{"CLOCKD_PRELOAD_INTERVAL", "preload.interval", &c.Preload.Interval},
		{"CLOCKD_PRELOAD_RESCAN", "preload.rescan", &c.Preload.Rescan},
		{"CLOCKD_PRELOAD_BATCH", "preload.batch", &c.Preload.Batch},
		{"CLOCKD_HEAP_CAP", "preload.heap_cap", &c.Preload.HeapCap},
		{"CLOCKD_RING_CLAIM_AHEAD", "ring.claim_ahead", &c.Ring.ClaimAhead},
		{"CLOCKD_RING_CLAIM_AHEAD_MAX", "ring.claim_ahead_max", &c.Ring.ClaimAheadMax},
		{"CLOCKD_RING_CLAIM_BATCH", "ring.claim_batch", &c.Ring.ClaimBatch},
		{"CLOCKD_RING_MAX_IN_FLIGHT", "ring.max_in_flight", &c.Ring.MaxInFlight},
		{"CLOCKD_RETRY_MIN", "ring.retry_min", &c.Ring.RetryMin},
		{"CLOCKD_RETRY_MAX", "ring.retry_max", &c.Ring.RetryMax},
		{"CLOCKD_FIRING_TIMEOUT", "ring.firing_timeout", &c.Ring.FiringTimeout},
		{"CLOCKD_RING_RECORD_GAP", "ring.record_gap", &c.Ring.RecordGap},
		{"CLOCKD_INSTANCE_ID", "cluster.instance_id", &c.Cluster.InstanceID},
		{"CLOCKD_LEASE_TTL", "cluster.lease_ttl", &c.Cluster.LeaseTTL},
		{"CLOCKD_LOG_LEVEL", "log.level", &c.Log.Level},
		{"CLOCKD_LOG_FORMAT", "log.format", &c.Log.Format},
		{"CLOCKD_HTTP_READ_TIMEOUT", "http.read_timeout", &c.HTTP.ReadTimeout},
		{"CLOCKD_HTTP_READ_HEADER_TIMEOUT", "http.read_header_timeout", &c.HTTP.ReadHeaderTimeout},
		{"CLOCKD_HTTP_WRITE_TIMEOUT", "http.write_timeout", &c.HTTP.WriteTimeout},
		{"CLOCKD_HTTP_IDLE_TIMEOUT", "http.idle_timeout", &c.HTTP.IdleTimeout},
		{"CLOCKD_HTTP_MAX_HEADER_BYTES", "http.max_header_bytes", &c.HTTP.MaxHeaderBytes},
		{"CLOCKD_HTTP_MAX_CONCURRENT_REQUESTS", "http.max_concurrent_requests", &c.HTTP.MaxConcurrentRequests},
		{"CLOCKD_HTTP_MAX_LIST_BYTES", "http.max_list_bytes", &c.HTTP.MaxListBytes},
		{"CLOCKD_HTTP_TLS_CERT_FILE", "http.tls_cert_file", &c.HTTP.TLSCertFile},
		{"CLOCKD_HTTP_TLS_KEY_FILE", "http.tls_key_file", &c.HTTP.TLSKeyFile},
		{"CLOCKD_AUTH_MODE", "auth.mode", &c.Auth.Mode},
		{"CLOCKD_AUTH_ALLOW_OFF_ON_PUBLIC", "auth.allow_off_on_public", &c.Auth.AllowOffOnPublic},
		{"CLOCKD_ADMIN_TOKEN", "auth.admin_token", &c.Auth.AdminToken},
		{"CLOCKD_AUTH_CACHE_TTL", "auth.cache_ttl", &c.Auth.CacheTTL},
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
		data = zeroDurations(data)
		dec := yaml.NewDecoder(bytes.NewReader(data))
		dec.KnownFields(true)
		if err := dec.Decode(&c); err != nil && !errors.Is(err, io.EOF) {
			return Config{}, fmt.Errorf("config %s: %w", path, nameKeys(data, err))
		}
		// a second document ("---": two files put together) would be
		// dropped without a word, its overrides with it
		var more yaml.Node
		if err := dec.Decode(&more); !errors.Is(err, io.EOF) {
			return Config{}, fmt.Errorf("config %s: holds more than one YAML document (a \"---\" line); put every key in one", path)
		}
		if err := wholeNumbers(data); err != nil {
			return Config{}, fmt.Errorf("config %s: %w", path, err)
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
	// A retried create finds its finished clock only while the clock is
	// in the clock table: the window is capped at the retentions (a short
	// retention was refused at start with the default window, found by
	// review), after the window's own range was checked.
	c.Clock.IdempotencyWindow = min(c.Clock.IdempotencyWindow, c.Janitor.Retention, c.Janitor.RetentionFailed)
	return c, nil
}

// AuthMode is the auth mode in force: auth.mode when set, else off while
// http.addr is loopback and tokens otherwise.
func (c Config) AuthMode() string {
	if c.Auth.Mode != "" {
		return strings.ToLower(c.Auth.Mode)
	}
	if IsLoopback(c.HTTP.Addr) {
		return "off"
	}
	return "tokens"
}

// IsLoopback reports whether a listen address (host:port) accepts only
// connections from this machine: 127.0.0.0/8, ::1 or localhost. An empty
// host (":8080") or 0.0.0.0 listens on every interface.
func IsLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
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

// wholeNumbers refuses a decimal number written for an integer key:
// yaml.v3 decodes "shards: 7.99" into an int as 7, silently. The
// environment needs no such check: strconv.Atoi refuses "7.99".
func wholeNumbers(data []byte) error {
	var msgs []string
	eachValue(data, func(key string, t reflect.Type, v *yaml.Node, line int) {
		if isInteger(t) && v.Kind == yaml.ScalarNode && v.ShortTag() == "!!float" {
			msgs = append(msgs, fmt.Sprintf("line %d: %s: must be a whole number, got %s", line, key, v.Value))
		}
	})
	if len(msgs) == 0 {
		return nil
	}
	return errors.New(strings.Join(msgs, "; ")) // as nameKeys joins yaml.v3's
}

// zeroDurations rewrites a plain 0 written for a duration key as 0s:
// config/clockd.yaml documents 0 for history.keep, clock.idempotency_window
// and ring.record_gap, and the environment takes it, but yaml.v3 refuses a
// number for a time.Duration (found by review: clockd would not start with
// the file's own "keep: 0"). Only 0 means the same in every unit; any
// other number is still refused, naming its key. The rewrite keeps every
// line where it was, so that errors name the file's own lines.
func zeroDurations(data []byte) []byte {
	lines := bytes.SplitAfter(data, []byte("\n"))
	type spot struct{ line, col int } // 0-based
	var spots []spot
	eachValue(data, func(_ string, t reflect.Type, v *yaml.Node, _ int) {
		if t != reflect.TypeFor[time.Duration]() || v.Kind != yaml.ScalarNode || v.Style != 0 ||
			v.ShortTag() != "!!int" || v.Value != "0" || v.Line < 1 || v.Line > len(lines) {
			return
		}
		l, col := lines[v.Line-1], v.Column-1
		// an anchored value's column is that of its "&a" (a tagged one,
		// "!!int 0", is left as written: its tag says what it is)
		for col >= 0 && col < len(l) && l[col] == '&' {
			for col < len(l) && l[col] != ' ' && l[col] != '\t' {
				col++
			}
			for col < len(l) && (l[col] == ' ' || l[col] == '\t') {
				col++
			}
		}
		if col < 0 || col >= len(l) || l[col] != '0' {
			return
		}
		s := spot{v.Line - 1, col}
		if !slices.Contains(spots, s) { // an anchor is visited once per alias
			spots = append(spots, s)
		}
	})
	if len(spots) == 0 {
		return data
	}
	// right to left within a line, so that each insertion leaves the
	// columns of the others where they were
	slices.SortFunc(spots, func(a, b spot) int {
		if a.line != b.line {
			return a.line - b.line
		}
		return b.col - a.col
	})
	for _, s := range spots {
		l := lines[s.line]
		lines[s.line] = append(append(append([]byte{}, l[:s.col+1]...), 's'), l[s.col+1:]...)
	}
	return bytes.Join(lines, nil)
}

// eachValue calls visit with each value of the YAML document data whose
// key is a field of Config, with the field's dotted key, its type and the
// line of the value (an alias's own line; v is what it points at).
func eachValue(data []byte, visit func(key string, t reflect.Type, v *yaml.Node, line int)) {
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil || len(doc.Content) == 0 {
		return // the decoder reports it
	}
	var walk func(n *yaml.Node, t reflect.Type, prefix string)
	walk = func(n *yaml.Node, t reflect.Type, prefix string) {
		if n.Kind == yaml.AliasNode {
			n = n.Alias
		}
		if n.Kind != yaml.MappingNode {
			return
		}
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			if k.Value == "<<" { // a merge: its keys are this mapping's
				if v.Kind == yaml.SequenceNode {
					for _, m := range v.Content {
						walk(m, t, prefix)
					}
				} else {
					walk(v, t, prefix)
				}
				continue
			}
			f, ok := fieldOf(t, k.Value)
			if !ok {
				continue
			}
			key := prefix + k.Value
			if f.Kind() == reflect.Struct {
				walk(v, f, key+".")
				continue
			}
			line := v.Line // of the key's value, an alias or not
			if v.Kind == yaml.AliasNode {
				v = v.Alias
			}
			visit(key, f, v, line)
		}
	}
	walk(doc.Content[0], reflect.TypeFor[Config](), "")
}

// fieldOf is the type of the field of struct t whose yaml key is key.
func fieldOf(t reflect.Type, key string) (reflect.Type, bool) {
	for i := range t.NumField() {
		f := t.Field(i)
		if name, _, _ := strings.Cut(f.Tag.Get("yaml"), ","); name == key {
			return f.Type, true
		}
	}
	return nil, false
}

// isInteger reports whether t is an integer kind that holds a count (a
// time.Duration is written as a string such as 10s, and yaml.v3 refuses
// numbers for it).
func isInteger(t reflect.Type) bool {
	switch t.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return t != reflect.TypeFor[time.Duration]()
	}
	return false
}

func lookup(getenv func(string) string, name string) (string, bool) {
	v := getenv(name)
	return v, v != ""
}

func set(ptr any, v string) error {
	switch p := ptr.(type) {
	case *string:
		// blanks around a value are never meant: a newline at the end of a
		// secret mounted from a file, a stray space in a manifest (an
		// exchange named "clock.ring\n" would be one nobody binds)
		*p = strings.TrimSpace(v)
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

// maxConcurrentRequests bounds http.max_concurrent_requests: the limiter
// makes channels of 4 times it.
const maxConcurrentRequests = 1_000_000

// UnknownEnv lists the CLOCKD_* names of environ (os.Environ's form) that
// no setting reads: a mistyped name (CLOCKD_RETENTON) would otherwise
// leave its setting at the default without a word. The client tools'
// names (CLOCKD_ADDR, CLOCKD_TOKEN, CLOCKD_CACERT), CLOCKD_CONFIG and the
// tests' CLOCKD_TEST_* are known.
func UnknownEnv(environ []string) []string {
	known := EnvNames()
	for _, n := range []string{"CLOCKD_CONFIG", "CLOCKD_ADDR", "CLOCKD_TOKEN", "CLOCKD_CACERT"} {
		known[n] = ""
	}
	var out []string
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		if _, ok := known[name]; ok || !strings.HasPrefix(name, "CLOCKD_") || strings.HasPrefix(name, "CLOCKD_TEST_") {
			continue
		}
		out = append(out, name)
	}
	slices.Sort(out)
	return out
}

// Validate checks every key; the error names the first bad one.
func (c Config) Validate() error {
	var errs []error
	bad := func(key, format string, args ...any) {
		errs = append(errs, fmt.Errorf("config: %s: %s", key, fmt.Sprintf(format, args...)))
	}
	if msg := checkListenAddr(c.HTTP.Addr); msg != "" {
		bad("http.addr", "%s", msg)
	}
	if c.HTTP.PprofAddr != "" {
		if msg := checkListenAddr(c.HTTP.PprofAddr); msg != "" {
			bad("http.pprof_addr", "%s", msg)
		}
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
	} else if c.MySQL.MaxOpenConns >= 4 && c.MySQL.Writers > c.MySQL.MaxOpenConns/2 {
		// a busy writer keeps its connection: the rest of clockd (the
		// preloader, the ring loop, reads) needs the other half
		bad("mysql.writers", "must be at most half of mysql.max_open_conns (%d), got %d", c.MySQL.MaxOpenConns, c.MySQL.Writers)
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
	if msg := checkAMQPURLs(c.AMQP.URL); msg != "" {
		bad("amqp.url", "%s", msg)
	}
	// clockd declares the exchange and, beside it, <exchange>.hints and
	// <exchange>.tokens: each must be a name the broker takes (an AMQP
	// short string; amq. is RabbitMQ's own prefix, refused or predeclared)
	switch {
	case c.AMQP.Exchange == "" || len(c.AMQP.Exchange+".tokens") > 255:
		bad("amqp.exchange", "must be 1 to 248 bytes (with .tokens beside it, at most 255), got %d", len(c.AMQP.Exchange))
	case strings.HasPrefix(c.AMQP.Exchange, "amq."):
		bad("amqp.exchange", "must not begin with amq. (RabbitMQ's own exchanges), got %q", c.AMQP.Exchange)
	}
	// a YAML value in quotes keeps its blanks; names never have them
	for _, f := range []struct{ key, v string }{{"amqp.exchange", c.AMQP.Exchange},
		{"cluster.instance_id", c.Cluster.InstanceID}, {"auth.admin_token", c.Auth.AdminToken}} {
		if f.v != strings.TrimSpace(f.v) {
			bad(f.key, "has blanks around it") // not shown: one is a secret
		}
	}
	if c.AMQP.ConfirmTimeout < 100*time.Millisecond {
		// a confirm takes the broker's disk write: less than this would
		// fail rings a healthy broker took
		bad("amqp.confirm_timeout", "must be at least 100ms, got %s", c.AMQP.ConfirmTimeout)
	}
	if c.Clock.MaxPayloadBytes < 1 || c.Clock.MaxPayloadBytes > 16<<20-1 {
		bad("clock.max_payload_bytes", "must be between 1 and 16 MiB, got %d", c.Clock.MaxPayloadBytes)
	} else if c.HTTP.MaxBodyBytes >= 1024 && c.HTTP.MaxBodyBytes < c.Clock.MaxPayloadBytes+1024 {
		// a create carries its payload in a JSON body: a payload the
		// limit allows must fit in a body, with the other fields
		bad("http.max_body_bytes", "must be at least clock.max_payload_bytes (%d) + 1024 for a create of the largest payload to fit, got %d",
			c.Clock.MaxPayloadBytes, c.HTTP.MaxBodyBytes)
	}
	if c.Clock.Shards < 1 || c.Clock.Shards > 4096 {
		bad("clock.shards", "must be between 1 and 4096, got %d", c.Clock.Shards)
	}
	if c.Clock.IdempotencyWindow < 0 || c.Clock.IdempotencyWindow > 24*time.Hour {
		bad("clock.idempotency_window", "must be between 0 and 24h, got %s", c.Clock.IdempotencyWindow)
	}
	for _, r := range []struct {
		key string
		d   time.Duration
	}{{"janitor.retention", c.Janitor.Retention}, {"janitor.retention_failed", c.Janitor.RetentionFailed}} {
		switch {
		case r.d < time.Second || r.d > 8760*time.Hour:
			bad(r.key, "must be between 1s and 8760h, got %s", r.d)
		}
	}
	if c.Janitor.Interval < time.Second || c.Janitor.Interval > time.Minute {
		bad("janitor.interval", "must be between 1s and 1m, got %s", c.Janitor.Interval)
	}
	if c.Janitor.Batch < 1 || c.Janitor.Batch > 10000 {
		bad("janitor.batch", "must be between 1 and 10000, got %d", c.Janitor.Batch)
	}
	if c.Janitor.BusyPercent < 1 || c.Janitor.BusyPercent > 100 {
		bad("janitor.busy_percent", "must be between 1 and 100, got %d", c.Janitor.BusyPercent)
	}
	if c.Janitor.Movers < 1 || c.Janitor.Movers > 8 {
		bad("janitor.movers", "must be between 1 and 8, got %d", c.Janitor.Movers)
	}
	if c.Janitor.Pause < 0 || c.Janitor.Pause > 10*time.Second {
		bad("janitor.pause", "must be between 0 and 10s, got %s", c.Janitor.Pause)
	}
	if c.History.Keep != 0 && (c.History.Keep < 24*time.Hour || c.History.Keep > 87600*time.Hour) {
		bad("history.keep", "must be 0 (no history) or between 24h and 87600h (partitions are days), got %s", c.History.Keep)
	}
	if c.History.PartitionsAhead < 1 || c.History.PartitionsAhead > 90 {
		bad("history.partitions_ahead", "must be between 1 and 90, got %d", c.History.PartitionsAhead)
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
	if c.Ring.ClaimAheadMax < c.Ring.ClaimAhead || c.Ring.ClaimAheadMax > c.Preload.Window/2 {
		bad("ring.claim_ahead_max", "must be between ring.claim_ahead (%s) and half of preload.window, got %s", c.Ring.ClaimAhead, c.Ring.ClaimAheadMax)
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
	if c.Ring.RecordGap < 0 || c.Ring.RecordGap > time.Second {
		bad("ring.record_gap", "must be between 0 (off) and 1s, got %s", c.Ring.RecordGap)
	}
	if c.Ring.RetryMax < c.Ring.RetryMin {
		bad("ring.retry_max", "must be at least ring.retry_min")
	}
	if c.Ring.FiringTimeout < c.AMQP.ConfirmTimeout+c.Ring.ClaimAheadMax+time.Second {
		bad("ring.firing_timeout", "must exceed amqp.confirm_timeout + ring.claim_ahead_max by a second or more")
	}
	if c.Cluster.InstanceID == "" || len(c.Cluster.InstanceID) > 128 {
		bad("cluster.instance_id", "must be 1 to 128 characters")
	}
	if c.Cluster.LeaseTTL < time.Second {
		bad("cluster.lease_ttl", "must be at least 1s, got %s", c.Cluster.LeaseTTL)
	} else if margin := c.Ring.ClaimAheadMax + ring.DefaultMinLeaseLeft; c.Cluster.LeaseTTL < 2*margin {
		// The ring loop claims a shard's clocks only while the lease has
		// claim_ahead_max + 100ms left, and a lease renewed with less left
		// counts as lapsed (its shard is read again). A renewal, every
		// quarter TTL, finds about 0.55 TTL left: with a TTL under twice
		// the margin every round re-read every shard's window, and at 2s
		// with claim_ahead_max 2s nothing ever rang while /readyz said ok
		// (found by review).
		bad("cluster.lease_ttl", "must be at least twice ring.claim_ahead_max + %s (%s), got %s; lower ring.claim_ahead_max or raise the TTL",
			ring.DefaultMinLeaseLeft, 2*margin, c.Cluster.LeaseTTL)
	}
	if c.HTTP.ReadTimeout < 100*time.Millisecond {
		bad("http.read_timeout", "must be at least 100ms, got %s", c.HTTP.ReadTimeout)
	}
	if c.HTTP.ReadHeaderTimeout < 100*time.Millisecond {
		bad("http.read_header_timeout", "must be at least 100ms, got %s", c.HTTP.ReadHeaderTimeout)
	}
	if c.HTTP.WriteTimeout < c.MySQL.RequestTimeout+time.Second {
		bad("http.write_timeout", "must exceed mysql.request_timeout (%s) by a second or more, got %s", c.MySQL.RequestTimeout, c.HTTP.WriteTimeout)
	}
	if c.HTTP.IdleTimeout < time.Second {
		bad("http.idle_timeout", "must be at least 1s, got %s", c.HTTP.IdleTimeout)
	}
	if c.HTTP.MaxHeaderBytes < 4096 || c.HTTP.MaxHeaderBytes > 16<<20 {
		bad("http.max_header_bytes", "must be between 4096 and 16 MiB, got %d", c.HTTP.MaxHeaderBytes)
	}
	if c.HTTP.MaxConcurrentRequests < 1 || c.HTTP.MaxConcurrentRequests > maxConcurrentRequests {
		bad("http.max_concurrent_requests", "must be from 1 to %d, got %d", maxConcurrentRequests, c.HTTP.MaxConcurrentRequests)
	}
	if c.HTTP.MaxListBytes < 64<<10 {
		bad("http.max_list_bytes", "must be at least 65536, got %d", c.HTTP.MaxListBytes)
	}
	if (c.HTTP.TLSCertFile == "") != (c.HTTP.TLSKeyFile == "") {
		if c.HTTP.TLSCertFile == "" {
			bad("http.tls_cert_file", "is required with http.tls_key_file")
		} else {
			bad("http.tls_key_file", "is required with http.tls_cert_file")
		}
	}
	switch strings.ToLower(c.Auth.Mode) {
	case "", "tokens":
	case "off":
		// asked for by name: allowed on any address (SPEC: off on an
		// address that is not loopback must be asked for explicitly; the
		// default there is tokens); serve warns unless acknowledged
	default:
		bad("auth.mode", "must be off or tokens, got %q", c.Auth.Mode)
	}
	if c.Auth.AdminToken != "" && len(c.Auth.AdminToken) < 16 {
		bad("auth.admin_token", "must be at least 16 characters (use a random secret)")
	}
	if c.Auth.CacheTTL < 100*time.Millisecond || c.Auth.CacheTTL > 10*time.Minute {
		bad("auth.cache_ttl", "must be between 100ms and 10m, got %s", c.Auth.CacheTTL)
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

// checkListenAddr checks a listen address as net.Listen reads it, without
// listening (which would hold the port, or fail only later, after the
// database was created and migrated): host:port, the port a number from 0
// to 65535. The host is not looked up. It says what is wrong, "" when all
// is well.
func checkListenAddr(addr string) string {
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Sprintf("must be host:port such as 127.0.0.1:8080, got %q", addr)
	}
	if _, err := strconv.ParseUint(port, 10, 16); err != nil {
		return fmt.Sprintf("the port must be a number from 0 to 65535, got %q in %q", port, addr)
	}
	return ""
}

// checkAMQPURLs checks amqp.url, one broker URL or several separated by
// commas (the nodes of a cluster, tried in turn), and says what is wrong,
// naming the bad element without its password; "" when all is well.
func checkAMQPURLs(list string) string {
	elems := strings.Split(list, ",")
	for i, e := range elems {
		e = strings.TrimSpace(e)
		which := ""
		if len(elems) > 1 {
			which = fmt.Sprintf("element %d of %d (%s) ", i+1, len(elems), redactURL(e))
		}
		switch {
		case e == "":
			return which + "is empty: name a broker URL such as amqp://guest:guest@127.0.0.1:5672/"
		case !strings.HasPrefix(e, "amqp://") && !strings.HasPrefix(e, "amqps://"):
			return which + "must start with amqp:// or amqps://"
		}
		u, err := url.Parse(e)
		if err != nil || u.Host == "" {
			return which + "is not a URL with a host"
		}
	}
	return ""
}

// redactURL hides the password of a URL that is shown in an error.
func redactURL(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		return "unparsable URL"
	}
	return u.Redacted()
}
