package testenv

import (
	"fmt"
	"net"
	"runtime"
	"strconv"
	"strings"
	"testing"
)

// recorder is a testing.TB that records how a helper ended the test.
type recorder struct {
	testing.TB
	fatal, skip string
}

func (r *recorder) Helper() {}
func (r *recorder) Fatal(args ...any) {
	r.fatal = fmt.Sprint(args...)
	runtime.Goexit()
}
func (r *recorder) Fatalf(format string, args ...any) {
	r.fatal = fmt.Sprintf(format, args...)
	runtime.Goexit()
}
func (r *recorder) Skip(args ...any) {
	r.skip = fmt.Sprint(args...)
	runtime.Goexit()
}
func (r *recorder) Skipf(format string, args ...any) {
	r.skip = fmt.Sprintf(format, args...)
	runtime.Goexit()
}
func (r *recorder) SkipNow() { r.Skip("SkipNow") }
func (r *recorder) FailNow() { r.Fatal("FailNow") }

// calling runs f with a recorder, as a test would, and returns it.
func calling(t *testing.T, f func(tb testing.TB)) *recorder {
	r := &recorder{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		f(r)
	}()
	<-done
	return r
}

// A server that does not answer fails the test, with or without CI=true,
// naming its address and how to start the services; it never skips.
func TestUnreachableServerFailsNeverSkips(t *testing.T) {
	for _, ci := range []string{"", "true", "false"} {
		t.Run("CI="+ci, func(t *testing.T) {
			t.Setenv("CI", ci)
			t.Setenv("CLOCKD_TEST_AMQP_URL", "amqp://guest:guest@127.0.0.1:1/")
			t.Setenv("CLOCKD_TEST_MYSQL_DSN", "root:@tcp(127.0.0.1:1)/")
			tests := []struct {
				name, addr string
				call       func(testing.TB)
			}{
				{"RabbitMQ", "127.0.0.1:1", func(tb testing.TB) { AMQPURL(tb) }},
				{"MySQL", "127.0.0.1:1", func(tb testing.TB) { MySQLDSN(tb) }},
			}
			for _, tt := range tests {
				r := calling(t, tt.call)
				if r.skip != "" {
					t.Errorf("%s unreachable: skipped (%q), want a failure", tt.name, r.skip)
				}
				if r.fatal == "" {
					t.Fatalf("%s unreachable: the test did not fail", tt.name)
				}
				for _, want := range []string{tt.name, tt.addr, "start-stop-daemon --start --oknodo --background --exec /usr/sbin/mariadbd",
					"rabbitmq-server -detached", "docker compose up -d", "bash .ci/run"} {
					if !strings.Contains(r.fatal, want) {
						t.Errorf("%s unreachable: the failure does not say %q:\n%s", tt.name, want, r.fatal)
					}
				}
			}
		})
	}
}

// FreeAddr's ports lie below the kernel's ephemeral range, where no
// outgoing connection can take them before the test's server binds, and
// can be listened on.
func TestFreeAddrIsBelowTheEphemeralRange(t *testing.T) {
	lo, hi := serverPortRange()
	if lo < 1024 || hi <= lo {
		t.Fatalf("range %d..%d", lo, hi)
	}
	seen := map[string]bool{}
	for range 20 {
		addr := FreeAddr(t)
		_, p, err := net.SplitHostPort(addr)
		if err != nil {
			t.Fatal(err)
		}
		port, _ := strconv.Atoi(p)
		if port < lo || port >= hi {
			t.Errorf("port %d outside %d..%d", port, lo, hi-1)
		}
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			t.Errorf("%s: %v", addr, err)
			continue
		}
		ln.Close()
		seen[addr] = true
	}
	if len(seen) < 10 {
		t.Errorf("%d distinct addresses of 20", len(seen))
	}
}
