package main

import (
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/go-sql-driver/mysql"

	"github.com/clockd/clockd/internal/benchkit"
)

// A server is a MySQL or RabbitMQ process on this machine whose CPU time
// clockbench reports beside clockd's: on a machine that runs everything,
// a ring costs CPU in all three, and where it goes says which one a
// figure waits for.
type server struct {
	Name string `json:"name"` // "mysql" or "rabbitmq"
	PID  int    `json:"pid"`
}

// serverComms are the process names (comm) of each kind of server.
var serverComms = map[string][]string{
	"mysql":    {"mariadbd", "mysqld"},
	"rabbitmq": {"beam.smp"},
}

// findServers finds the local processes of the MySQL server of mysqlDSN and
// of the broker of amqpURL: among the processes of the server's kind, the
// one listening on the address's port. A server on another host, or one
// whose process cannot be told, is left out with a note saying why.
func findServers(procRoot, mysqlDSN, amqpURL string) ([]server, []string) {
	var out []server
	var notes []string
	find := func(name, addr string) {
		host, port, err := net.SplitHostPort(addr)
		if err != nil {
			notes = append(notes, fmt.Sprintf("%s CPU not reported: address %q: %v", name, addr, err))
			return
		}
		if !isLoopback(host) {
			notes = append(notes, fmt.Sprintf("%s CPU not reported: %s is not on this machine (or not by a loopback address)", name, addr))
			return
		}
		p, err := strconv.Atoi(port)
		if err != nil {
			notes = append(notes, fmt.Sprintf("%s CPU not reported: port %q", name, port))
			return
		}
		pid, err := listenerPID(procRoot, serverComms[name], p)
		if err != nil {
			notes = append(notes, fmt.Sprintf("%s CPU not reported: %v", name, err))
			return
		}
		out = append(out, server{Name: name, PID: pid})
	}
	if cfg, err := mysql.ParseDSN(mysqlDSN); err != nil || cfg.Net != "tcp" {
		notes = append(notes, "mysql CPU not reported: the -mysql DSN is not a TCP address")
	} else {
		find("mysql", cfg.Addr)
	}
	if u, err := url.Parse(amqpURL); err != nil || u.Host == "" {
		notes = append(notes, "rabbitmq CPU not reported: the -amqp URL has no host")
	} else {
		addr := u.Host
		if u.Port() == "" {
			addr = net.JoinHostPort(u.Hostname(), "5672")
		}
		find("rabbitmq", addr)
	}
	return out, notes
}

func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// listenerPID returns the pid of the process named one of comms that holds
// a socket listening on TCP port (IPv4 or IPv6), from procRoot (/proc).
func listenerPID(procRoot string, comms []string, port int) (int, error) {
	inodes := map[string]bool{}
	for _, f := range []string{"net/tcp", "net/tcp6"} {
		b, err := os.ReadFile(filepath.Join(procRoot, f))
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n")[1:] {
			// sl local_address rem_address st tx:rx tr:tm retrnsmt uid timeout inode
			fs := strings.Fields(line)
			if len(fs) < 10 || fs[3] != "0A" { // 0A: LISTEN
				continue
			}
			_, hexPort, ok := strings.Cut(fs[1], ":")
			if p, err := strconv.ParseInt(hexPort, 16, 32); ok && err == nil && int(p) == port {
				inodes["socket:["+fs[9]+"]"] = true
			}
		}
	}
	if len(inodes) == 0 {
		return 0, fmt.Errorf("nothing listens on port %d here", port)
	}
	dirs, err := os.ReadDir(procRoot)
	if err != nil {
		return 0, err
	}
	for _, d := range dirs {
		pid, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		comm, err := os.ReadFile(filepath.Join(procRoot, d.Name(), "comm"))
		if err != nil || !slices.Contains(comms, strings.TrimSpace(string(comm))) {
			continue
		}
		fds, err := os.ReadDir(filepath.Join(procRoot, d.Name(), "fd"))
		if err != nil {
			continue // another user's process
		}
		for _, fd := range fds {
			if link, err := os.Readlink(filepath.Join(procRoot, d.Name(), "fd", fd.Name())); err == nil && inodes[link] {
				return pid, nil
			}
		}
	}
	return 0, fmt.Errorf("no %s process of this user listens on port %d", strings.Join(comms, " or "), port)
}

// serverSeconds returns each server's CPU seconds between two marks (nil
// when no server was found).
func serverSeconds(a, b cpuMark) map[string]float64 {
	if len(b.servers) == 0 {
		return nil
	}
	out := map[string]float64{}
	for name, ticks := range b.servers {
		out[name] = max(0, ticks-a.servers[name]) * benchkit.Jiffy
	}
	return out
}

// localServers are the servers found at the start of the run.
var localServers []server
