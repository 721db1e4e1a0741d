// Package examples_test builds the example programs and runs each of them
// against a real clockd, MySQL and RabbitMQ; and checks that the consumer
// the README shows is the one in amqpconsumer.
package examples_test

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/clockd/clockd/client"
	"github.com/clockd/clockd/client/consume"
	"github.com/clockd/clockd/internal/testenv"
)

var (
	buildOnce sync.Once
	binDir    string
	buildErr  error
)

// build vets and builds every example once; it returns their directory.
func build(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "clockd-examples-")
		if err != nil {
			buildErr = err
			return
		}
		binDir = dir
		for _, args := range [][]string{{"vet", "./..."}, {"build", "-o", dir + string(filepath.Separator), "./..."}} {
			cmd := exec.Command("go", args...)
			if out, err := cmd.CombinedOutput(); err != nil {
				buildErr = &buildError{args: args, out: string(out), err: err}
				return
			}
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binDir
}

type buildError struct {
	args []string
	out  string
	err  error
}

func (e *buildError) Error() string {
	return "go " + strings.Join(e.args, " ") + ": " + e.err.Error() + "\n" + e.out
}

func TestExamplesBuild(t *testing.T) {
	t.Parallel()
	dir := build(t)
	for _, name := range []string{"setandconsume", "batchcreate", "dedupconsumer", "amqpconsumer"} {
		if _, err := os.Stat(filepath.Join(dir, name)); err != nil {
			t.Errorf("example %s not built: %v", name, err)
		}
	}
}

// runExample runs a built example with env and returns its output; it
// fails the test when the example fails.
func runExample(t *testing.T, env []string, name string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(build(t), name), args...)
	cmd.Env = append(os.Environ(), env...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out.String())
	}
	return out.String()
}

// deleteQueues removes an application's queues when the test ends.
func deleteQueues(t *testing.T, url string, names ...string) {
	t.Cleanup(func() {
		conn, err := amqp.Dial(url)
		if err != nil {
			return
		}
		defer conn.Close()
		ch, err := conn.Channel()
		if err != nil {
			return
		}
		for _, n := range names {
			_, _ = ch.QueueDelete(n, false, false, false)
		}
	})
}

// ringLine is a line of dedupconsumer for one ring it handled.
var ringLine = regexp.MustCompile(`(?m)^ring \d+: `)

// TestExamplesEndToEnd runs every example against one real clockd:
// setandconsume sets a clock and receives its ring; batchcreate sets five
// that dedupconsumer receives; amqpconsumer receives two rings.
func TestExamplesEndToEnd(t *testing.T) {
	t.Parallel()
	build(t)
	amqpURL := testenv.AMQPURL(t)
	exchange := testenv.Name("clock.ring.test-")
	testenv.DeleteExchangeOnCleanup(t, amqpURL, exchange)
	d := testenv.StartClockd(t, map[string]string{
		"CLOCKD_MYSQL_DSN": testenv.MySQLDSN(t), "CLOCKD_AMQP_URL": amqpURL, "CLOCKD_EXCHANGE": exchange,
		"CLOCKD_SHARDS": "4", "CLOCKD_LOG_LEVEL": "warn",
	})
	env := []string{"CLOCKD_ADDR=" + d.URL, "CLOCKD_AMQP_URL=" + amqpURL, "CLOCKD_EXCHANGE=" + exchange, "CLOCKD_TOKEN="}

	app1 := testenv.Name("ex-")
	deleteQueues(t, amqpURL, app1)
	out := runExample(t, env, "setandconsume", "-app", app1, "-in", "1s")
	if !strings.Contains(out, "set to ring at") || !strings.Contains(out, "rang: clock") || !strings.Contains(out, `{"hello":"clockd"}`) {
		t.Errorf("setandconsume:\n%s", out)
	}

	app2 := testenv.Name("ex-")
	deleteQueues(t, amqpURL, app2, app2+".retry", app2+".dead")
	// The consumer binds its queue; start it first so that no ring is
	// returned unroutable.
	done := make(chan string, 1)
	go func() {
		cmd := exec.Command(filepath.Join(build(t), "dedupconsumer"), "-app", app2, "-max", "5")
		cmd.Env = append(os.Environ(), env...)
		b, err := cmd.CombinedOutput()
		if err != nil {
			b = append(b, []byte("\nexit: "+err.Error())...)
		}
		done <- string(b)
	}()
	waitQueue(t, amqpURL, app2)
	out = runExample(t, env, "batchcreate", "-app", app2, "-n", "5", "-in", "1s")
	if !strings.Contains(out, "5 clocks: 5 created, 0 existed already, 0 conflicts, 0 refused") {
		t.Errorf("batchcreate:\n%s", out)
	}
	select {
	case out = <-done:
		if n := len(ringLine.FindAllString(out, -1)); n != 5 || strings.Contains(out, "exit:") || strings.Contains(out, "ack failed") {
			t.Errorf("dedupconsumer:\n%s", out)
		}
	case <-time.After(2 * time.Minute):
		t.Fatal("dedupconsumer did not receive 5 rings within 2 minutes")
	}

	app3 := testenv.Name("ex-")
	deleteQueues(t, amqpURL, app3)
	c, err := client.New(d.URL)
	if err != nil {
		t.Fatal(err)
	}
	// Bound first by the consume package's declaration (clockctl bind's):
	// the plain consumer redeclares the same queue without a conflict.
	ctx := context.Background()
	if _, err := consume.Bind(ctx, amqpURL, consume.Queue{Application: app3, Exchange: exchange}); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"p-1", "p-2"} {
		if _, _, err := c.Create(ctx, client.NewClock{Application: app3, BusinessID: id, Payload: id}); err != nil {
			t.Fatal(err)
		}
	}
	out = runExample(t, env, "amqpconsumer", "-app", app3, "-max", "2")
	if !strings.Contains(out, " p-1 p-1") || !strings.Contains(out, " p-2 p-2") {
		t.Errorf("amqpconsumer:\n%s", out)
	}
}

// waitQueue waits until a queue exists (passive declare succeeds).
func waitQueue(t *testing.T, url, name string) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		conn, err := amqp.Dial(url)
		if err != nil {
			t.Fatal(err)
		}
		ch, err := conn.Channel()
		if err == nil {
			_, err = ch.QueueDeclarePassive(name, true, false, false, false, nil)
		}
		conn.Close()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("queue %s not declared within a minute: %v", name, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestREADMEConsumerIsTheExample: the consumer snippet in the README is
// the code of examples/amqpconsumer between its README markers.
func TestREADMEConsumerIsTheExample(t *testing.T) {
	t.Parallel()
	src, err := os.ReadFile("amqpconsumer/main.go")
	if err != nil {
		t.Fatal(err)
	}
	s := string(src)
	begin, end := strings.Index(s, "// README:begin\n"), strings.Index(s, "\t// README:end")
	if begin < 0 || end < begin {
		t.Fatal("README markers missing in examples/amqpconsumer/main.go")
	}
	var snippet strings.Builder
	for line := range strings.Lines(s[begin+len("// README:begin\n") : end]) {
		snippet.WriteString(strings.TrimPrefix(line, "\t"))
	}
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(readme), "```go\n"+snippet.String()+"```\n") {
		t.Errorf("README.md does not show examples/amqpconsumer's consumer as it is; it should hold:\n```go\n%s```", snippet.String())
	}
}
