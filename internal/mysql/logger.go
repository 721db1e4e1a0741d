package mysql

import (
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/clockd/clockd/internal/lograte"
)

// DriverLogger routes the log lines of go-sql-driver/mysql (such as
// "closing bad idle connection: EOF"), which it would print to stderr with
// the standard log package, through slog, so that they keep the format of
// every other line (JSON by default).
type DriverLogger struct {
	Log *slog.Logger
	// Rate, when set, limits the WARN lines (see Print).
	Rate *lograte.Limiter
}

// Print implements mysql.Logger. The driver logs only what it cannot
// report as an error to a caller: a warning. With Rate (the installed
// logger has one of 10 s), a line Rate holds back goes to DEBUG and the
// next WARN counts it. In an outage every pooled connection says the same at once (found
// by review: 26 identical "i/o timeout" lines in a second of a MySQL
// stall), and the error itself reaches the caller that logs it.
func (l DriverLogger) Print(v ...any) {
	detail := strings.TrimSpace(fmt.Sprint(v...))
	if l.Rate == nil {
		l.Log.Warn("mysql driver", "component", "mysql-driver", "detail", detail)
		return
	}
	if ok, heldBack := l.Rate.Allow("driver", 1); ok {
		l.Log.Warn("mysql driver", "component", "mysql-driver", "detail", detail, "like_lines_not_logged", heldBack)
		return
	}
	l.Log.Debug("mysql driver", "component", "mysql-driver", "detail", detail)
}

// driverLogRate limits the driver's WARN lines, process-wide as the
// driver's logger is.
var driverLogRate = lograte.New(10*time.Second, time.Now)

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
	DriverLogger{Log: log, Rate: driverLogRate}.Print(v...)
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
