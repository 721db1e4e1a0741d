package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"strings"
	"testing"
)

// A server that cannot start (MySQL unreachable) says why in its log, as a
// JSON line at ERROR that a log pipeline reads, not only as main's plain
// "clockd: ..." on stderr.
func TestServeStartErrorIsLogged(t *testing.T) {
	t.Parallel()
	var stderr bytes.Buffer
	env := runEnvOf(map[string]string{"CLOCKD_MYSQL_DSN": "root:@tcp(127.0.0.1:1)/none", "CLOCKD_HTTP_ADDR": "127.0.0.1:0"})
	err := run(context.Background(), []string{"serve"}, env, io.Discard, &stderr)
	if err == nil {
		t.Fatal("serve with MySQL unreachable succeeded")
	}
	for line := range strings.Lines(stderr.String()) {
		var rec struct {
			Level string `json:"level"`
			Msg   string `json:"msg"`
			Err   string `json:"err"`
		}
		if json.Unmarshal([]byte(line), &rec) == nil && rec.Level == "ERROR" && rec.Msg == "clockd stopped" && rec.Err == err.Error() {
			return
		}
	}
	t.Errorf("no JSON ERROR line with %q in the log:\n%s", err, stderr.String())
}
