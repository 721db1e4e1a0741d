package testenv

import (
	"io"
	"net"
	"testing"
)

// greeter answers each connection with greeting and closes it.
func greeter(t *testing.T, greeting string) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	t.Cleanup(func() { ln.Close(); <-done })
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_, _ = io.WriteString(c, greeting)
			c.Close()
		}
	}()
	return ln.Addr().String()
}

// SetTarget moves the endpoint: new connections reach the new target, the
// old ones are not touched until KillConns.
func TestProxySetTarget(t *testing.T) {
	t.Parallel()
	primary, replica := greetEcho(t), greeter(t, "replica\n")
	p := StartProxy(t, primary)
	old := dialLine(t, p.Addr)
	wantLine(t, old, "hello\n")

	p.SetTarget(replica)
	if p.Target() != replica {
		t.Errorf("Target() = %s, want %s", p.Target(), replica)
	}
	old.send(t, "still the primary\n")
	wantLine(t, old, "still the primary\n")
	wantLine(t, dialLine(t, p.Addr), "replica\n")

	if n := p.KillConns(); n < 1 {
		t.Errorf("KillConns closed %d connections, want the old one", n)
	}
	if _, err := old.line(2e9); err == nil {
		t.Error("the old connection still answers after KillConns")
	}
}
