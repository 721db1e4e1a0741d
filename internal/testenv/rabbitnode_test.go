package testenv

import (
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// TestRabbitNodeStopStartKeepsDurableMessages proves the private node is
// a real broker that a test may stop and start: a persistent message in a
// durable queue survives stop_app/start_app.
func TestRabbitNodeStopStartKeepsDurableMessages(t *testing.T) {
	t.Parallel()
	n := StartRabbitNode(t)
	publish := func() {
		conn, err := amqp.Dial(n.URL())
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		ch, err := conn.Channel()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := ch.QueueDeclare("q", true, false, false, false, nil); err != nil {
			t.Fatal(err)
		}
		if err := ch.Confirm(false); err != nil {
			t.Fatal(err)
		}
		dc, err := ch.PublishWithDeferredConfirm("", "q", true, false, amqp.Publishing{DeliveryMode: amqp.Persistent, Body: []byte("kept")})
		if err != nil {
			t.Fatal(err)
		}
		if !dc.Wait() {
			t.Fatal("publish not confirmed")
		}
	}
	publish()
	conn, err := amqp.Dial(n.URL())
	if err != nil {
		t.Fatal(err)
	}
	closed := conn.NotifyClose(make(chan *amqp.Error, 1))
	n.StopApp()
	select {
	case <-closed:
	case <-time.After(30 * time.Second):
		t.Fatal("connection not closed by stop_app")
	}
	if c, err := amqp.Dial(n.URL()); err == nil {
		c.Close()
		t.Fatal("dial succeeded while the app is stopped")
	}
	n.StartApp()
	conn, err = amqp.Dial(n.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	m, ok, err := ch.Get("q", true)
	if err != nil || !ok || string(m.Body) != "kept" {
		t.Fatalf("after restart: %q %v %v", m.Body, ok, err)
	}
}
