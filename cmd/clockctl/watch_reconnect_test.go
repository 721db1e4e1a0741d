package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/clockd/clockd/internal/testenv"
)

// TestWatchOutlivesABrokerRestart: `clockctl watch` says it "Runs until
// interrupted (Ctrl-C), or until N rings with -n" and takes a list of
// broker nodes; the README's HA section puts it beside the consumers that
// reconnect. When the broker closed its connections (a restart, a node of
// the list going away) watch exited 1 instead of reconnecting, and the rings
// published after the blip were never shown.
func TestWatchOutlivesABrokerRestart(t *testing.T) {
	t.Parallel()
	url := testenv.AMQPURL(t)
	exchange := testenv.Name("clock.ring.watchreview-")
	testenv.DeleteExchangeOnCleanup(t, url, exchange)
	testenv.BindQueue(t, url, exchange, "order")
	proxy := testenv.StartProxy(t, "127.0.0.1:5672")
	viaProxy := "amqp://guest:guest@" + proxy.Addr + "/"

	stdout, stderr := &lockedBuffer{}, &lockedBuffer{}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"watch", "-app", "order", "-amqp", viaProxy, "-exchange", exchange, "-n", "2"},
			func(string) string { return "" }, stdout, stderr)
	}()
	waitFor := func(what string, ok func() bool) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for !ok() {
			if time.Now().After(deadline) {
				t.Fatalf("%s: stdout %q stderr %q", what, stdout.String(), stderr.String())
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	waitFor("watch never said it was watching", func() bool { return strings.Contains(stderr.String(), "watching rings of order") })
	publishRing(t, url, exchange, "order", "o-1", 1)
	waitFor("watch did not show the first ring", func() bool { return strings.Contains(stdout.String(), "o-1") })

	// The broker drops its connections (what a restart does to clients);
	// it is back at once.
	proxy.KillConns()
	select {
	case code := <-done:
		t.Fatalf("watch exited %d at a broker blip instead of reconnecting (help: runs until interrupted or -n rings): %s",
			code, stderr.String())
	case <-time.After(8 * time.Second):
	}
	publishRing(t, url, exchange, "order", "o-2", 1)
	select {
	case code := <-done:
		if code != 0 || !strings.Contains(stdout.String(), "o-2") {
			t.Fatalf("watch after the blip: exit %d, stdout %q, stderr %q", code, stdout.String(), stderr.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("watch did not show the ring published after the blip: stdout %q stderr %q", stdout.String(), stderr.String())
	}
}
