package main

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// fakeProc builds a /proc with the given processes (pid -> comm, and the
// socket inodes of its fds) and listening sockets (port -> inode).
func fakeProc(t *testing.T, procs map[string]struct {
	comm    string
	sockets []string
}, tcp, tcp6 map[int]string) string {
	t.Helper()
	root := t.TempDir()
	for pid, p := range procs {
		fd := filepath.Join(root, pid, "fd")
		if err := os.MkdirAll(fd, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, pid, "comm"), []byte(p.comm+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink("/dev/null", filepath.Join(fd, "0")); err != nil {
			t.Fatal(err)
		}
		for i, ino := range p.sockets {
			if err := os.Symlink("socket:["+ino+"]", filepath.Join(fd, string(rune('3'+i)))); err != nil {
				t.Fatal(err)
			}
		}
	}
	table := func(name string, socks map[int]string) {
		var b strings.Builder
		b.WriteString("  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n")
		for port, ino := range socks {
			// one listening socket, and one established connection on the same port that must not count
			b.WriteString(" 0: 0100007F:" + strings.ToUpper(hex4(port)) + " 00000000:0000 0A 00000000:00000000 00:00000000 00000000   0        0 " + ino + " 1 0 0 10 0\n")
			b.WriteString(" 1: 0100007F:" + strings.ToUpper(hex4(port)) + " 0100007F:9C40 01 00000000:00000000 00:00000000 00000000   0        0 9" + ino + " 1 0 0 10 0\n")
		}
		if err := os.MkdirAll(filepath.Join(root, "net"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, "net", name), []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	table("tcp", tcp)
	table("tcp6", tcp6)
	return root
}

func hex4(n int) string {
	const digits = "0123456789abcdef"
	return string([]byte{digits[n>>12&15], digits[n>>8&15], digits[n>>4&15], digits[n&15]})
}

// The MySQL and RabbitMQ processes are told apart from others of their
// kind by the port they listen on; remote or unknown ones are left out
// with a note.
func TestFindServers(t *testing.T) {
	type proc = struct {
		comm    string
		sockets []string
	}
	root := fakeProc(t, map[string]proc{
		"100": {"mariadbd", []string{"501"}},        // a private test server on 3400
		"200": {"mariadbd", []string{"777", "502"}}, // the one on 3306
		"300": {"beam.smp", []string{"600"}},        // rabbitmq on 5672, IPv6
		"400": {"bash", []string{"888"}},            // something else on 8080
	}, map[int]string{3400: "501", 3306: "502", 8080: "888"}, map[int]string{5672: "600"})

	got, notes := findServers(root, "root:@tcp(127.0.0.1:3306)/clockbench", "amqp://guest:guest@localhost/")
	if len(got) != 2 || got[0] != (server{"mysql", 200}) || got[1] != (server{"rabbitmq", 300}) || len(notes) != 0 {
		t.Errorf("found %+v, notes %q; want mysql 200 and rabbitmq 300, no notes", got, notes)
	}

	got, notes = findServers(root, "root:@tcp(db.example:3306)/x", "amqp://guest:guest@127.0.0.1:5673/")
	if len(got) != 0 || len(notes) != 2 || !strings.Contains(notes[0], "not on this machine") || !strings.Contains(notes[1], "nothing listens on port 5673") {
		t.Errorf("found %+v, notes %q; want none, a note for each", got, notes)
	}

	got, notes = findServers(root, "root:@tcp(127.0.0.1:8080)/x", "amqp://127.0.0.1:5672/")
	if len(got) != 1 || got[0].Name != "rabbitmq" || len(notes) != 1 || !strings.Contains(notes[0], "no mariadbd or mysqld process") {
		t.Errorf("found %+v, notes %q; want rabbitmq only, and a note that no MySQL process listens on 8080", got, notes)
	}
}

// On this machine, the MySQL and RabbitMQ that make test uses are found
// through the real /proc (IPv4 or IPv6 listeners).
func TestFindServersHere(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("another user's /proc/<pid>/fd is readable by root only; CI runs as root")
	}
	got, notes := findServers("/proc", "root:@tcp(127.0.0.1:3306)/", "amqp://guest:guest@127.0.0.1:5672/")
	if len(got) != 2 {
		t.Fatalf("found %+v, notes %q; want the local MariaDB and RabbitMQ (make test needs both)", got, notes)
	}
	for _, s := range got {
		if _, err := os.Stat(filepath.Join("/proc", strconv.Itoa(s.PID))); err != nil {
			t.Errorf("%s pid %d: %v", s.Name, s.PID, err)
		}
	}
}
