package testenv

import (
	"bufio"
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"testing"
	"time"
)

// greetEcho is a tiny server like a database: it greets each connection
// with "hello\n" (server to client first), then echoes lines.
func greetEcho(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				if _, err := io.WriteString(c, "hello\n"); err != nil {
					return
				}
				_, _ = io.Copy(c, c)
			}()
		}
	}()
	return ln.Addr().String()
}

type lineConn struct {
	net.Conn
	r *bufio.Reader
}

func dialLine(t *testing.T, addr string) *lineConn {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		t.Fatalf("dial %s: %v", addr, err)
	}
	t.Cleanup(func() { c.Close() })
	return &lineConn{Conn: c, r: bufio.NewReader(c)}
}

// line reads one line within d; "" and the error when none comes.
func (c *lineConn) line(d time.Duration) (string, error) {
	c.SetReadDeadline(time.Now().Add(d))
	s, err := c.r.ReadString('\n')
	return s, err
}

func (c *lineConn) send(t *testing.T, s string) {
	t.Helper()
	if _, err := io.WriteString(c, s); err != nil {
		t.Fatalf("write: %v", err)
	}
}

func wantLine(t *testing.T, c *lineConn, want string) {
	t.Helper()
	got, err := c.line(2 * time.Second)
	if err != nil || got != want {
		t.Fatalf("read %q, %v; want %q", got, err, want)
	}
}

func wantSilence(t *testing.T, c *lineConn, what string) {
	t.Helper()
	got, err := c.line(300 * time.Millisecond)
	if !errors.Is(err, os.ErrDeadlineExceeded) || got != "" {
		t.Fatalf("%s: read %q, %v; want nothing (a timeout)", what, got, err)
	}
}

func TestProxyStallResume(t *testing.T) {
	t.Parallel()
	p := StartProxy(t, greetEcho(t))
	old := dialLine(t, p.Addr)
	wantLine(t, old, "hello\n")
	old.send(t, "one\n")
	wantLine(t, old, "one\n")

	p.Stall()
	old.send(t, "two\n") // client to server waits
	wantSilence(t, old, "stalled, an open connection")
	fresh := dialLine(t, p.Addr) // accepted, but the greeting waits
	wantSilence(t, fresh, "stalled, a new connection")
	fresh.send(t, "three\n")
	if n := p.Conns(); n != 2 {
		t.Errorf("%d connections while stalled, want 2 (none closed)", n)
	}

	p.Resume()
	wantLine(t, old, "two\n")
	wantLine(t, fresh, "hello\n")
	wantLine(t, fresh, "three\n")
	old.send(t, "four\n")
	wantLine(t, old, "four\n")

	// Stall and Resume again; a second Stall or Resume is harmless.
	p.Stall()
	p.Stall()
	old.send(t, "five\n")
	wantSilence(t, old, "stalled again")
	p.Resume()
	p.Resume()
	wantLine(t, old, "five\n")
}

func TestProxyKillConns(t *testing.T) {
	t.Parallel()
	p := StartProxy(t, greetEcho(t))
	a, b := dialLine(t, p.Addr), dialLine(t, p.Addr)
	wantLine(t, a, "hello\n")
	wantLine(t, b, "hello\n")
	if n := p.KillConns(); n != 2 {
		t.Errorf("KillConns closed %d connections, want 2", n)
	}
	for _, c := range []*lineConn{a, b} {
		if got, err := c.line(2 * time.Second); err != io.EOF {
			t.Errorf("killed connection read %q, %v; want EOF", got, err)
		}
	}
	c := dialLine(t, p.Addr) // the listener stays
	wantLine(t, c, "hello\n")
	c.send(t, "again\n")
	wantLine(t, c, "again\n")
}

func TestProxyStallThenKill(t *testing.T) {
	t.Parallel()
	p := StartProxy(t, greetEcho(t))
	a := dialLine(t, p.Addr)
	wantLine(t, a, "hello\n")
	p.Stall()
	a.send(t, "lost\n")
	p.KillConns() // ends a stalled connection at once
	// Closed with the client's bytes unread: a reset rather than an EOF.
	if got, err := a.line(2 * time.Second); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("killed stalled connection read %q, %v; want it closed", got, err)
	}
	p.Resume()
	b := dialLine(t, p.Addr)
	wantLine(t, b, "hello\n")
}

func TestProxyCutRestore(t *testing.T) {
	t.Parallel()
	p := StartProxy(t, greetEcho(t))
	a := dialLine(t, p.Addr)
	wantLine(t, a, "hello\n")
	p.Cut()
	if got, err := a.line(2 * time.Second); err != io.EOF {
		t.Errorf("cut connection read %q, %v; want EOF", got, err)
	}
	if c, err := net.DialTimeout("tcp", p.Addr, time.Second); err == nil {
		c.Close()
		t.Fatal("connected to a cut proxy")
	}
	p.Restore()
	b := dialLine(t, p.Addr)
	wantLine(t, b, "hello\n")
}

// SetDelay holds what the target sends, not what the client sends, and
// holds each chunk from when it was read: two answers asked for 200 ms
// apart arrive 200 ms apart, each 500 ms late.
func TestProxyDelay(t *testing.T) {
	p := StartProxy(t, greetEcho(t))
	p.SetDelay(500 * time.Millisecond)
	c := dialLine(t, p.Addr)
	start := time.Now()
	wantLine(t, c, "hello\n")
	if d := time.Since(start); d < 500*time.Millisecond || d > 1500*time.Millisecond {
		t.Fatalf("greeting after %v, want 500 ms", d)
	}
	sent := time.Now()
	c.send(t, "one\n")
	time.Sleep(200 * time.Millisecond)
	c.send(t, "two\n")
	wantLine(t, c, "one\n")
	first := time.Since(sent)
	wantLine(t, c, "two\n")
	second := time.Since(sent)
	if first < 500*time.Millisecond || first > 1500*time.Millisecond {
		t.Errorf("first answer after %v, want 500 ms", first)
	}
	if gap := second - first; gap < 150*time.Millisecond || gap > 450*time.Millisecond {
		t.Errorf("answers %v apart, want 200 ms (held from their reading, not one after the other)", gap)
	}
}
