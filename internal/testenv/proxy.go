package testenv

import (
	"io"
	"net"
	"sync"
	"testing"
	"time"
)

// Proxy is a TCP proxy a test can cut and restore, to take a service away
// from one clockd without touching the service itself (other tests and
// sessions share it).
type Proxy struct {
	t      testing.TB
	Addr   string // where clients connect
	target string

	mu    sync.Mutex
	ln    net.Listener // nil while cut
	conns map[net.Conn]struct{}
	wg    sync.WaitGroup
}

// StartProxy listens on a free 127.0.0.1 port and forwards every
// connection to target. It is closed when the test ends.
func StartProxy(t testing.TB, target string) *Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &Proxy{t: t, Addr: ln.Addr().String(), target: target, conns: map[net.Conn]struct{}{}}
	p.serve(ln)
	t.Cleanup(func() {
		p.Cut()
		p.wg.Wait()
	})
	return p
}

// Cut stops accepting (the port is closed: connecting is refused) and
// closes every proxied connection.
func (p *Proxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ln != nil {
		p.ln.Close()
		p.ln = nil
	}
	for c := range p.conns {
		c.Close()
	}
}

// Restore listens again on the same address.
func (p *Proxy) Restore() {
	p.t.Helper()
	var err error
	for range 50 { // the port may linger for a moment
		var ln net.Listener
		if ln, err = net.Listen("tcp", p.Addr); err == nil {
			p.serve(ln)
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	p.t.Fatalf("proxy: listen again on %s: %v", p.Addr, err)
}

func (p *Proxy) serve(ln net.Listener) {
	p.mu.Lock()
	p.ln = ln
	p.mu.Unlock()
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			p.wg.Add(1)
			go func() {
				defer p.wg.Done()
				p.pipe(c)
			}()
		}
	}()
}

// pipe forwards c to the target until either side closes or Cut.
func (p *Proxy) pipe(c net.Conn) {
	up, err := net.DialTimeout("tcp", p.target, 5*time.Second)
	if err != nil {
		c.Close()
		return
	}
	p.mu.Lock()
	if p.ln == nil { // cut meanwhile
		p.mu.Unlock()
		c.Close()
		up.Close()
		return
	}
	p.conns[c], p.conns[up] = struct{}{}, struct{}{}
	p.mu.Unlock()
	done := make(chan struct{}, 2)
	cp := func(dst, src net.Conn) {
		_, _ = io.Copy(dst, src)
		done <- struct{}{}
	}
	go cp(up, c)
	go cp(c, up)
	<-done
	c.Close()
	up.Close()
	<-done
	p.mu.Lock()
	delete(p.conns, c)
	delete(p.conns, up)
	p.mu.Unlock()
}
