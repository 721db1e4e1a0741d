package main

// /readyz is open to anyone; when RabbitMQ refuses clockd's account its
// reason names the account ("access to vhost '...' refused for user
// '...'"), and /readyz repeated it word for word.

import (
	"context"
	"net/http"
	"os/exec"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/clockd/clockd/internal/testenv"
)

func reviewRabbitmqctl(t *testing.T, args ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if out, err := exec.CommandContext(ctx, "rabbitmqctl", args...).CombinedOutput(); err != nil {
		t.Fatalf("rabbitmqctl %v: %v\n%s", args, err, out)
	}
}

func TestReadyzHidesBrokerAccount(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	vhostURL := testenv.Vhost(t) // a vhost of this test only
	uri, err := amqp.ParseURI(vhostURL)
	if err != nil {
		t.Fatal(err)
	}
	user := testenv.Name("rvu-")
	reviewRabbitmqctl(t, "add_user", user, "broker-secret")
	t.Cleanup(func() { _ = exec.Command("rabbitmqctl", "delete_user", user).Run() })
	reviewRabbitmqctl(t, "set_permissions", "-p", uri.Vhost, user, ".*", ".*", ".*")
	uri.Username, uri.Password = user, "broker-secret"
	e.AMQP = uri.String()

	d := testenv.StartClockd(t, e.vars(nil))
	reviewRabbitmqctl(t, "clear_permissions", "-p", uri.Vhost, user)
	testenv.CloseConnections(t, vhostURL)

	var code int
	var body string
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		if code, body = d.Ready(); code == http.StatusServiceUnavailable && strings.Contains(body, "rabbitmq: not connected") &&
			!strings.Contains(body, "connection closed") {
			break // the reason of a failed reconnect, not of the closed connection
		}
	}
	if code != http.StatusServiceUnavailable {
		t.Fatalf("/readyz with the broker refusing the vhost: %d %s, want 503", code, body)
	}
	if strings.Contains(body, user) {
		t.Errorf("/readyz (open to anyone) names the broker account: %s", body)
	}
}
