package console_test

import (
	"bufio"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/clockd/clockd/internal/auth"
	"github.com/clockd/clockd/internal/console"
	"github.com/clockd/clockd/internal/testenv"
)

// revocable accepts one admin secret until it is revoked.
type revocable struct {
	secret  string
	revoked atomic.Bool
}

func (a *revocable) Authenticate(_ context.Context, header string) (auth.Principal, error) {
	if header == "Bearer "+a.secret && !a.revoked.Load() {
		return auth.Principal{Admin: true}, nil
	}
	return auth.Principal{}, auth.ErrUnauthenticated
}

func (a *revocable) AuthenticateHash(ctx context.Context, hash [32]byte) (auth.Principal, error) {
	if hash == sha256.Sum256([]byte(a.secret)) {
		return a.Authenticate(ctx, "Bearer "+a.secret)
	}
	return auth.Principal{}, auth.ErrUnauthenticated
}

// tailServer is an in-process console (no store: the tail needs none) on
// the real RabbitMQ, with an exchange of its own.
func tailServer(t *testing.T, a console.Authenticator) (*console.Console, *httptest.Server, string, string) {
	t.Helper()
	url := testenv.AMQPURL(t)
	exchange := testenv.Name("clock.ring.review-")
	testenv.DeleteExchangeOnCleanup(t, url, exchange)
	con, err := console.New(console.Options{Auth: a, AMQPURL: url, Exchange: exchange, InstanceID: "review", Logger: testenv.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(con)
	return con, srv, url, exchange
}

// openTail sends GET /ui/tail/events?app= on a raw connection (with a
// small receive buffer when small is set) and reads the stream up to the
// "ready" event; it returns the connection, its reader and the queue name.
func openTail(t *testing.T, addr, app, cookie string, small bool) (net.Conn, *bufio.Reader, string) {
	t.Helper()
	d := net.Dialer{}
	if small {
		d.Control = func(_, _ string, c syscall.RawConn) error {
			var serr error
			err := c.Control(func(fd uintptr) { serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096) })
			if err != nil {
				return err
			}
			return serr
		}
	}
	conn, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	req := "GET /ui/tail/events?app=" + app + " HTTP/1.1\r\nHost: " + addr + "\r\nAccept: text/event-stream\r\n"
	if cookie != "" {
		req += "Cookie: " + cookie + "\r\n"
	}
	if _, err := conn.Write([]byte(req + "\r\n")); err != nil {
		t.Fatal(err)
	}
	_ = conn.SetReadDeadline(time.Now().Add(20 * time.Second))
	br := bufio.NewReader(conn)
	status, err := br.ReadString('\n')
	if err != nil || !strings.Contains(status, " 200 ") {
		t.Fatalf("tail answer: %q %v", status, err)
	}
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatalf("tail stream before ready: %v", err)
		}
		if strings.HasPrefix(line, "data: ") && strings.Contains(line, `"queue"`) {
			rest := line[strings.Index(line, `"queue":"`)+len(`"queue":"`):]
			return conn, br, rest[:strings.IndexByte(rest, '"')]
		}
	}
}

func publish(t *testing.T, url, exchange, app string, n int, body []byte) {
	t.Helper()
	testenv.WithChannel(t, url, func(ch *amqp.Channel) {
		for i := range n {
			if err := ch.PublishWithContext(context.Background(), exchange, app, false, false, amqp.Publishing{
				MessageId: fmt.Sprint(i + 1), ContentType: "text/plain", Body: body,
				Headers: amqp.Table{"x-clock-application": app, "x-clock-business-id": fmt.Sprint("b-", i), "x-clock-attempt": int32(1),
					"x-clock-ring-at": time.Now().UTC().Format(time.RFC3339Nano)},
			}); err != nil {
				t.Fatal(err)
			}
		}
	})
}

// queueExists asks the broker whether the named queue is still declared.
func queueExists(t *testing.T, url, q string) (exists bool) {
	t.Helper()
	testenv.WithChannel(t, url, func(ch *amqp.Channel) {
		// The queue is exclusive to the tail's connection: another
		// connection's passive declare answers RESOURCE_LOCKED while it
		// exists, NOT_FOUND once it is gone.
		_, err := ch.QueueDeclarePassive(q, false, true, true, false, nil)
		var ae *amqp.Error
		if errors.As(err, &ae) && ae.Code == amqp.NotFound {
			return
		}
		if err != nil && !(errors.As(err, &ae) && ae.Code == amqp.ResourceLocked) {
			t.Fatalf("passive declare of %s: %v", q, err)
		}
		exists = true
	})
	return exists
}

// A client that keeps the tail's connection open but stops reading (a
// frozen tab, a stalled proxy) fills the socket buffers. Each write of the
// stream has a deadline, so the tail ends, and Console.Close (shutdown)
// is not held up; the tail's AMQP connection and queue go with it.
func TestTailOfAClientThatStopsReadingEnds(t *testing.T) {
	con, srv, url, exchange := tailServer(t, nil)
	conn, _, queue := openTail(t, srv.Listener.Addr().String(), "greedy", "", true)
	t.Cleanup(func() { conn.Close(); con.Close(); srv.Close() })
	// Each ring's event carries 512 '<' (6 bytes each in JSON: \u003c):
	// some 3 KiB per event; 40 a time (the tail drops what its writer
	// cannot take at once), ~25 MiB in all: more than the socket buffers.
	for range 200 {
		publish(t, url, exchange, "greedy", 40, []byte(strings.Repeat("<", 512)))
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(2 * time.Second) // the writer has filled the buffers and blocks
	con.Close()                 // what clockd's shutdown does
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) {
		if !queueExists(t, url, queue) {
			return
		}
		time.Sleep(500 * time.Millisecond)
	}
	t.Fatalf("15 s after Console.Close the tail of a client that stopped reading still holds its AMQP connection and queue %s bound to %s", queue, exchange)
}

// An open tail checks its session again at each keep-alive: after the
// operator's admin token is revoked (or the operator logs out), it ends
// instead of streaming the application's rings, payloads included.
func TestTailEndsWhenItsTokenIsRevoked(t *testing.T) {
	a := &revocable{secret: auth.SecretPrefix + strings.Repeat("x", 43)}
	t.Cleanup(console.SetTailTimings(time.Second))
	con, srv, url, exchange := tailServer(t, a)
	ck := login(t, srv.URL, a.secret)
	cookie := ck.Name + "=" + ck.Value
	conn, br, _ := openTail(t, srv.Listener.Addr().String(), "secret-app", cookie, false)
	t.Cleanup(func() { conn.Close(); con.Close(); srv.Close() })

	a.revoked.Store(true)
	// Other requests with the cookie are refused at once.
	req, _ := http.NewRequest("GET", srv.URL+"/ui/tail/events?app=secret-app", nil)
	req.Header.Set("Cookie", cookie)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("a new tail with the revoked token: %d, want 401", resp.StatusCode)
	}
	// Give the open tail a keep-alive period (1 s here) to notice, then ring.
	time.Sleep(2500 * time.Millisecond)
	publish(t, url, exchange, "secret-app", 1, []byte(`{"card":"4111 1111 1111 1111"}`))
	_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			return // the stream ended or stayed silent: fine
		}
		if strings.HasPrefix(line, "event: ring") {
			next, _ := br.ReadString('\n')
			t.Fatalf("2.5 s after the session's token was revoked, its open tail still streams rings: %s", strings.TrimSpace(next))
		}
	}
}
