package testenv

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
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

// rabbitClusterWait bounds the start of one node (a few seconds alone,
// much more on a busy two-core machine starting three at once).
const rabbitClusterWait = 3 * time.Minute

// RabbitCluster is a RabbitMQ cluster of private nodes on this machine, for
// tests that kill brokers: each node has its own node name, AMQP and
// distribution ports, data and log directories, and no management plugin;
// they share an Erlang cookie in a HOME of their own (never the shared
// broker's). The guest user (guest/guest) connects from 127.0.0.1.
type RabbitCluster struct {
	t     testing.TB
	Dir   string
	Nodes []*ClusterNode
	home  string // HOME of the nodes and of rabbitmqctl: the cookie
}

// ClusterNode is one node of a RabbitCluster.
type ClusterNode struct {
	c        *RabbitCluster
	Index    int    // 0-based position in RabbitCluster.Nodes
	Name     string // Erlang node name, e.g. clockd-ha-3f2a1b-1@localhost
	Port     int    // AMQP port on 127.0.0.1
	DistPort int
	dir      string

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{} // closed when cmd has exited
}

// StartRabbitCluster starts n private nodes in parallel, joins them into
// one cluster (rabbitmqctl stop_app, join_cluster, start_app on every node
// but the first), and waits until each accepts AMQP connections. Every node
// is killed and its files removed when the test ends, also on failure. A
// node that cannot start fails the test (RabbitMQ not installed included).
func StartRabbitCluster(t testing.TB, n int) *RabbitCluster {
	t.Helper()
	server := clusterBin(t, "rabbitmq-server")
	clusterBin(t, "rabbitmqctl")
	dir, err := os.MkdirTemp("", "clockd-rabbitcluster-")
	if err != nil {
		t.Fatal(err)
	}
	c := &RabbitCluster{t: t, Dir: dir, home: filepath.Join(dir, "home")}
	t.Cleanup(func() {
		for _, node := range c.Nodes {
			node.Kill()
		}
		if t.Failed() {
			for _, node := range c.Nodes {
				t.Logf("RabbitMQ node %s log:\n%s", node.Name, tail(node.Log(), 3000))
			}
		}
		if err := os.RemoveAll(dir); err != nil {
			t.Logf("remove %s: %v", dir, err)
		}
	})
	var cookie [20]byte
	if _, err := rand.Read(cookie[:]); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(c.home, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(c.home, ".erlang.cookie"), []byte(strings.ToUpper(hex.EncodeToString(cookie[:]))), 0o400); err != nil {
		t.Fatal(err)
	}
	// The system's rabbitmq-env.conf names the shared node: use none.
	if err := os.WriteFile(filepath.Join(dir, "rabbitmq-env.conf"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	// No plugins: the management plugin would fight over port 15672.
	if err := os.WriteFile(filepath.Join(dir, "enabled_plugins"), []byte("[].\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	base := Name("clockd-ha-")
	used := map[int]bool{}
	for i := range n {
		node := &ClusterNode{c: c, Index: i, Name: fmt.Sprintf("%s-%d@localhost", base, i+1),
			Port: clusterPort(t, used), DistPort: clusterPort(t, used), dir: filepath.Join(dir, strconv.Itoa(i+1))}
		if err := os.MkdirAll(node.dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(node.dir, "rabbitmq.conf"), []byte("loopback_users.guest = true\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		c.Nodes = append(c.Nodes, node)
	}
	begin := time.Now()
	for _, node := range c.Nodes {
		if err := node.start(server); err != nil {
			t.Fatal(err)
		}
	}
	// Wait for all in parallel: they boot at the same time.
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i, node := range c.Nodes {
		wg.Go(func() { errs[i] = node.waitAMQP(rabbitClusterWait) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatalf("start RabbitMQ cluster: %v", err)
	}
	booted := time.Since(begin)
	for _, node := range c.Nodes[1:] {
		node.Ctl("stop_app")
		node.Ctl("join_cluster", c.Nodes[0].Name)
		node.Ctl("start_app")
		if err := node.waitAMQP(rabbitClusterWait); err != nil {
			t.Fatal(err)
		}
	}
	status := c.Nodes[0].Ctl("cluster_status", "--formatter", "json")
	for _, node := range c.Nodes {
		if !strings.Contains(status, node.Name) {
			t.Fatalf("node %s not in the cluster:\n%s", node.Name, status)
		}
	}
	t.Logf("RabbitMQ cluster of %d nodes (%s) up: nodes booted in %s, joined in %s", n, strings.Join(c.names(), ", "),
		booted.Round(100*time.Millisecond), (time.Since(begin) - booted).Round(100*time.Millisecond))
	return c
}

// clusterBin finds a RabbitMQ script: the unwrapped one in
// /usr/lib/rabbitmq/bin (Debian's /usr/sbin wrapper switches to the
// rabbitmq user and its cookie), else PATH's.
func clusterBin(t testing.TB, name string) string {
	t.Helper()
	p := filepath.Join("/usr/lib/rabbitmq/bin", name)
	if _, err := os.Stat(p); err == nil {
		return p
	}
	p, err := exec.LookPath(name)
	if err != nil {
		unavailable(t, "RabbitMQ ("+name+")", err)
	}
	return p
}

// clusterPort picks a free port that is not in 35672-35682, where
// rabbitmqctl (everyone's) takes its own distribution port.
func clusterPort(t testing.TB, used map[int]bool) int {
	t.Helper()
	for range 100 {
		p := freePort(t)
		if (p < 35672 || p > 35682) && !used[p] {
			used[p] = true
			return p
		}
	}
	t.Fatal("no free port")
	return 0
}

func (c *RabbitCluster) names() []string {
	var out []string
	for _, n := range c.Nodes {
		out = append(out, n.Name)
	}
	return out
}

// URLs is the comma-separated list of the nodes' AMQP URLs, in order (the
// form of CLOCKD_AMQP_URL).
func (c *RabbitCluster) URLs() string { return strings.Join(c.URLList(0), ",") }

// URLList is the nodes' AMQP URLs starting with node first, then the
// others in order: a client connects to first and moves on from there.
func (c *RabbitCluster) URLList(first int) []string {
	var out []string
	for k := range c.Nodes {
		out = append(out, c.Nodes[(first+k)%len(c.Nodes)].URL())
	}
	return out
}

// Node returns the node whose AMQP port is port, or nil.
func (c *RabbitCluster) Node(port int) *ClusterNode {
	for _, n := range c.Nodes {
		if n.Port == port {
			return n
		}
	}
	return nil
}

// NodeNamed returns the node of an Erlang node name, or nil.
func (c *RabbitCluster) NodeNamed(name string) *ClusterNode {
	for _, n := range c.Nodes {
		if n.Name == name {
			return n
		}
	}
	return nil
}

// live returns a running node to ask (rabbitmqctl), failing the test when
// none runs.
func (c *RabbitCluster) live() *ClusterNode {
	c.t.Helper()
	for _, n := range c.Nodes {
		if n.Running() {
			return n
		}
	}
	c.t.Fatal("no RabbitMQ node of the cluster runs")
	return nil
}

// Ctl runs rabbitmqctl against a running node of the cluster.
func (c *RabbitCluster) Ctl(args ...string) string {
	c.t.Helper()
	return c.live().Ctl(args...)
}

// QueueLeader returns the node that leads quorum queue q (rabbitmqctl
// list_queues name leader), waiting up to limit while it has none (an
// election in progress).
func (c *RabbitCluster) QueueLeader(q string, limit time.Duration) *ClusterNode {
	c.t.Helper()
	deadline := time.Now().Add(limit)
	for {
		out := c.Ctl("list_queues", "-q", "--no-table-headers", "name", "leader")
		for line := range strings.Lines(out) {
			f := strings.Fields(line)
			if len(f) == 2 && f[0] == q {
				if n := c.NodeNamed(f[1]); n != nil && n.Running() {
					return n
				}
			}
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("quorum queue %s: no leader on a running node after %s:\n%s", q, limit, out)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// ConnectedTo returns the node that holds the client connection named name
// (connection_name client property), or nil when there is none. A
// connection's name as the broker shows it ("127.0.0.1:51234 ->
// 127.0.0.1:41001") ends with the port of the node it is connected to.
func (c *RabbitCluster) ConnectedTo(connName string) *ClusterNode {
	c.t.Helper()
	out := c.Ctl("list_connections", "-q", "--no-table-headers", "name", "client_properties")
	for line := range strings.Lines(out) {
		if !strings.Contains(line, `{"connection_name","`+connName+`"}`) {
			continue
		}
		f := strings.Fields(line)
		if len(f) < 3 || f[1] != "->" {
			continue
		}
		_, port, err := net.SplitHostPort(f[2])
		if err != nil {
			continue
		}
		p, _ := strconv.Atoi(port)
		if n := c.Node(p); n != nil {
			return n
		}
	}
	return nil
}

// URL is the node's AMQP URL.
func (n *ClusterNode) URL() string {
	return "amqp://guest:guest@127.0.0.1:" + strconv.Itoa(n.Port) + "/"
}

func (n *ClusterNode) String() string { return fmt.Sprintf("%s (port %d)", n.Name, n.Port) }

func (n *ClusterNode) env() []string {
	c := n.c
	return append(os.Environ(),
		"HOME="+c.home,
		"RABBITMQ_CONF_ENV_FILE="+filepath.Join(c.Dir, "rabbitmq-env.conf"),
		"RABBITMQ_ENABLED_PLUGINS_FILE="+filepath.Join(c.Dir, "enabled_plugins"),
		"RABBITMQ_NODENAME="+n.Name,
		"RABBITMQ_NODE_IP_ADDRESS=127.0.0.1",
		"RABBITMQ_NODE_PORT="+strconv.Itoa(n.Port),
		"RABBITMQ_DIST_PORT="+strconv.Itoa(n.DistPort),
		"RABBITMQ_CONFIG_FILE="+filepath.Join(n.dir, "rabbitmq.conf"),
		"RABBITMQ_ADVANCED_CONFIG_FILE="+filepath.Join(n.dir, "advanced.config"),
		"RABBITMQ_MNESIA_BASE="+filepath.Join(n.dir, "mnesia"),
		"RABBITMQ_LOG_BASE="+filepath.Join(n.dir, "log"),
		"RABBITMQ_PID_FILE="+filepath.Join(n.dir, "rabbit.pid"),
		"RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS=-kernel inet_dist_use_interface {127,0,0,1}",
		// The script then execs the Erlang VM instead of running it as a
		// child: the process the test holds is the broker, which Kill
		// kills (kill -9 of the VM) and which dies with the test binary.
		"RUNNING_UNDER_SYSTEMD=true",
	)
}

func (n *ClusterNode) start(server string) error {
	cmd := exec.Command(server)
	cmd.Env = n.env()
	cmd.Dir = n.dir
	out, err := os.OpenFile(filepath.Join(n.dir, "stdout.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = serverProcAttr()
	if err := cmd.Start(); err != nil {
		out.Close()
		return fmt.Errorf("start RabbitMQ node %s: %w", n.Name, err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); out.Close(); close(done) }()
	n.mu.Lock()
	n.cmd, n.done = cmd, done
	n.mu.Unlock()
	return nil
}

// Start starts a killed node again on its data directory and waits until it
// accepts AMQP connections: it rejoins the cluster by itself.
func (n *ClusterNode) Start() {
	n.c.t.Helper()
	if n.Running() {
		n.c.t.Fatalf("RabbitMQ node %s: Start while it runs", n.Name)
	}
	if err := n.start(clusterBin(n.c.t, "rabbitmq-server")); err != nil {
		n.c.t.Fatal(err)
	}
	if err := n.waitAMQP(rabbitClusterWait); err != nil {
		n.c.t.Fatal(err)
	}
}

func (n *ClusterNode) waitAMQP(limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		conn, err := amqp.DialConfig(n.URL(), amqp.Config{Dial: amqp.DefaultDial(2 * time.Second)})
		if err == nil {
			_ = conn.Close()
			return nil
		}
		n.mu.Lock()
		done := n.done
		n.mu.Unlock()
		select {
		case <-done:
			return fmt.Errorf("RabbitMQ node %s exited while starting:\n%s", n.Name, tail(n.Log(), 3000))
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("RabbitMQ node %s: no AMQP on port %d within %s: %v\n%s", n.Name, n.Port, limit, err, tail(n.Log(), 3000))
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// Ctl runs rabbitmqctl against this node and returns what it printed.
func (n *ClusterNode) Ctl(args ...string) string {
	n.c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, clusterBin(n.c.t, "rabbitmqctl"), append([]string{"-n", n.Name}, args...)...)
	cmd.Env = n.env()
	out, err := cmd.CombinedOutput()
	if err != nil {
		n.c.t.Fatalf("rabbitmqctl -n %s %s: %v\n%s", n.Name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// Running reports whether the node's process is alive.
func (n *ClusterNode) Running() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.done == nil {
		return false
	}
	select {
	case <-n.done:
		return false
	default:
		return true
	}
}

// Kill kills the node (SIGKILL to the Erlang VM, like kill -9) and waits
// for it to exit. Safe to call on a node that is not running.
func (n *ClusterNode) Kill() {
	n.mu.Lock()
	cmd, done := n.cmd, n.done
	n.mu.Unlock()
	if cmd == nil || cmd.Process == nil {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGKILL)
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		n.c.t.Errorf("RabbitMQ node %s still running 30s after SIGKILL", n.Name)
	}
}

// Log returns the node's log file and what it printed.
func (n *ClusterNode) Log() string {
	out, _ := os.ReadFile(filepath.Join(n.dir, "stdout.log"))
	log, _ := os.ReadFile(filepath.Join(n.dir, "log", n.Name+".log"))
	return string(out) + string(log)
}
