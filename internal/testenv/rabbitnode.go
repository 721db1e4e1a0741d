package testenv

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// RabbitNode is a private RabbitMQ node started by a test: its own node
// name, AMQP and distribution ports and data directory, so that stopping,
// restarting or killing it touches no other test or session (never the
// shared broker). Its user is guest/guest, allowed from localhost.
type RabbitNode struct {
	t    testing.TB
	Name string // Erlang node name, e.g. clockd-kit-1a2b3c@localhost
	Port int    // AMQP port on 127.0.0.1
	dir  string
	env  []string
	logs *SyncBuffer

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
}

// rabbitBin finds a RabbitMQ script: the unwrapped one in
// /usr/lib/rabbitmq/bin (the /usr/sbin wrapper switches to the rabbitmq
// user, which could not write the test's directory), else PATH's.
func rabbitBin(t testing.TB, name string) string {
	t.Helper()
	if p := filepath.Join("/usr/lib/rabbitmq/bin", name); fileExists(p) {
		return p
	}
	p, err := exec.LookPath(name)
	if err != nil {
		unavailable(t, name, err)
	}
	return p
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// StartRabbitNode starts a private single RabbitMQ node and waits until
// it accepts AMQP connections. It is killed when the test ends.
func StartRabbitNode(t testing.TB) *RabbitNode {
	t.Helper()
	dir := t.TempDir()
	n := &RabbitNode{t: t, Name: Name("clockd-kit-") + "@localhost", Port: freePort(t), dir: dir, logs: &SyncBuffer{}}
	dist := freePort(t)
	for _, f := range []struct{ name, text string }{
		{"enabled_plugins", "[].\n"}, // no management plugin: no port 15672 to fight over
		{"rabbitmq-env.conf", ""},    // not the system's: it names the shared node
		{"rabbitmq.conf", "listeners.tcp.1 = 127.0.0.1:" + strconv.Itoa(n.Port) + "\nloopback_users = none\n"},
	} {
		if err := os.WriteFile(filepath.Join(dir, f.name), []byte(f.text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	n.env = append(os.Environ(),
		"HOME="+dir, // the Erlang cookie of this node and of rabbitmqctl talking to it
		"RABBITMQ_NODENAME="+n.Name,
		"RABBITMQ_NODE_IP_ADDRESS=127.0.0.1",
		"RABBITMQ_NODE_PORT="+strconv.Itoa(n.Port),
		"RABBITMQ_DIST_PORT="+strconv.Itoa(dist),
		"RABBITMQ_MNESIA_BASE="+filepath.Join(dir, "mnesia"),
		"RABBITMQ_LOG_BASE="+filepath.Join(dir, "log"),
		"RABBITMQ_ENABLED_PLUGINS_FILE="+filepath.Join(dir, "enabled_plugins"),
		"RABBITMQ_CONF_ENV_FILE="+filepath.Join(dir, "rabbitmq-env.conf"),
		"RABBITMQ_CONFIG_FILE="+filepath.Join(dir, "rabbitmq.conf"),
		"RABBITMQ_ADVANCED_CONFIG_FILE="+filepath.Join(dir, "advanced.config"),
		"RABBITMQ_PID_FILE="+filepath.Join(dir, "rabbit.pid"),
		"ERL_EPMD_ADDRESS=127.0.0.1",
	)
	n.start()
	t.Cleanup(n.Kill)
	n.waitAMQP(120 * time.Second)
	return n
}

// URL is the AMQP URL of the node.
func (n *RabbitNode) URL() string {
	return "amqp://guest:guest@127.0.0.1:" + strconv.Itoa(n.Port) + "/"
}

func (n *RabbitNode) start() {
	n.t.Helper()
	cmd := exec.Command(rabbitBin(n.t, "rabbitmq-server"))
	cmd.Env = n.env
	cmd.Dir = n.dir
	cmd.Stdout, cmd.Stderr = n.logs, n.logs
	// Its own process group: Kill takes the Erlang VM and its helpers.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		n.t.Fatalf("start RabbitMQ node %s: %v", n.Name, err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	n.mu.Lock()
	n.cmd, n.done = cmd, done
	n.mu.Unlock()
}

// waitAMQP waits until the node accepts an AMQP connection.
func (n *RabbitNode) waitAMQP(limit time.Duration) {
	n.t.Helper()
	deadline := time.Now().Add(limit)
	for {
		conn, err := amqp.DialConfig(n.URL(), amqp.Config{Dial: amqp.DefaultDial(2 * time.Second)})
		if err == nil {
			conn.Close()
			return
		}
		n.mu.Lock()
		done := n.done
		n.mu.Unlock()
		select {
		case <-done:
			n.t.Fatalf("RabbitMQ node %s exited while starting:\n%s", n.Name, tail(n.logs.String(), 4000))
		default:
		}
		if time.Now().After(deadline) {
			n.t.Fatalf("RabbitMQ node %s: no AMQP on port %d within %s: %v\n%s", n.Name, n.Port, limit, err, tail(n.logs.String(), 4000))
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// ctl runs rabbitmqctl against this node.
// Ctl runs rabbitmqctl against this node, for example
// set_vm_memory_high_watermark to raise a resource alarm.
func (n *RabbitNode) Ctl(args ...string) string {
	n.t.Helper()
	return n.ctl(args...)
}

func (n *RabbitNode) ctl(args ...string) string {
	n.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, rabbitBin(n.t, "rabbitmqctl"), append([]string{"-n", n.Name}, args...)...)
	cmd.Env = n.env
	out, err := cmd.CombinedOutput()
	if err != nil {
		n.t.Fatalf("rabbitmqctl -n %s %s: %v\n%s", n.Name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// StopApp stops the RabbitMQ application of the node (rabbitmqctl
// stop_app): every connection is closed and no new one is accepted; the
// Erlang VM keeps running with its data.
func (n *RabbitNode) StopApp() { n.ctl("stop_app") }

// StartApp starts the application again (rabbitmqctl start_app) and waits
// until AMQP connections are accepted.
func (n *RabbitNode) StartApp() {
	n.ctl("start_app")
	n.waitAMQP(60 * time.Second)
}

// Kill kills the node's processes (SIGKILL), as a crash would. Safe to
// call more than once.
func (n *RabbitNode) Kill() {
	n.mu.Lock()
	cmd, done := n.cmd, n.done
	n.mu.Unlock()
	if cmd == nil || cmd.Process == nil {
		return
	}
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		n.t.Logf("RabbitMQ node %s: still running 10s after SIGKILL", n.Name)
	}
}

// String names the node and its port, for test logs.
func (n *RabbitNode) String() string { return fmt.Sprintf("%s (amqp port %d)", n.Name, n.Port) }
