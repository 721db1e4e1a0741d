package testenv

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

var (
	buildOnce sync.Once
	buildPath string
	buildErr  error
)

// ClockdBinary builds cmd/clockd (with -race when the tests run with it)
// once per test binary and returns its path.
func ClockdBinary(t testing.TB) string {
	t.Helper()
	buildOnce.Do(func() {
		out, err := exec.Command("go", "env", "GOMOD").Output()
		if err != nil {
			buildErr = fmt.Errorf("go env GOMOD: %w", err)
			return
		}
		root := filepath.Dir(strings.TrimSpace(string(out)))
		dir, err := os.MkdirTemp("", "clockd-bin-")
		if err != nil {
			buildErr = err
			return
		}
		buildPath = filepath.Join(dir, "clockd")
		args := []string{"build", "-o", buildPath}
		if raceEnabled {
			args = append(args, "-race")
		}
		cmd := exec.Command("go", append(args, "./cmd/clockd")...)
		cmd.Dir = root
		if b, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("build clockd: %v\n%s", err, b)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return buildPath
}

// FreeAddr returns a free 127.0.0.1 TCP address for a server a test starts.
//
// The port is below the kernel's ephemeral range: a port the kernel hands
// out for ":0" is also what it hands out as the source port of outgoing
// connections, and between this check and the server's own bind, one of
// the many MySQL and AMQP connections of the tests running alongside can
// take it (a RabbitMQ node then fails to start with eaddrinuse, as seen in
// CI). A port below the range is never taken that way.
func FreeAddr(t testing.TB) string {
	t.Helper()
	ln := listenFree(t)
	defer ln.Close()
	return ln.Addr().String()
}

// listenFree listens on a free 127.0.0.1 port below the kernel's ephemeral
// range (see FreeAddr), for a listener that may close and listen on the
// same address again (a proxy cut and restored).
func listenFree(t testing.TB) net.Listener {
	t.Helper()
	lo, hi := serverPortRange()
	for range 200 {
		port := lo + rand.IntN(hi-lo)
		if ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port))); err == nil {
			return ln
		}
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return ln
}

// serverPortRange is where FreeAddr picks ports: the 10,000 ports below the
// kernel's ephemeral range (/proc/sys/net/ipv4/ip_local_port_range; Linux's
// default 32768-60999 elsewhere), never below 1024.
func serverPortRange() (lo, hi int) {
	first := 32768
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if n, err := strconv.Atoi(f[0]); err == nil && n > 1024 {
				first = n
			}
		}
	}
	return max(1024, first-10000), first
}

// Clockd is a clockd process started by a test.
type Clockd struct {
	t    testing.TB
	Addr string
	URL  string
	Env  []string
	mu   sync.Mutex
	cmd  *exec.Cmd
	logs *SyncBuffer
	done chan struct{}
	err  error
}

// SyncBuffer is a bytes.Buffer safe for a writer and a reader in different
// goroutines (a process's output read by a test).
type SyncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// StartClockd runs clockd with the given environment (CLOCKD_HTTP_ADDR is
// chosen here) and waits until /readyz answers 200. It is killed when the
// test ends.
func StartClockd(t testing.TB, env map[string]string) *Clockd {
	t.Helper()
	c := LaunchClockd(t, env)
	c.WaitReady(60 * time.Second)
	return c
}

// LaunchClockd is StartClockd without waiting for readiness: for tests of
// a clockd that cannot be ready (a service unreachable). WaitHealthy waits
// until it serves HTTP.
func LaunchClockd(t testing.TB, env map[string]string) *Clockd {
	t.Helper()
	addr := FreeAddr(t)
	c := &Clockd{t: t, Addr: addr, URL: "http://" + addr, logs: &SyncBuffer{}}
	c.Env = append(os.Environ(), "CLOCKD_HTTP_ADDR="+addr, "CLOCKD_LOG_FORMAT=text")
	for k, v := range env {
		c.Env = append(c.Env, k+"="+v)
	}
	c.Start()
	t.Cleanup(func() {
		c.Kill()
		if t.Failed() {
			t.Logf("clockd %s log:\n%s", c.Addr, tail(c.Logs(), 8000))
		}
	})
	return c
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "…" + s[len(s)-n:]
}

// Start (re)starts the process with the same address and environment.
func (c *Clockd) Start() {
	c.t.Helper()
	cmd := exec.Command(ClockdBinary(c.t), "serve")
	cmd.Env = c.Env
	cmd.Stdout = c.logs
	cmd.Stderr = c.logs
	if err := cmd.Start(); err != nil {
		c.t.Fatalf("start clockd: %v", err)
	}
	done := make(chan struct{})
	c.mu.Lock()
	c.cmd, c.done = cmd, done
	c.mu.Unlock()
	go func() {
		err := cmd.Wait()
		c.mu.Lock()
		c.err = err
		c.mu.Unlock()
		close(done)
	}()
}

// WaitReady waits until /readyz answers 200.
func (c *Clockd) WaitReady(limit time.Duration) {
	c.t.Helper()
	c.waitFor("/readyz", limit)
}

// WaitHealthy waits until /healthz answers 200 (the process serves HTTP).
func (c *Clockd) WaitHealthy(limit time.Duration) {
	c.t.Helper()
	c.waitFor("/healthz", limit)
}

// Ready answers /readyz: its status code and body (0 and the error when
// there is no answer).
func (c *Clockd) Ready() (int, string) {
	resp, err := http.Get(c.URL + "/readyz")
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func (c *Clockd) waitFor(path string, limit time.Duration) {
	c.t.Helper()
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) {
		c.mu.Lock()
		done := c.done
		c.mu.Unlock()
		select {
		case <-done:
			c.t.Fatalf("clockd exited before it was ready: %v\n%s", c.err, tail(c.Logs(), 4000))
		default:
		}
		resp, err := http.Get(c.URL + path)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	c.t.Fatalf("clockd %s not 200 after %s\n%s", path, limit, tail(c.Logs(), 4000))
}

// Signal sends a signal to the process.
func (c *Clockd) Signal(sig syscall.Signal) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cmd != nil && c.cmd.Process != nil {
		_ = c.cmd.Process.Signal(sig)
	}
}

// Kill sends SIGKILL and waits for the process to end.
func (c *Clockd) Kill() {
	c.Signal(syscall.SIGCONT)
	c.Signal(syscall.SIGKILL)
	c.Wait(10 * time.Second)
}

// Stop sends SIGTERM and waits (graceful shutdown); it returns the exit error.
func (c *Clockd) Stop(limit time.Duration) error {
	c.Signal(syscall.SIGTERM)
	return c.Wait(limit)
}

// Wait waits for the process to end.
func (c *Clockd) Wait(limit time.Duration) error {
	c.mu.Lock()
	done := c.done
	c.mu.Unlock()
	if done == nil {
		return nil
	}
	select {
	case <-done:
	case <-time.After(limit):
		c.t.Errorf("clockd did not exit within %s", limit)
		c.Signal(syscall.SIGKILL)
		<-done
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// Logs returns what the process wrote.
func (c *Clockd) Logs() string { return c.logs.String() }

// Do sends a JSON request and decodes the JSON answer into out (if not nil).
func (c *Clockd) Do(ctx context.Context, method, path string, body any, out any) (int, error) {
	var r io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return 0, err
		}
		r = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.URL+path, r)
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return resp.StatusCode, err
	}
	if out != nil && len(data) > 0 {
		if err := json.Unmarshal(data, out); err != nil {
			return resp.StatusCode, fmt.Errorf("decode %s: %w", data, err)
		}
	}
	return resp.StatusCode, nil
}
