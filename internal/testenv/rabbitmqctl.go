package testenv

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// rabbitmqctl runs the broker's CLI: the command in CLOCKD_TEST_RABBITMQCTL
// (split on spaces, e.g. "docker compose exec -T rabbitmq rabbitmqctl"),
// else rabbitmqctl from PATH, and returns what it printed.
func rabbitmqctl(t testing.TB, args ...string) string {
	t.Helper()
	cmd := []string{"rabbitmqctl"}
	if v := os.Getenv("CLOCKD_TEST_RABBITMQCTL"); v != "" {
		cmd = strings.Fields(v)
	}
	if _, err := exec.LookPath(cmd[0]); err != nil {
		unavailable(t, "rabbitmqctl", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, cmd[0], append(cmd[1:], args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", strings.Join(cmd, " "), strings.Join(args, " "), err, out)
	}
	return string(out)
}

// Vhost creates a virtual host of its own on the test RabbitMQ, gives the
// URL's user every permission on it, deletes it when the test ends, and
// returns the URL that selects it. What a test does to its vhost's
// connections (CloseConnections) touches no other test or session.
func Vhost(t testing.TB) string {
	t.Helper()
	base := AMQPURL(t)
	uri, err := amqp.ParseURI(base)
	if err != nil {
		t.Fatalf("CLOCKD_TEST_AMQP_URL: %v", err)
	}
	name := Name("clockd-test-")
	rabbitmqctl(t, "add_vhost", name)
	t.Cleanup(func() { rabbitmqctl(t, "delete_vhost", name) })
	rabbitmqctl(t, "set_permissions", "-p", name, uri.Username, ".*", ".*", ".*")
	uri.Vhost = name
	return uri.String()
}

// CloseConnections forcibly closes every client connection of a vhost
// made by Vhost (rabbitmqctl close_all_connections --vhost).
func CloseConnections(t testing.TB, url string) {
	t.Helper()
	uri, err := amqp.ParseURI(url)
	if err != nil {
		t.Fatal(err)
	}
	if uri.Vhost == "" || uri.Vhost == "/" {
		t.Fatal(fmt.Errorf("CloseConnections: %s selects the default vhost; it would close every session's connections", url))
	}
	rabbitmqctl(t, "close_all_connections", "--vhost", uri.Vhost, "test")
}

// CloseConnectionsNamed forcibly closes the broker side of every client
// connection whose connection_name is name (a name unique to the test).
func CloseConnectionsNamed(t testing.TB, name string) {
	t.Helper()
	out := rabbitmqctl(t, "list_connections", "-q", "--no-table-headers", "pid", "client_properties")
	n := 0
	for line := range strings.Lines(out) {
		if strings.Contains(line, `{"connection_name","`+name+`"}`) {
			rabbitmqctl(t, "close_connection", strings.Fields(line)[0], "test")
			n++
		}
	}
	if n == 0 {
		t.Fatalf("no connection named %s", name)
	}
}

// SetPermissions sets the configure, write and read permissions of the
// URL's user on the URL's vhost (one made by Vhost).
func SetPermissions(t testing.TB, url, configure, write, read string) {
	t.Helper()
	uri, err := amqp.ParseURI(url)
	if err != nil {
		t.Fatal(err)
	}
	rabbitmqctl(t, "set_permissions", "-p", uri.Vhost, uri.Username, configure, write, read)
}
