package rabbit

import (
	"errors"
	"io"
	"net"
	"os"
	"sync/atomic"
	"testing"
	"time"
)

// A write to a broker that blocked the connection (a resource alarm: it
// reads nothing until the alarm clears) waits past the write deadline for
// it to read again, whole; it had failed at the deadline, and the
// connection was cut: every message in flight cost an attempt, and so did
// the next connection's, every 5 s, until the clocks were dead (found by
// review). Not blocked, a write that cannot go on fails at the deadline
// (a dead peer); closed under it, or with the broker silent (no
// heartbeat) for long, a held write ends too.
func TestSocketWriteWaitsForABlockingBroker(t *testing.T) {
	t.Parallel()
	payload := make([]byte, 256<<10)

	for _, tc := range []struct {
		name   string
		held   bool
		reader func(peer, mine net.Conn, stopping *atomic.Bool) // what the broker's side (or a SIGTERM) does
		want   func(n int, err error, took time.Duration) string
	}{
		{"not blocked: the deadline", false, func(net.Conn, net.Conn, *atomic.Bool) {}, func(n int, err error, took time.Duration) string {
			if !errors.Is(err, os.ErrDeadlineExceeded) || n == len(payload) || took > 2*time.Second {
				return "want a deadline error before the whole payload"
			}
			return ""
		}},
		{"blocked: waits for the broker", true, func(peer, _ net.Conn, _ *atomic.Bool) {
			// the broker's heartbeats come while it blocks; then the
			// alarm clears
			for range 4 {
				time.Sleep(100 * time.Millisecond)
				_, _ = peer.Write([]byte{8})
			}
			_, _ = io.Copy(io.Discard, peer)
		}, func(n int, err error, took time.Duration) string {
			if err != nil || n != len(payload) || took < 400*time.Millisecond {
				return "want the whole payload written once the broker reads again"
			}
			return ""
		}},
		{"blocked, then silent: ends", true, func(net.Conn, net.Conn, *atomic.Bool) {}, func(n int, err error, took time.Duration) string {
			if err == nil || took < 300*time.Millisecond || took > 2*time.Second {
				return "want an error once the broker sent nothing for the silence bound (300 ms here)"
			}
			return ""
		}},
		{"blocked, then the process stops: ends", true, func(_, _ net.Conn, stopping *atomic.Bool) {
			time.Sleep(300 * time.Millisecond)
			stopping.Store(true) // Publisher.Stopping: SIGTERM
		}, func(n int, err error, took time.Duration) string {
			if err == nil || took < 300*time.Millisecond || took > 2*time.Second {
				return "want an error soon after the publisher is told the process stops"
			}
			return ""
		}},
		{"blocked, then closed: ends", true, func(_, mine net.Conn, _ *atomic.Bool) {
			time.Sleep(300 * time.Millisecond)
			_ = mine.Close() // teardown
		}, func(n int, err error, took time.Duration) string {
			if err == nil || took > 2*time.Second {
				return "want an error once the socket is closed"
			}
			return ""
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			mine, peer := net.Pipe()
			defer peer.Close()
			stopping := new(atomic.Bool)
			c := &sockConn{Conn: mine, timeout: 50 * time.Millisecond, silence: 300 * time.Millisecond, stopping: stopping}
			c.hold(tc.held)
			go tc.reader(peer, mine, stopping)
			go func() { // amqp091's reader
				b := make([]byte, 16)
				for {
					if _, err := c.Read(b); err != nil {
						return
					}
				}
			}()
			start := time.Now()
			n, err := c.Write(payload)
			took := time.Since(start)
			if msg := tc.want(n, err, took); msg != "" {
				t.Errorf("wrote %d of %d bytes in %v, err %v: %s", n, len(payload), took.Round(time.Millisecond), err, msg)
			}
		})
	}
}
