package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/clockd/clockd/internal/testenv"
)

// lockedBuffer is a bytes.Buffer written by watch and read by the test.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// publishRing publishes a message shaped as clockd's rings.
func publishRing(t *testing.T, url, exchange, app, id string, attempt int32) {
	t.Helper()
	ringAt := time.Now().Add(-5 * time.Millisecond).UTC()
	testenv.WithChannel(t, url, func(ch *amqp.Channel) {
		if err := ch.PublishWithContext(context.Background(), exchange, app, true, false, amqp.Publishing{
			ContentType: "application/json", MessageId: "77", Body: []byte(`{"order":` + id + `}`),
			Headers: amqp.Table{"x-clock-application": app, "x-clock-business-id": id,
				"x-clock-ring-at": ringAt.Format("2006-01-02T15:04:05.000Z07:00"), "x-clock-attempt": attempt},
		}); err != nil {
			t.Fatal(err)
		}
	})
}

// watch prints the rings of the application from a queue of its own: the
// application's own queue still gets every message.
func TestWatchTailsWithoutTakingTheApplicationsMessages(t *testing.T) {
	t.Parallel()
	url := testenv.AMQPURL(t)
	exchange := testenv.Name("clock.ring.watch-")
	testenv.DeleteExchangeOnCleanup(t, url, exchange)
	own := testenv.BindQueue(t, url, exchange, "order")

	for _, asJSON := range []bool{false, true} {
		stdout, stderr := &lockedBuffer{}, &lockedBuffer{}
		args := []string{"watch", "-app", "order", "-amqp", url, "-exchange", exchange, "-n", "1"}
		if asJSON {
			args = append(args, "-json")
		}
		done := make(chan int, 1)
		go func() { done <- run(context.Background(), args, func(string) string { return "" }, stdout, stderr) }()
		deadline := time.Now().Add(20 * time.Second)
		for !strings.Contains(stderr.String(), "watching rings of order") {
			if time.Now().After(deadline) {
				t.Fatalf("watch never said it was watching: %q", stderr.String())
			}
			time.Sleep(20 * time.Millisecond)
		}
		publishRing(t, url, exchange, "order", "o-9", 2)
		select {
		case code := <-done:
			if code != 0 {
				t.Fatalf("watch exited %d: %s", code, stderr.String())
			}
		case <-time.After(20 * time.Second):
			t.Fatal("watch -n 1 did not stop after a ring")
		}
		out := stdout.String()
		if asJSON {
			var r struct {
				BusinessID string  `json:"business_id"`
				Attempt    int     `json:"attempt"`
				MessageID  string  `json:"message_id"`
				LatenessMS float64 `json:"lateness_ms"`
			}
			if err := json.Unmarshal([]byte(strings.TrimSpace(out)), &r); err != nil {
				t.Fatalf("-json line %q: %v", out, err)
			}
			if r.BusinessID != "o-9" || r.Attempt != 2 || r.MessageID != "77" || r.LatenessMS < 5 {
				t.Errorf("-json ring %+v", r)
			}
		} else if !strings.Contains(out, "o-9") || !strings.Contains(out, "attempt=2") || !strings.Contains(out, "lateness=") {
			t.Errorf("watch printed %q", out)
		}
	}

	// The application's queue got both messages.
	conn, err := amqp.Dial(url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	q, err := ch.QueueDeclarePassive(own, true, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	if q.Messages != 2 {
		t.Errorf("the application's own queue holds %d messages, want 2 (watch must not take them)", q.Messages)
	}
}

func TestWatchUsage(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{"watch"}, {"watch", "-app", "a b"}, {"watch", "-app", "x", "extra"}, {"watch", "-app", "x", "-n", "-1"}} {
		var stdout, stderr bytes.Buffer
		if code := run(context.Background(), args, func(string) string { return "" }, &stdout, &stderr); code != exitUsage {
			t.Errorf("%v: exit %d, want %d (%s)", args, code, exitUsage, stderr.String())
		}
	}
}
