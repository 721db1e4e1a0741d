package examples_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/clockd/clockd/client/consume"
	"github.com/clockd/clockd/internal/testenv"
)

// TestAmqpconsumerTakesTheURLListOfCLOCKD_AMQP_URL: the examples read
// CLOCKD_AMQP_URL, whose documented form (SPEC, "Configuration") is one URL
// or several separated by commas, as the other examples take it.
// amqpconsumer, given such a list, consumes from the first node that
// answers (here a node that refuses connections, then the broker), and
// never prints the broker password, not even when no node answers.
func TestAmqpconsumerTakesTheURLListOfCLOCKD_AMQP_URL(t *testing.T) {
	t.Parallel()
	dir := build(t)
	amqpURL := testenv.AMQPURL(t)
	exchange := testenv.Name("clock.ring.test-")
	testenv.DeleteExchangeOnCleanup(t, amqpURL, exchange)
	app := testenv.Name("ex-")
	deleteQueues(t, amqpURL, app)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	q := consume.Queue{Application: app, Exchange: exchange}
	if _, err := consume.Bind(ctx, amqpURL, q); err != nil {
		t.Fatal(err)
	}
	publish := func(businessID string) {
		testenv.WithChannel(t, amqpURL, func(ch *amqp.Channel) {
			if err := ch.PublishWithContext(ctx, exchange, app, true, false, amqp.Publishing{MessageId: businessID, Body: []byte("p"),
				Headers: amqp.Table{"x-clock-business-id": businessID}}); err != nil {
				t.Fatal(err)
			}
		})
	}
	run := func(list string) (string, error) {
		cmd := exec.CommandContext(ctx, filepath.Join(dir, "amqpconsumer"), "-app", app, "-max", "1")
		cmd.Env = append(os.Environ(), "CLOCKD_AMQP_URL="+list, "CLOCKD_EXCHANGE="+exchange)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	refused := "amqp://guest:secret-pw@" + testenv.FreeAddr(t) + "/"
	for i, list := range []string{amqpURL + "," + amqpURL, refused + ", " + amqpURL} {
		id := "b-" + string(rune('1'+i))
		publish(id)
		out, err := run(list)
		if err != nil || !strings.Contains(out, id) {
			t.Errorf("amqpconsumer with CLOCKD_AMQP_URL=%s: %v\n%s", list, err, out)
		}
		if strings.Contains(out, "guest:guest@") || strings.Contains(out, "secret-pw") {
			t.Errorf("amqpconsumer printed a broker URL with its password:\n%s", out)
		}
	}
	out, err := run(refused + "," + refused)
	if err == nil || !strings.Contains(out, "broker 2 of 2") || strings.Contains(out, "secret-pw") {
		t.Errorf("amqpconsumer with no node answering: %v, want a failure naming the nodes by place, without the password:\n%s", err, out)
	}
}
