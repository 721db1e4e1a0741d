package mysql

import (
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"

	"github.com/go-sql-driver/mysql"
)

// DriverLogger routes the log lines of go-sql-driver/mysql (such as
// "closing bad idle connection: EOF"), which it would print to stderr with
// the standard log package, through slog, so that they keep the format of
// every other line (JSON by default).
type DriverLogger struct {
	Log *slog.Logger
}

// Print implements mysql.Logger. The driver logs only what it cannot
// report as an error to a caller: a warning.
func (l DriverLogger) Print(v ...any) {
	l.Log.Warn("mysql driver", "component", "mysql-driver", "detail", strings.TrimSpace(fmt.Sprint(v...)))
}

// driverLog is where the installed driver logger writes. The driver's
// logger is a global (mysql.SetLogger) that it reads, unsynchronised,
// whenever a DSN is parsed; so it is set once, before any goroutine runs
// (InstallDriverLogger), and what may change later, from any goroutine, is
// only this pointer (SetDriverLogger).
var driverLog atomic.Pointer[slog.Logger]

// forwardLogger is the driver logger InstallDriverLogger sets.
type forwardLogger struct{}

func (forwardLogger) Print(v ...any) {
	log := driverLog.Load()
	if log == nil {
		log = slog.Default()
	}
	DriverLogger{Log: log}.Print(v...)
}

// InstallDriverLogger makes the driver write its lines through slog: to the
// logger given to SetDriverLogger, slog.Default() until then. It sets the
// one global the driver forces on us: call it once, at the start of main,
// before any other goroutine can parse a DSN.
func InstallDriverLogger() error {
	if err := mysql.SetLogger(forwardLogger{}); err != nil {
		return fmt.Errorf("mysql: driver logger: %w", err)
	}
	return nil
}

// SetDriverLogger sends the driver's lines to log (once InstallDriverLogger
// ran). Safe for concurrent use.
func SetDriverLogger(log *slog.Logger) {
	driverLog.Store(log)
}
