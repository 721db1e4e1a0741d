package config_test

import (
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/clockd/clockd/internal/config"
)

func envOf(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

func noEnv(string) string { return "" }

func writeYAML(t *testing.T, text string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "clockd.yaml")
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func hostPID(t *testing.T) string {
	t.Helper()
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "clockd"
	}
	return host + "-" + strconv.Itoa(os.Getpid())
}

func TestDefaults(t *testing.T) {
	t.Parallel()
	c, err := config.Load("", noEnv)
	if err != nil {
		t.Fatal(err)
	}
	want := config.Default()
	want.Cluster.InstanceID = hostPID(t)
	if !reflect.DeepEqual(c, want) {
		t.Errorf("Load with nothing:\n got %+v\nwant %+v", c, want)
	}
	// The SPEC's defaults.
	for _, tt := range []struct{ key, got, want string }{
		{"http.addr", c.HTTP.Addr, "127.0.0.1:8080"},
		{"mysql.dsn", c.MySQL.DSN, "root:@tcp(127.0.0.1:3306)/clock"},
		{"amqp.url", c.AMQP.URL, "amqp://guest:guest@127.0.0.1:5672/"},
		{"amqp.exchange", c.AMQP.Exchange, "clock.ring"},
		{"preload.window", c.Preload.Window.String(), "10s"},
		{"clock.max_payload_bytes", strconv.Itoa(c.Clock.MaxPayloadBytes), "65536"},
		{"cluster.instance_id", c.Cluster.InstanceID, hostPID(t)},
		{"janitor.retention", c.Janitor.Retention.String(), "24h0m0s"},
		{"janitor.retention_failed", c.Janitor.RetentionFailed.String(), "168h0m0s"},
		{"history.keep", c.History.Keep.String(), "720h0m0s"},
	} {
		if tt.got != tt.want {
			t.Errorf("%s = %q, want %q", tt.key, tt.got, tt.want)
		}
	}
	if err := config.Default().Validate(); err == nil || !strings.Contains(err.Error(), "cluster.instance_id") {
		t.Errorf("Default() without an instance id: Validate = %v", err)
	}
}

func TestYAML(t *testing.T) {
	t.Parallel()
	path := writeYAML(t, `
http:
  addr: 0.0.0.0:9090
mysql:
  dsn: "u:p@tcp(db:3306)/clocks"
  migrate_on_start: false
amqp:
  exchange: my.ring
clock:
  shards: 64
preload:
  window: 3s
cluster:
  instance_id: node-1
log:
  format: text
  level: debug
`)
	c, err := config.Load(path, noEnv)
	if err != nil {
		t.Fatal(err)
	}
	want := config.Default()
	want.HTTP.Addr = "0.0.0.0:9090"
	want.MySQL.DSN = "u:p@tcp(db:3306)/clocks"
	want.MySQL.MigrateOnStart = false
	want.AMQP.Exchange = "my.ring"
	want.Clock.Shards = 64
	want.Preload.Window = 3 * time.Second
	want.Cluster.InstanceID = "node-1"
	want.Log.Format, want.Log.Level = "text", "debug"
	if !reflect.DeepEqual(c, want) {
		t.Errorf("got %+v\nwant %+v", c, want)
	}

	empty := writeYAML(t, "# nothing set\n")
	c, err = config.Load(empty, noEnv)
	if err != nil {
		t.Fatalf("empty file: %v", err)
	}
	if c.HTTP.Addr != "127.0.0.1:8080" || c.Preload.Window != 10*time.Second {
		t.Errorf("empty file changed defaults: %+v", c)
	}

	if _, err := config.Load(filepath.Join(t.TempDir(), "missing.yaml"), noEnv); err == nil ||
		!strings.Contains(err.Error(), "missing.yaml") {
		t.Errorf("missing file: %v", err)
	}
}

func TestEnvOverridesYAML(t *testing.T) {
	t.Parallel()
	path := writeYAML(t, "http:\n  addr: 0.0.0.0:9090\npreload:\n  window: 3s\namqp:\n  exchange: from.yaml\n")
	c, err := config.Load(path, envOf(map[string]string{
		"CLOCKD_HTTP_ADDR":      "127.0.0.1:7070",
		"CLOCKD_PRELOAD_WINDOW": "20s",
	}))
	if err != nil {
		t.Fatal(err)
	}
	if c.HTTP.Addr != "127.0.0.1:7070" || c.Preload.Window != 20*time.Second {
		t.Errorf("env did not override the file: addr %q window %s", c.HTTP.Addr, c.Preload.Window)
	}
	if c.AMQP.Exchange != "from.yaml" {
		t.Errorf("exchange %q, want the file's", c.AMQP.Exchange)
	}
	// An empty variable leaves the value alone.
	c, err = config.Load(path, envOf(map[string]string{"CLOCKD_HTTP_ADDR": ""}))
	if err != nil || c.HTTP.Addr != "0.0.0.0:9090" {
		t.Errorf("empty CLOCKD_HTTP_ADDR: addr %q, %v", c.HTTP.Addr, err)
	}
}

func TestSPECEnvVars(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, key, value string
		get              func(config.Config) string
	}{
		{"CLOCKD_HTTP_ADDR", "http.addr", "0.0.0.0:18080", func(c config.Config) string { return c.HTTP.Addr }},
		{"CLOCKD_MYSQL_DSN", "mysql.dsn", "clockd:secret@tcp(mysql:3306)/clockdb?parseTime=true",
			func(c config.Config) string { return c.MySQL.DSN }},
		{"CLOCKD_AMQP_URL", "amqp.url", "amqps://u:p@rabbit:5671/vhost", func(c config.Config) string { return c.AMQP.URL }},
		{"CLOCKD_EXCHANGE", "amqp.exchange", "other.ring", func(c config.Config) string { return c.AMQP.Exchange }},
		{"CLOCKD_PRELOAD_WINDOW", "preload.window", "1m30s", func(c config.Config) string { return c.Preload.Window.String() }},
		{"CLOCKD_INSTANCE_ID", "cluster.instance_id", "clockd-a", func(c config.Config) string { return c.Cluster.InstanceID }},
		{"CLOCKD_RETENTION", "janitor.retention", "1h0m0s", func(c config.Config) string { return c.Janitor.Retention.String() }},
		{"CLOCKD_RETENTION_FAILED", "janitor.retention_failed", "48h0m0s", func(c config.Config) string { return c.Janitor.RetentionFailed.String() }},
		{"CLOCKD_HISTORY_KEEP", "history.keep", "0s", func(c config.Config) string { return c.History.Keep.String() }},
		{"CLOCKD_IDEMPOTENCY_WINDOW", "clock.idempotency_window", "1m0s", func(c config.Config) string { return c.Clock.IdempotencyWindow.String() }},
		{"CLOCKD_JANITOR_PAUSE", "janitor.pause", "0s", func(c config.Config) string { return c.Janitor.Pause.String() }},
		{"CLOCKD_JANITOR_MOVERS", "janitor.movers", "3", func(c config.Config) string { return strconv.Itoa(c.Janitor.Movers) }},
	}
	names := config.EnvNames()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if names[tt.name] != tt.key {
				t.Errorf("EnvNames()[%s] = %q, want %q", tt.name, names[tt.name], tt.key)
			}
			c, err := config.Load("", envOf(map[string]string{tt.name: tt.value}))
			if err != nil {
				t.Fatal(err)
			}
			if got := tt.get(c); got != tt.value {
				t.Errorf("%s=%q gave %q", tt.name, tt.value, got)
			}
		})
	}
	// Every variable starts with CLOCKD_ and names a distinct key.
	keys := map[string]string{}
	for name, key := range names {
		if !strings.HasPrefix(name, "CLOCKD_") || key == "" {
			t.Errorf("variable %q -> key %q", name, key)
		}
		if other, dup := keys[key]; dup {
			t.Errorf("%s and %s both set %s", name, other, key)
		}
		keys[key] = name
	}
}

func TestBadValues(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		yaml  string // file contents; "" = no file
		env   map[string]string
		wants []string // every one must be in the error
	}{
		{"env bad duration", "", map[string]string{"CLOCKD_PRELOAD_WINDOW": "ten seconds"}, []string{"CLOCKD_PRELOAD_WINDOW", "preload.window"}},
		{"env bad int", "", map[string]string{"CLOCKD_SHARDS": "many"}, []string{"CLOCKD_SHARDS", "clock.shards"}},
		{"env bad bool", "", map[string]string{"CLOCKD_MYSQL_MIGRATE_ON_START": "maybe"}, []string{"CLOCKD_MYSQL_MIGRATE_ON_START", "mysql.migrate_on_start"}},
		{"env dsn without database", "", map[string]string{"CLOCKD_MYSQL_DSN": "root:@tcp(127.0.0.1:3306)/"}, []string{"mysql.dsn"}},
		{"env dsn unparsable", "", map[string]string{"CLOCKD_MYSQL_DSN": "mysql://localhost"}, []string{"mysql.dsn"}},
		{"env addr without port", "", map[string]string{"CLOCKD_HTTP_ADDR": "localhost"}, []string{"http.addr"}},
		{"env amqp url scheme", "", map[string]string{"CLOCKD_AMQP_URL": "http://127.0.0.1:5672/"}, []string{"amqp.url"}},
		{"env amqp url list with a bad element", "", map[string]string{"CLOCKD_AMQP_URL": "amqp://u:secret@n1:5672/,http://n2:5672/"}, []string{"amqp.url", "element 2 of 2", "http://n2:5672/"}},
		{"env amqp url list with an empty element", "", map[string]string{"CLOCKD_AMQP_URL": "amqp://n1:5672/,,amqp://n3:5672/"}, []string{"amqp.url", "element 2 of 3"}},
		{"env amqp url without host", "", map[string]string{"CLOCKD_AMQP_URL": "amqp://n1/,amqp:///vhost"}, []string{"amqp.url", "element 2 of 2"}},
		{"env exchange too long", "", map[string]string{"CLOCKD_EXCHANGE": strings.Repeat("x", 256)}, []string{"amqp.exchange"}},
		{"env window too short", "", map[string]string{"CLOCKD_PRELOAD_WINDOW": "10ms"}, []string{"preload.window"}},
		{"env confirm timeout of a nanosecond", "", map[string]string{"CLOCKD_AMQP_CONFIRM_TIMEOUT": "1ns"}, []string{"amqp.confirm_timeout"}},
		{"env negative window", "", map[string]string{"CLOCKD_PRELOAD_WINDOW": "-1s"}, []string{"preload.window"}},
		{"env instance id too long", "", map[string]string{"CLOCKD_INSTANCE_ID": strings.Repeat("i", 129)}, []string{"cluster.instance_id"}},
		{"env retention failed zero", "", map[string]string{"CLOCKD_RETENTION_FAILED": "0s"}, []string{"janitor.retention_failed"}},
		{"env history keep under a day", "", map[string]string{"CLOCKD_HISTORY_KEEP": "2h"}, []string{"history.keep"}},
		{"env history keep bad", "", map[string]string{"CLOCKD_HISTORY_KEEP": "a month"}, []string{"CLOCKD_HISTORY_KEEP", "history.keep"}},
		{"env janitor interval over a minute", "", map[string]string{"CLOCKD_JANITOR_INTERVAL": "2m"}, []string{"janitor.interval"}},
		{"env janitor batch zero", "", map[string]string{"CLOCKD_JANITOR_BATCH": "0"}, []string{"janitor.batch"}},
		{"env janitor pause negative", "", map[string]string{"CLOCKD_JANITOR_PAUSE": "-1ms"}, []string{"janitor.pause"}},
		{"env janitor movers zero", "", map[string]string{"CLOCKD_JANITOR_MOVERS": "0"}, []string{"janitor.movers"}},
		{"env idempotency window negative", "", map[string]string{"CLOCKD_IDEMPOTENCY_WINDOW": "-1s"}, []string{"clock.idempotency_window"}},
		{"env writers over half the pool", "", map[string]string{"CLOCKD_MYSQL_MAX_OPEN_CONNS": "8", "CLOCKD_MYSQL_WRITERS": "5"}, []string{"mysql.writers", "mysql.max_open_conns (8)", "got 5"}},
		{"env record gap negative", "", map[string]string{"CLOCKD_RING_RECORD_GAP": "-1ms"}, []string{"ring.record_gap", "-1ms"}},
		{"env record gap over a second", "", map[string]string{"CLOCKD_RING_RECORD_GAP": "2s"}, []string{"ring.record_gap", "2s"}},
		{"yaml partitions ahead zero", "history:\n  partitions_ahead: 0\n", nil, []string{"history.partitions_ahead"}},
		{"yaml bad duration", "preload:\n  window: ten\n", nil, []string{"preload.window"}},
		{"yaml duration without unit", "preload:\n  window: 10\n", nil, []string{"preload.window"}},
		{"yaml bad int", "clock:\n  shards: many\n", nil, []string{"clock.shards"}},
		{"yaml bad bool", "mysql:\n  migrate_on_start: perhaps\n", nil, []string{"mysql.migrate_on_start"}},
		{"yaml list for a string", "mysql:\n  dsn:\n    - a\n    - b\n", nil, []string{"mysql.dsn"}},
		{"yaml scalar for a section", "http: 3\n", nil, []string{"http"}},
		{"yaml unknown key", "http:\n  adr: 127.0.0.1:1\n", nil, []string{"http.adr"}},
		{"yaml unknown section", "cache:\n  size: 1\n", nil, []string{"cache"}},
		{"yaml flow mapping", "preload: {window: soon}\n", nil, []string{"preload.window"}},
		{"yaml dsn without database", "mysql:\n  dsn: root:@tcp(127.0.0.1:3306)/\n", nil, []string{"mysql.dsn"}},
		{"yaml invalid by validation", "ring:\n  retry_min: 10s\n  retry_max: 1s\n", nil, []string{"ring.retry_max"}},
		{"yaml two bad values", "clock:\n  shards: 0\nlog:\n  level: loud\n", nil, []string{"clock.shards", "log.level"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := ""
			if tt.yaml != "" {
				path = writeYAML(t, tt.yaml)
			}
			_, err := config.Load(path, envOf(tt.env))
			if err == nil {
				t.Fatalf("accepted")
			}
			for _, w := range tt.wants {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not name %q", err, w)
				}
			}
		})
	}
}

// A decimal number for an integer key is refused, naming the key and the
// value as written: yaml.v3 would cut 7.99 down to 7 without a word, and
// 1.5 to 1 (then refused as "got 1").
func TestDecimalForAnInteger(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		yaml  string
		env   map[string]string
		wants []string
	}{
		{"yaml shards", "clock:\n  shards: 7.99\n", nil, []string{"clock.shards", "whole number", "7.99", "line 2"}},
		{"yaml body bytes over the minimum", "http: {max_body_bytes: 2048.9}\n", nil, []string{"http.max_body_bytes", "2048.9"}},
		{"yaml body bytes under the minimum", "http: {max_body_bytes: 1.5}\n", nil, []string{"http.max_body_bytes", "1.5"}},
		{"yaml busy percent", "janitor: {busy_percent: 0.5}\n", nil, []string{"janitor.busy_percent", "0.5"}},
		{"yaml exponent", "preload:\n  heap_cap: 1e6\n", nil, []string{"preload.heap_cap", "1e6"}},
		{"yaml through an alias", "clock:\n  shards: &n 16.5\nhistory:\n  partitions_ahead: *n\n", nil,
			[]string{"line 2: clock.shards", "line 4: history.partitions_ahead", "16.5"}},
		{"yaml in a merge", "janitor:\n  <<: {movers: 2.5}\n", nil, []string{"janitor.movers", "2.5"}},
		{"env shards", "", map[string]string{"CLOCKD_SHARDS": "7.5"}, []string{"CLOCKD_SHARDS", "clock.shards", "7.5", "whole number"}},
		{"env body bytes", "", map[string]string{"CLOCKD_HTTP_MAX_BODY_BYTES": "2048.9"}, []string{"CLOCKD_HTTP_MAX_BODY_BYTES", "http.max_body_bytes", "2048.9"}},
		{"env busy percent", "", map[string]string{"CLOCKD_JANITOR_BUSY_PERCENT": "0.5"}, []string{"CLOCKD_JANITOR_BUSY_PERCENT", "janitor.busy_percent", "0.5"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := ""
			if tt.yaml != "" {
				path = writeYAML(t, tt.yaml)
			}
			c, err := config.Load(path, envOf(tt.env))
			if err == nil {
				t.Fatalf("accepted: shards %d, max_body_bytes %d, busy_percent %d", c.Clock.Shards, c.HTTP.MaxBodyBytes, c.Janitor.BusyPercent)
			}
			for _, w := range tt.wants {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not name %q", err, w)
				}
			}
		})
	}
	// Whole numbers are as before, in every notation yaml.v3 reads as one.
	c, err := config.Load(writeYAML(t, "clock:\n  shards: 0x10\njanitor:\n  busy_percent: 50\n"), noEnv)
	if err != nil || c.Clock.Shards != 16 || c.Janitor.BusyPercent != 50 {
		t.Errorf("whole numbers: shards %d, busy_percent %d, %v", c.Clock.Shards, c.Janitor.BusyPercent, err)
	}
}

// Listen addresses are checked when the configuration is, not by the
// listen that comes after the database was created and migrated.
func TestListenAddresses(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name, value string
		wants       []string // in the error; none: accepted
	}{
		{"CLOCKD_HTTP_ADDR", "127.0.0.1:99999", []string{"http.addr", "0 to 65535", "99999"}},
		{"CLOCKD_HTTP_ADDR", "127.0.0.1:65536", []string{"http.addr", "65536"}},
		{"CLOCKD_HTTP_ADDR", "127.0.0.1:-1", []string{"http.addr", "-1"}},
		{"CLOCKD_HTTP_ADDR", "127.0.0.1:http", []string{"http.addr", "http"}},
		{"CLOCKD_HTTP_ADDR", "127.0.0.1:", []string{"http.addr"}},
		{"CLOCKD_HTTP_ADDR", "::1:8080", []string{"http.addr", "host:port"}},
		{"CLOCKD_HTTP_ADDR", "garbage", []string{"http.addr", "host:port", "garbage"}},
		{"CLOCKD_PPROF_ADDR", "garbage", []string{"http.pprof_addr", "host:port", "garbage"}},
		{"CLOCKD_PPROF_ADDR", "127.0.0.1:70000", []string{"http.pprof_addr", "70000"}},
		{"CLOCKD_PPROF_ADDR", "127.0.0.1:6060:1", []string{"http.pprof_addr"}},
		{"CLOCKD_HTTP_ADDR", "127.0.0.1:0", nil},
		{"CLOCKD_HTTP_ADDR", "127.0.0.1:65535", nil},
		{"CLOCKD_HTTP_ADDR", "[::1]:8080", nil},
		{"CLOCKD_HTTP_ADDR", "localhost:8080", nil},
		{"CLOCKD_PPROF_ADDR", "127.0.0.1:6060", nil},
		{"CLOCKD_PPROF_ADDR", ":0", nil},
	} {
		_, err := config.Load("", envOf(map[string]string{tt.name: tt.value}))
		if len(tt.wants) == 0 {
			if err != nil {
				t.Errorf("%s=%s: %v", tt.name, tt.value, err)
			}
			continue
		}
		if err == nil {
			t.Errorf("%s=%s accepted", tt.name, tt.value)
			continue
		}
		for _, w := range tt.wants {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s=%s: error %q does not name %q", tt.name, tt.value, err, w)
			}
		}
	}
	// The same from the file; an empty pprof_addr is off.
	if _, err := config.Load(writeYAML(t, "http:\n  pprof_addr: localhost:99999\n"), noEnv); err == nil || !strings.Contains(err.Error(), "http.pprof_addr") {
		t.Errorf("pprof_addr in the file: %v", err)
	}
	if _, err := config.Load(writeYAML(t, "http:\n  pprof_addr: \"\"\n"), noEnv); err != nil {
		t.Errorf("empty pprof_addr: %v", err)
	}
}

func TestInstanceID(t *testing.T) {
	t.Parallel()
	c, err := config.Load("", noEnv)
	if err != nil {
		t.Fatal(err)
	}
	if c.Cluster.InstanceID != hostPID(t) {
		t.Errorf("default instance id %q, want %q", c.Cluster.InstanceID, hostPID(t))
	}
	c, err = config.Load(writeYAML(t, "cluster:\n  instance_id: from-file\n"), envOf(map[string]string{"CLOCKD_INSTANCE_ID": "from-env"}))
	if err != nil || c.Cluster.InstanceID != "from-env" {
		t.Errorf("instance id %q, %v; want from-env", c.Cluster.InstanceID, err)
	}
}

// yamlKeys lists the dotted keys of the Config struct.
func yamlKeys(t reflect.Type, prefix string) []string {
	var out []string
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		name := strings.Split(f.Tag.Get("yaml"), ",")[0]
		if f.Type.Kind() == reflect.Struct && f.Type != reflect.TypeOf(time.Duration(0)) {
			out = append(out, yamlKeys(f.Type, prefix+name+".")...)
			continue
		}
		out = append(out, prefix+name)
	}
	return out
}

// fileKeys lists the dotted keys a YAML document sets.
func fileKeys(n *yaml.Node, prefix string) []string {
	var out []string
	switch n.Kind {
	case yaml.DocumentNode:
		for _, c := range n.Content {
			out = append(out, fileKeys(c, prefix)...)
		}
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i].Value, n.Content[i+1]
			if v.Kind == yaml.MappingNode {
				out = append(out, fileKeys(v, prefix+k+".")...)
				continue
			}
			out = append(out, prefix+k)
		}
	}
	return out
}

// TestShippedYAML checks config/clockd.yaml documents every key with its default.
func TestShippedYAML(t *testing.T) {
	t.Parallel()
	path := filepath.Join("..", "..", "config", "clockd.yaml")
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	c, err := config.Load(path, noEnv)
	if err != nil {
		t.Fatalf("Load(%s): %v", path, err)
	}
	want := config.Default()
	want.Cluster.InstanceID = c.Cluster.InstanceID
	if !reflect.DeepEqual(c, want) {
		t.Errorf("%s differs from config.Default():\n got %+v\nwant %+v", path, c, want)
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		t.Fatal(err)
	}
	got := fileKeys(&doc, "")
	wantKeys := yamlKeys(reflect.TypeOf(config.Config{}), "")
	sort.Strings(got)
	sort.Strings(wantKeys)
	have := map[string]bool{}
	for _, k := range got {
		have[k] = true
	}
	for _, k := range wantKeys {
		if !have[k] && k != "cluster.instance_id" {
			t.Errorf("%s does not document %s", path, k)
		}
	}
	if !strings.Contains(string(data), "instance_id") {
		t.Errorf("%s does not mention instance_id", path)
	}
}

// CLOCKD_AMQP_URL names the nodes of a cluster, separated by commas; an
// error names the bad element and never shows a password.
func TestAMQPURLList(t *testing.T) {
	t.Parallel()
	list := "amqp://u:p@n1:5672/, amqp://u:p@n2:5672/,amqps://u:p@n3:5671/v"
	c, err := config.Load("", envOf(map[string]string{"CLOCKD_AMQP_URL": list}))
	if err != nil {
		t.Fatalf("a list of three URLs refused: %v", err)
	}
	if c.AMQP.URL != list {
		t.Errorf("amqp.url %q, want %q", c.AMQP.URL, list)
	}
	_, err = config.Load("", envOf(map[string]string{"CLOCKD_AMQP_URL": "amqp://u:topsecret@n1:5672/,amqp://u:topsecret@n2:5672/,tcp://u:topsecret@n3"}))
	if err == nil {
		t.Fatal("a list with a tcp:// element accepted")
	}
	if !strings.Contains(err.Error(), "element 3 of 3") || !strings.Contains(err.Error(), "n3") {
		t.Errorf("error %q does not name the third element", err)
	}
	if strings.Contains(err.Error(), "topsecret") {
		t.Errorf("error %q shows the password", err)
	}
}

// A payload limit a body cannot carry is refused at start, naming the key
// (a payload between the two answered a body-too-large 413, not the
// payload limit the operator set).
func TestPayloadLimitMustFitTheBodyLimit(t *testing.T) {
	env := map[string]string{"CLOCKD_MAX_PAYLOAD_BYTES": "12000000"}
	_, err := config.Load("", func(k string) string { return env[k] })
	if err == nil || !strings.Contains(err.Error(), "http.max_body_bytes") || !strings.Contains(err.Error(), "clock.max_payload_bytes") {
		t.Fatalf("clock.max_payload_bytes 12000000 with http.max_body_bytes 8 MiB: %v, want an error naming both", err)
	}
	env["CLOCKD_HTTP_MAX_BODY_BYTES"] = "12001024"
	if _, err := config.Load("", func(k string) string { return env[k] }); err != nil {
		t.Errorf("a body limit that fits the payload: %v", err)
	}
}

// TestIdempotencyWindowCappedAtRetention: a retention shorter than the
// idempotency window starts, with the window cut to it (it was refused at
// start, found by review: SPEC names CLOCKD_RETENTION, not the window).
func TestIdempotencyWindowCappedAtRetention(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		env  map[string]string
		want time.Duration
	}{
		{map[string]string{}, 10 * time.Minute},
		{map[string]string{"CLOCKD_RETENTION": "5m"}, 5 * time.Minute},
		{map[string]string{"CLOCKD_RETENTION_FAILED": "2m"}, 2 * time.Minute},
		{map[string]string{"CLOCKD_RETENTION": "5m", "CLOCKD_IDEMPOTENCY_WINDOW": "1m"}, time.Minute},
		{map[string]string{"CLOCKD_RETENTION": "1h", "CLOCKD_IDEMPOTENCY_WINDOW": "2h"}, time.Hour},
	} {
		c, err := config.Load("", envOf(tt.env))
		if err != nil {
			t.Errorf("%v: %v", tt.env, err)
			continue
		}
		if got := c.Clock.IdempotencyWindow; got != tt.want {
			t.Errorf("%v: window %s, want %s", tt.env, got, tt.want)
		}
	}
}
