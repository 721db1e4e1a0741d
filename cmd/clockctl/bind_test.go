package main

import (
	"bytes"
	"context"
	"net/url"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/clockd/clockd/internal/testenv"
)

// broker opens a channel on the test RabbitMQ and deletes the given queues
// and exchanges when the test ends.
func broker(t *testing.T, amqpURL string, queues, exchanges []string) *amqp.Channel {
	t.Helper()
	conn, err := amqp.Dial(amqpURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ch, err := conn.Channel()
		if err == nil {
			for _, q := range queues {
				if _, err := ch.QueueDelete(q, false, false, false); err != nil {
					t.Logf("delete queue %s: %v", q, err)
				}
			}
			for _, x := range exchanges {
				if err := ch.ExchangeDelete(x, false, false); err != nil {
					t.Logf("delete exchange %s: %v", x, err)
				}
			}
		}
		_ = conn.Close()
	})
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	return ch
}

// ring publishes body to the exchange like clockd does (mandatory, with a
// confirm) and fails the test when no queue took it.
func ring(t *testing.T, ch *amqp.Channel, exchange, app, body string) {
	t.Helper()
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	returns := ch.NotifyReturn(make(chan amqp.Return, 1))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, exchange, app, true, false, amqp.Publishing{
		ContentType: "application/json", DeliveryMode: amqp.Persistent, Body: []byte(body),
	})
	if err != nil {
		t.Fatal(err)
	}
	ok, err := dc.WaitContext(ctx)
	if err != nil || !ok {
		t.Fatalf("publish not confirmed: %v %v", ok, err)
	}
	select {
	case r := <-returns:
		t.Fatalf("message returned: %d %s (no queue bound with key %q)", r.ReplyCode, r.ReplyText, app)
	default:
	}
}

// receive waits for one message on the queue.
func receive(t *testing.T, ch *amqp.Channel, queue string) amqp.Delivery {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		d, ok, err := ch.Get(queue, true)
		if err != nil {
			t.Fatalf("get from %s: %v", queue, err)
		}
		if ok {
			return d
		}
		if time.Now().After(deadline) {
			t.Fatalf("no message in queue %s", queue)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func runBind(getenv func(string) string, args ...string) result {
	var stdout, stderr bytes.Buffer
	code := run(context.Background(), append([]string{"bind"}, args...), getenv, &stdout, &stderr)
	return result{code: code, stdout: stdout.String(), stderr: stderr.String()}
}

func TestBindClassicQueue(t *testing.T) {
	amqpURL := testenv.AMQPURL(t)
	exchange := testenv.Name("clockctl_ring_")
	app := testenv.Name("app_")
	ch := broker(t, amqpURL, []string{app}, []string{exchange})

	// URL and exchange from the environment; the queue is named after the app.
	getenv := env("CLOCKD_AMQP_URL", amqpURL, "CLOCKD_EXCHANGE", exchange, "CLOCKD_ADDR", "http://127.0.0.1:1")
	for i := range 2 { // the second run must change nothing and succeed
		r := runBind(getenv, "-app", app)
		if r.code != 0 || r.stderr != "" {
			t.Fatalf("run %d: %v", i, r)
		}
		for _, want := range []string{
			`exchange "` + exchange + `": declared (direct, durable)`,
			`queue "` + app + `": declared (durable, classic)`,
			`queue "` + app + `": bound to exchange "` + exchange + `" with binding key "` + app + `"`,
		} {
			if !strings.Contains(r.stdout, want) {
				t.Fatalf("run %d: %q not in\n%v", i, want, r)
			}
		}
		if strings.Contains(r.stdout, "guest:guest") {
			t.Fatalf("password printed:\n%v", r)
		}
	}

	// The exchange is the one clockd declares: redeclaring it the same way works.
	if err := ch.ExchangeDeclare(exchange, "direct", true, false, false, false, nil); err != nil {
		t.Fatalf("exchange declared differently from clockd: %v", err)
	}
	ring(t, ch, exchange, app, `{"order":123}`)
	if d := receive(t, ch, app); string(d.Body) != `{"order":123}` || d.RoutingKey != app {
		t.Fatalf("got %q with key %q", d.Body, d.RoutingKey)
	}
}

func TestBindQuorumQueue(t *testing.T) {
	amqpURL := testenv.AMQPURL(t)
	exchange := testenv.Name("clockctl_ring_")
	app := testenv.Name("app_")
	queue := testenv.Name("clockctl_q_")
	ch := broker(t, amqpURL, []string{queue}, []string{exchange})

	r := runBind(env(), "-app", app, "-queue", queue, "-amqp", amqpURL, "-exchange", exchange, "-quorum")
	if r.code != 0 || !strings.Contains(r.stdout, `queue "`+queue+`": declared (durable, quorum)`) {
		t.Fatalf("bind: %v", r)
	}
	q, err := ch.QueueDeclarePassive(queue, true, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	ring(t, ch, exchange, app, "hello")
	if d := receive(t, ch, q.Name); string(d.Body) != "hello" {
		t.Fatalf("got %q", d.Body)
	}

	// Asking for a classic queue where a quorum one exists is refused by the
	// broker, and said so.
	r = runBind(env(), "-app", app, "-queue", queue, "-amqp", amqpURL, "-exchange", exchange)
	if r.code != 1 || !strings.Contains(r.stderr, "exists with other arguments") ||
		!strings.Contains(r.stderr, "PRECONDITION_FAILED") {
		t.Fatalf("type mismatch: %v", r)
	}
}

func TestBindUnreachableBroker(t *testing.T) {
	r := runBind(env(), "-app", "a", "-amqp", "amqp://user:secret@127.0.0.1:1/")
	if r.code != 1 || !strings.Contains(r.stderr, "connect to amqp://user:xxxxx@127.0.0.1:1/") ||
		strings.Contains(r.stderr, "secret") {
		t.Fatalf("unreachable: %v", r)
	}
	// Every node of a list is tried, and named without its password.
	r = runBind(env("CLOCKD_AMQP_URL", "amqp://user:secret1@127.0.0.1:1/, amqp://user:secret2@127.0.0.1:2/"), "-app", "a")
	if r.code != 1 || !strings.Contains(r.stderr, "connect to amqp://user:xxxxx@127.0.0.1:1/") ||
		!strings.Contains(r.stderr, "connect to amqp://user:xxxxx@127.0.0.1:2/") || strings.Contains(r.stderr, "secret") {
		t.Fatalf("two unreachable nodes: %v", r)
	}
}

// bind takes the list CLOCKD_AMQP_URL takes (the nodes of a cluster,
// separated by commas), from -amqp or the environment, and declares on the
// first node that answers.
func TestBindBrokerList(t *testing.T) {
	amqpURL := testenv.AMQPURL(t)
	exchange := testenv.Name("clockctl_ring_")
	app := testenv.Name("app_")
	ch := broker(t, amqpURL, []string{app}, []string{exchange})
	down := "amqp://guest:downsecret@127.0.0.1:1/"
	for _, tt := range []struct {
		name   string
		getenv func(string) string
		args   []string
	}{
		{"-amqp, first node down", env(), []string{"-amqp", down + "," + amqpURL}},
		{"CLOCKD_AMQP_URL, second node down", env("CLOCKD_AMQP_URL", amqpURL+","+down), nil},
	} {
		r := runBind(tt.getenv, append([]string{"-app", app, "-exchange", exchange}, tt.args...)...)
		if r.code != 0 || !strings.Contains(r.stdout, `queue "`+app+`": bound to exchange "`+exchange+`"`) {
			t.Fatalf("%s: %v", tt.name, r)
		}
		if strings.Contains(r.stdout+r.stderr, "downsecret") || strings.Contains(r.stdout+r.stderr, passwordOf(t, amqpURL)+"@") {
			t.Fatalf("%s: password printed:\n%v", tt.name, r)
		}
	}
	ring(t, ch, exchange, app, "via the list")
	if d := receive(t, ch, app); string(d.Body) != "via the list" {
		t.Fatalf("got %q", d.Body)
	}
}

// passwordOf is the password of an AMQP URL, with the colon before it.
func passwordOf(t *testing.T, raw string) string {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	pw, _ := u.User.Password()
	return ":" + pw
}

// A URL of the list that cannot be parsed is a usage error naming the
// element; neither its password nor another's is shown (amqp's parse
// errors quote the whole URL).
func TestBrokerListWithABadURL(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		args []string
		env  func(string) string
		want string
	}{
		{[]string{"bind", "-app", "a", "-amqp", "amqp://u:secretA@127.0.0.1:1/,amqp://u:secretB@host:port/"}, env(), "-amqp element 2 of 2 (not a valid URL)"},
		{[]string{"bind", "-app", "a", "-amqp", "amqp://u:secretC@host:port/"}, env(), "-amqp (not a valid URL)"},
		{[]string{"bind", "-app", "a"}, env("CLOCKD_AMQP_URL", "http://u:secretD@n1:5672/,amqp://u:secretE@n2/"), "CLOCKD_AMQP_URL element 1 of 2 (http://u:xxxxx@n1:5672/)"},
		{[]string{"bind", "-app", "a", "-amqp", " , "}, env(), "-amqp names no broker URL"},
		{[]string{"watch", "-app", "a", "-amqp", "amqp://u:secretA@127.0.0.1:1/,amqp://u:secretB@host:port/"}, env(), "-amqp element 2 of 2 (not a valid URL)"},
	} {
		var stdout, stderr bytes.Buffer
		code := run(context.Background(), tt.args, tt.env, &stdout, &stderr)
		if code != exitUsage || !strings.Contains(stderr.String(), tt.want) || strings.Contains(stderr.String(), "secret") {
			t.Errorf("%v: exit %d, stderr %s; want exit %d saying %q, no password", tt.args, code, stderr.String(), exitUsage, tt.want)
		}
	}
}
