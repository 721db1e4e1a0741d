package testenv

import (
	"bytes"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Proxy is a TCP proxy a test can cut, stall and restore, to take a service
// away from one clockd without touching the service itself (other tests and
// sessions share it).
//
// The faults it plays:
//   - Cut: the port is closed and every connection is closed (the service
//     is down, connecting is refused);
//   - KillConns: every connection is closed but new ones are taken (a
//     `KILL` of every connection, a broker closing its connections);
//   - Stall: connections stay open and new ones are accepted, but no byte
//     moves in either direction until Resume (a SIGSTOPped server whose
//     kernel still holds the sockets, a network black hole).
type Proxy struct {
	t    testing.TB
	Addr string // where clients connect

	mu     sync.Mutex
	target string       // guarded by mu: SetTarget moves it
	ln     net.Listener // nil while cut
	links  map[*link]struct{}
	gate   chan struct{} // non-nil while stalled; closed by Resume
	trap   *trap         // armed by CutOn
	late   *lateTrap     // armed by LateOn
	delay  atomic.Int64  // ns: what the target sends reaches the client this much later
	down   atomic.Int64  // bytes read from the target, over every connection
	wg     sync.WaitGroup
}

// trap cuts the connection that sends a chunk containing pattern.
type trap struct {
	pattern []byte
	after   bool          // forward the chunk first, then cut
	fired   chan struct{} // closed when it went off
}

// CutOn arms a one-shot trap: the next chunk a client sends that contains
// pattern (say, a statement's text) cuts its connection. With after, the
// chunk is forwarded first and the connection is cut a moment later,
// before the answer is relayed: the service did what was asked, the client
// never hears it (a COMMIT whose answer is lost). Without after, the chunk
// is dropped and the connection cut: the service never saw it. The
// returned channel is closed when the trap went off.
func (p *Proxy) CutOn(pattern string, after bool) <-chan struct{} {
	t := &trap{pattern: []byte(pattern), after: after, fired: make(chan struct{})}
	p.mu.Lock()
	p.trap = t
	p.mu.Unlock()
	return t.fired
}

// lateTrap holds back the client bytes of one connection: see LateOn.
type lateTrap struct {
	arm, pattern []byte
	d            time.Duration
	armed        *link
	fired        chan struct{}
}

// LateOn arms a one-shot trap on one connection: the next one whose
// client sends a chunk containing arm (say, a statement's text) is marked;
// when it then sends a chunk containing pattern (its COMMIT), that chunk
// and everything its client sends after it reach the target d late, even
// if the client has given up meanwhile, while other connections flow (a
// TCP segment retransmitted after a blip: the server gets the COMMIT late,
// after fresh connections already got through). The returned channel is
// closed when the held chunk was forwarded.
func (p *Proxy) LateOn(arm, pattern string, d time.Duration) <-chan struct{} {
	t := &lateTrap{arm: []byte(arm), pattern: []byte(pattern), d: d, fired: make(chan struct{})}
	p.mu.Lock()
	p.late = t
	p.mu.Unlock()
	return t.fired
}

// lateFor is how long l's client chunk must wait (LateOn), and the channel
// to close once it has gone on (nil but for the chunk that set it off).
func (p *Proxy) lateFor(l *link, chunk []byte) (time.Duration, chan struct{}) {
	p.mu.Lock()
	defer p.mu.Unlock()
	var fired chan struct{}
	if t := p.late; t != nil {
		if t.armed == nil && bytes.Contains(chunk, t.arm) {
			t.armed = l
		}
		if t.armed == l && bytes.Contains(chunk, t.pattern) {
			p.late = nil
			l.lateUntil = time.Now().Add(t.d)
			fired = t.fired
		}
	}
	return time.Until(l.lateUntil), fired
}

// sprung returns the armed trap if chunk sets it off, disarming it.
func (p *Proxy) sprung(chunk []byte) *trap {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.trap == nil || !bytes.Contains(chunk, p.trap.pattern) {
		return nil
	}
	t := p.trap
	p.trap = nil
	return t
}

// link is one proxied connection: the client's and the target's side.
type link struct {
	c, up  net.Conn
	once   sync.Once
	closed chan struct{}
	mute   atomic.Bool // drop what the target answers (a trap went off)
	// lateUntil: the client's chunks reach the target no sooner (LateOn;
	// guarded by the proxy's mu)
	lateUntil time.Time
}

// SetDelay holds everything the target sends from now on for d before the
// client gets it, in order (a slow link, a broker that confirms late); what
// the client sends is not held. It does not slow the stream down: a chunk
// is held d from when it was read, not from when the one before it was
// delivered. 0 ends it.
func (p *Proxy) SetDelay(d time.Duration) { p.delay.Store(int64(d)) }

// delayed is a chunk the target sent, due to the client at due.
type delayed struct {
	b   []byte
	due time.Time
}

// deliver writes the chunks of in to dst, each held until it is due.
func (l *link) deliver(dst net.Conn, in <-chan delayed) {
	for ch := range in {
		if wait := time.Until(ch.due); wait > 0 {
			t := time.NewTimer(wait)
			select {
			case <-t.C:
			case <-l.closed:
				t.Stop()
				return
			}
		}
		if _, err := dst.Write(ch.b); err != nil {
			l.close()
			return
		}
	}
}

func (l *link) close() {
	l.once.Do(func() {
		close(l.closed)
		l.c.Close()
		l.up.Close()
	})
}

// StartProxy listens on a free 127.0.0.1 port and forwards every
// connection to target. It is closed when the test ends.
func StartProxy(t testing.TB, target string) *Proxy {
	t.Helper()
	ln := listenFree(t) // Restore listens on the same port again
	p := &Proxy{t: t, Addr: ln.Addr().String(), target: target, links: map[*link]struct{}{}}
	p.serve(ln)
	t.Cleanup(func() {
		p.Cut()
		p.wg.Wait()
	})
	return p
}

// SetTarget points new connections at another address (a replica promoted
// to primary: the endpoint moves); the connections already proxied stay on
// the old target until they end or KillConns closes them.
func (p *Proxy) SetTarget(target string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.target = target
}

// Target is the address new connections are forwarded to.
func (p *Proxy) Target() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.target
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
	p.killLocked()
}

// KillConns closes every proxied connection (both sides) and goes on
// accepting new ones. It returns how many connections it closed.
func (p *Proxy) KillConns() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.killLocked()
}

func (p *Proxy) killLocked() int {
	n := len(p.links)
	for l := range p.links {
		l.close()
		delete(p.links, l)
	}
	return n
}

// BytesDown is how many bytes the target has sent, over every connection
// since the proxy started (what a query cost the server's link).
func (p *Proxy) BytesDown() int64 { return p.down.Load() }

// Conns is the number of connections being proxied.
func (p *Proxy) Conns() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.links)
}

// Stall stops forwarding: connections stay open, new ones are accepted
// (and connected to the target), but every byte read from either side
// waits until Resume. Clients see a server that answers nothing and closes
// nothing; only their own timeouts get them out.
func (p *Proxy) Stall() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.gate == nil {
		p.gate = make(chan struct{})
	}
}

// Resume ends a Stall: what waited is forwarded, in order.
func (p *Proxy) Resume() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.gate != nil {
		close(p.gate)
		p.gate = nil
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

// pipe forwards c to the target until either side closes, Cut or
// KillConns.
func (p *Proxy) pipe(c net.Conn) {
	up, err := net.DialTimeout("tcp", p.Target(), 5*time.Second)
	if err != nil {
		c.Close()
		return
	}
	l := &link{c: c, up: up, closed: make(chan struct{})}
	p.mu.Lock()
	if p.ln == nil { // cut meanwhile
		p.mu.Unlock()
		l.close()
		return
	}
	p.links[l] = struct{}{}
	p.mu.Unlock()
	done := make(chan struct{}, 2)
	cp := func(dst, src net.Conn) {
		p.copy(l, dst, src)
		done <- struct{}{}
	}
	go cp(up, c) // client -> target: the direction traps watch
	go cp(c, up)
	<-done
	l.close()
	<-done
	p.mu.Lock()
	delete(p.links, l)
	p.mu.Unlock()
}

// copy forwards src to dst, holding every chunk while the proxy is
// stalled, until either side fails or the link is closed.
func (p *Proxy) copy(l *link, dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	var held chan delayed // what the target sends goes through deliver (SetDelay)
	if src == l.up {
		held = make(chan delayed, 4096)
		delivered := make(chan struct{})
		go func() {
			defer close(delivered)
			l.deliver(dst, held)
		}()
		// what the target sent before it closed reaches the client before
		// the link is closed (as when it was written here directly)
		defer func() {
			close(held)
			<-delivered
		}()
	}
	for {
		if !p.await(l) {
			return
		}
		n, err := src.Read(buf)
		if n > 0 && src == l.up {
			p.down.Add(int64(n))
		}
		if n > 0 {
			// A chunk read just before a Stall waits too.
			if !p.await(l) {
				return
			}
			if src == l.c {
				if wait, fired := p.lateFor(l, buf[:n]); wait > 0 {
					// held even if the client closes meanwhile: only the
					// target's side ending drops it
					time.Sleep(wait)
					_, werr := dst.Write(buf[:n])
					if fired != nil {
						close(fired)
					}
					if werr != nil || err != nil {
						return
					}
					continue
				}
				if t := p.sprung(buf[:n]); t != nil {
					if t.after {
						l.mute.Store(true)
						_, _ = dst.Write(buf[:n])
						time.Sleep(200 * time.Millisecond) // the target acts on it
					}
					l.close()
					close(t.fired)
					return
				}
			}
			if held != nil && !l.mute.Load() {
				select {
				case held <- delayed{b: bytes.Clone(buf[:n]), due: time.Now().Add(time.Duration(p.delay.Load()))}:
				case <-l.closed:
					return
				}
			} else if muted := src == l.up && l.mute.Load(); !muted {
				if _, werr := dst.Write(buf[:n]); werr != nil {
					return
				}
			}
		}
		if err != nil {
			return
		}
	}
}

// await waits while the proxy is stalled; false when the link was closed
// meanwhile.
func (p *Proxy) await(l *link) bool {
	p.mu.Lock()
	gate := p.gate
	p.mu.Unlock()
	if gate == nil {
		select {
		case <-l.closed:
			return false
		default:
			return true
		}
	}
	select {
	case <-gate:
		return p.await(l) // stalled again meanwhile?
	case <-l.closed:
		return false
	}
}
