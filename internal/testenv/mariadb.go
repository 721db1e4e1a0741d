package testenv

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"io"
	"io/fs"
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

	"github.com/go-sql-driver/mysql"
)

// Where Debian's mariadb-server package puts the programs.
const (
	mariadbdPath  = "/usr/sbin/mariadbd"
	installDBPath = "/usr/bin/mariadb-install-db"
)

// mariadbReadyWait bounds how long a start may take (under -race and a
// busy CI machine it is usually a fraction of a second).
const mariadbReadyWait = 60 * time.Second

// MariaDB is a private MariaDB server for tests that must stop, pause,
// kill or restart the database, which they must never do to the shared
// one. Its root user has an empty password on 127.0.0.1.
type MariaDB struct {
	t    testing.TB
	Dir  string // datadir, socket, logs: kept across Stop/Kill and Start
	Port int
	opts MariaDBOptions

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{} // closed when cmd has exited
	err  error         // cmd's exit status
}

// MariaDBOptions configure a private server beyond the defaults (for a
// replication pair).
type MariaDBOptions struct {
	// ServerID is server_id (0: the server's default, 1).
	ServerID int
	// LogBin turns the binary log on (in Dir, files binlog.*); it is off
	// otherwise.
	LogBin bool
	// Extra holds my.cnf lines of the [mariadbd] section, "name=value" or
	// "name", passed as --name=value options (e.g.
	// "rpl_semi_sync_master_enabled=ON"); they come last and win.
	Extra []string
}

// StartMariaDB starts a fresh MariaDB server on a free port, waits until
// it answers, and removes it (process and files) when the test ends. When
// MariaDB is not installed the test fails, saying how to install it.
func StartMariaDB(t testing.TB) *MariaDB {
	t.Helper()
	return StartMariaDBWith(t, MariaDBOptions{})
}

// StartMariaDBWith is StartMariaDB with options.
func StartMariaDBWith(t testing.TB, opts MariaDBOptions) *MariaDB {
	t.Helper()
	for _, p := range []string{mariadbdPath, installDBPath} {
		if _, err := os.Stat(p); err != nil {
			unavailable(t, "MariaDB server programs", err)
		}
	}
	template := mariadbTemplate(t)
	dir, err := os.MkdirTemp("", "clockd-mariadb-")
	if err != nil {
		t.Fatal(err)
	}
	m := &MariaDB{t: t, Dir: dir, Port: freePort(t), opts: opts}
	t.Cleanup(func() {
		m.Kill()
		if t.Failed() {
			t.Logf("private MariaDB %s error log:\n%s", m.Addr(), tail(m.ErrorLog(), 4000))
		}
		if err := os.RemoveAll(dir); err != nil {
			t.Logf("remove %s: %v", dir, err)
		}
	})
	if err := copyDir(template, filepath.Join(dir, "data")); err != nil {
		t.Fatalf("copy the MariaDB datadir: %v", err)
	}
	m.Start()
	return m
}

var (
	templateOnce sync.Once
	templateDir  string
	templateErr  error
)

// mariadbTemplate returns a datadir with the system tables installed, from
// which every server starts as a copy: mariadb-install-db takes seconds, a
// copy milliseconds. It is kept in the temp dir (about 26 MB) for the next
// test binaries, one per build of mariadbd, like a build cache.
func mariadbTemplate(t testing.TB) string {
	t.Helper()
	templateOnce.Do(func() { templateDir, templateErr = installTemplate() })
	if templateErr != nil {
		t.Fatalf("install a MariaDB datadir: %v", templateErr)
	}
	return templateDir
}

func installTemplate() (string, error) {
	bin, err := os.Stat(mariadbdPath)
	if err != nil {
		return "", err
	}
	final := filepath.Join(os.TempDir(), fmt.Sprintf("clockd-mariadb-template-%x-%x", bin.Size(), bin.ModTime().Unix()))
	if _, err := os.Stat(final); err == nil {
		return final, nil
	}
	dir, err := os.MkdirTemp("", "clockd-mariadb-install-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(dir)
	data := filepath.Join(dir, "data")
	args := []string{"--no-defaults", "--datadir=" + data,
		"--auth-root-authentication-method=normal", "--skip-test-db", "--skip-name-resolve",
		"--innodb-log-file-size=8M"}
	if os.Geteuid() == 0 {
		args = append(args, "--user=root")
	}
	if out, err := exec.Command(installDBPath, args...).CombinedOutput(); err != nil {
		return "", fmt.Errorf("%s: %v\n%s", installDBPath, err, out)
	}
	// Another test binary may have installed one meanwhile: either wins.
	if err := os.Rename(data, final); err != nil {
		if _, serr := os.Stat(final); serr != nil {
			return "", fmt.Errorf("keep the installed datadir: %w", err)
		}
	}
	return final, nil
}

// Addr is the server's host:port.
func (m *MariaDB) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(m.Port)) }

// DSN is a go-sql-driver DSN of the server, no database selected.
func (m *MariaDB) DSN() string { return "root:@tcp(" + m.Addr() + ")/" }

// DSNFor is a DSN that selects database db (clockd creates it if missing).
func (m *MariaDB) DSNFor(db string) string { return m.DSN() + db }

// ErrorLog returns the server's error log (every start appends to it).
func (m *MariaDB) ErrorLog() string {
	b, _ := os.ReadFile(filepath.Join(m.Dir, "error.log"))
	return string(b)
}

// Start starts the server on its datadir and port (again, after Stop or
// Kill) and waits until it answers. InnoDB recovers what a Kill left.
func (m *MariaDB) Start() {
	m.t.Helper()
	m.mu.Lock()
	if m.running() {
		m.mu.Unlock()
		m.t.Fatalf("MariaDB %s: Start while it runs", m.Addr())
	}
	args := []string{"--no-defaults",
		"--datadir=" + filepath.Join(m.Dir, "data"),
		"--socket=" + filepath.Join(m.Dir, "mysqld.sock"),
		"--pid-file=" + filepath.Join(m.Dir, "mysqld.pid"),
		"--log-error=" + filepath.Join(m.Dir, "error.log"),
		"--port=" + strconv.Itoa(m.Port), "--bind-address=127.0.0.1",
		"--skip-name-resolve",
		"--innodb-buffer-pool-size=64M", "--innodb-log-file-size=8M",
		"--max-connections=500",
		"--character-set-server=utf8mb4", "--collation-server=utf8mb4_general_ci",
	}
	if m.opts.LogBin {
		args = append(args, "--log-bin="+filepath.Join(m.Dir, "binlog"), "--binlog-format=ROW")
	} else {
		args = append(args, "--skip-log-bin")
	}
	if m.opts.ServerID != 0 {
		args = append(args, "--server-id="+strconv.Itoa(m.opts.ServerID))
	}
	for _, line := range m.opts.Extra {
		args = append(args, "--"+strings.TrimSpace(line))
	}
	if os.Geteuid() == 0 {
		args = append(args, "--user=root") // mariadbd refuses to run as root otherwise
	}
	cmd := exec.Command(mariadbdPath, args...)
	out, err := os.OpenFile(filepath.Join(m.Dir, "stdout.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		m.mu.Unlock()
		m.t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = serverProcAttr()
	if err := cmd.Start(); err != nil {
		out.Close()
		m.mu.Unlock()
		m.t.Fatalf("start %s: %v", mariadbdPath, err)
	}
	done := make(chan struct{})
	m.cmd, m.done, m.err = cmd, done, nil
	m.mu.Unlock()
	go func() {
		err := cmd.Wait()
		out.Close()
		m.mu.Lock()
		m.err = err
		m.mu.Unlock()
		close(done)
	}()
	if err := m.waitReady(done); err != nil {
		m.Kill()
		m.t.Fatalf("MariaDB %s did not start: %v\nerror log:\n%s", m.Addr(), err, tail(m.ErrorLog(), 4000))
	}
}

// running reports whether the last started process has not exited; m.mu
// is held.
func (m *MariaDB) running() bool {
	if m.done == nil {
		return false
	}
	select {
	case <-m.done:
		return false
	default:
		return true
	}
}

func (m *MariaDB) waitReady(done <-chan struct{}) error {
	cfg := mysql.NewConfig()
	cfg.User, cfg.Net, cfg.Addr = "root", "tcp", m.Addr()
	cfg.Timeout, cfg.ReadTimeout = time.Second, 2*time.Second
	db, err := sql.Open("mysql", cfg.FormatDSN())
	if err != nil {
		return err
	}
	defer db.Close()
	deadline := time.Now().Add(mariadbReadyWait)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		err = db.PingContext(ctx)
		cancel()
		if err == nil {
			return nil
		}
		select {
		case <-done:
			m.mu.Lock()
			defer m.mu.Unlock()
			return fmt.Errorf("mariadbd exited: %v", m.err)
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no answer after %s: %w", mariadbReadyWait, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (m *MariaDB) signal(sig syscall.Signal) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.running() {
		_ = m.cmd.Process.Signal(sig)
	}
}

// wait waits for the process to exit, at most limit; false if it did not.
func (m *MariaDB) wait(limit time.Duration) bool {
	m.mu.Lock()
	done := m.done
	m.mu.Unlock()
	if done == nil {
		return true
	}
	select {
	case <-done:
		return true
	case <-time.After(limit):
		return false
	}
}

// Stop shuts the server down cleanly (SIGTERM) and waits for it.
func (m *MariaDB) Stop() {
	m.t.Helper()
	m.signal(syscall.SIGCONT) // a paused server cannot shut down
	m.signal(syscall.SIGTERM)
	if !m.wait(time.Minute) {
		m.t.Errorf("MariaDB %s did not shut down within a minute; killing it", m.Addr())
		m.Kill()
	}
}

// Kill kills the server (SIGKILL, like a crash or an OOM kill) and waits
// for it. Committed transactions survive: Start recovers them.
func (m *MariaDB) Kill() {
	m.t.Helper()
	m.signal(syscall.SIGKILL)
	if !m.wait(30 * time.Second) {
		m.t.Errorf("MariaDB %s still running 30s after SIGKILL", m.Addr())
	}
}

// Pause freezes the server (SIGSTOP): its sockets stay open and the
// kernel still accepts connections, but nothing answers until Continue.
// It returns once the process is stopped (a signal is delivered
// asynchronously).
func (m *MariaDB) Pause() {
	m.signal(syscall.SIGSTOP)
	m.mu.Lock()
	pid := 0
	if m.running() {
		pid = m.cmd.Process.Pid
	}
	m.mu.Unlock()
	for deadline := time.Now().Add(2 * time.Second); pid != 0 && time.Now().Before(deadline); {
		if stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); err != nil || procState(stat) == 'T' {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// procState is the state letter of a /proc/<pid>/stat line ("pid (comm) S ...").
func procState(stat []byte) byte {
	if i := bytes.LastIndexByte(stat, ')'); i >= 0 && i+2 < len(stat) {
		return stat[i+2]
	}
	return 0
}

// Continue resumes a paused server (SIGCONT).
func (m *MariaDB) Continue() { m.signal(syscall.SIGCONT) }

// Running reports whether the server process is alive (paused counts).
func (m *MariaDB) Running() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.running()
}

func freePort(t testing.TB) int {
	t.Helper()
	_, port, err := net.SplitHostPort(FreeAddr(t))
	if err != nil {
		t.Fatal(err)
	}
	n, err := strconv.Atoi(port)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// copyDir copies the regular files and directories of src into dst.
func copyDir(src, dst string) error {
	return filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, path)
		if err != nil {
			return err
		}
		to := filepath.Join(dst, rel)
		info, err := d.Info()
		if err != nil {
			return err
		}
		switch {
		case d.IsDir():
			return os.MkdirAll(to, info.Mode().Perm()|0o700)
		case info.Mode().IsRegular():
			return copyFile(path, to, info.Mode().Perm())
		default:
			return fmt.Errorf("copy %s: not a regular file", path)
		}
	})
}

func copyFile(src, dst string, perm fs.FileMode) (err error) {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_EXCL, perm)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := out.Close(); cerr != nil && err == nil {
			err = cerr
		}
	}()
	_, err = io.Copy(out, in)
	return err
}
