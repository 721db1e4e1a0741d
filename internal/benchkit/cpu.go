package benchkit

import (
	"context"
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Jiffy is one tick of /proc's CPU counters, in seconds (USER_HZ is 100 on
// Linux).
const Jiffy = 0.01

// Mark is a reading of the machine's CPU counters and of this process's.
type Mark struct {
	When        time.Time
	Total, Idle float64 // jiffies of all cores, from /proc/stat (idle counts iowait)
	Self        float64 // utime+stime of this process, jiffies
}

// Taken is when the reading was made.
func (m Mark) Taken() time.Time { return m.When }

// ReadMark reads the counters now.
func ReadMark() Mark {
	m := Mark{When: time.Now()}
	if b, err := os.ReadFile("/proc/stat"); err == nil {
		line, _, _ := strings.Cut(string(b), "\n")
		f := strings.Fields(line) // cpu user nice system idle iowait irq softirq steal ...
		for i := 1; i < len(f) && i <= 8; i++ {
			v, _ := strconv.ParseFloat(f[i], 64)
			m.Total += v
			if i == 4 || i == 5 {
				m.Idle += v
			}
		}
	}
	m.Self = ProcTicks("self")
	return m
}

// Machine is the CPU the machine used between two marks.
type Machine struct {
	BusyPct float64 // of all cores: 100 = every core busy
	BusyS   float64 // CPU seconds of every process of the machine
	Cores   float64 // the cores /proc/stat counts
	WallS   float64 // seconds between the marks
	SelfPct float64 // this process, percent of one core
}

// Between returns the CPU used from a to b.
func Between(a, b Mark) Machine {
	u := Machine{WallS: b.When.Sub(a.When).Seconds()}
	if d := b.Total - a.Total; d > 0 {
		u.BusyPct = 100 * (1 - (b.Idle-a.Idle)/d)
		u.BusyS = max(0, d-(b.Idle-a.Idle)) * Jiffy
		if u.WallS > 0 {
			u.Cores = math.Round(d * Jiffy / u.WallS)
		}
	}
	if u.WallS > 0 {
		u.SelfPct = 100 * (b.Self - a.Self) * Jiffy / u.WallS
	}
	return u
}

// ProcTicks returns utime+stime of /proc/<which>/stat in jiffies (which is
// a pid or "self"), 0 when it cannot be read.
func ProcTicks(which string) float64 {
	b, err := os.ReadFile("/proc/" + which + "/stat")
	if err != nil {
		return 0
	}
	t, _ := ParseStatTicks(string(b))
	return t
}

// ParseStatTicks returns utime+stime (fields 14 and 15, in jiffies) of the
// text of a /proc/<pid>/stat file.
func ParseStatTicks(s string) (float64, error) {
	// the command name, in parentheses, may hold spaces and parentheses:
	// the fields proper start after the last ')'
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, fmt.Errorf("stat: no command name in %.80q", s)
	}
	f := strings.Fields(s[i+1:]) // f[0] is field 3, state
	if len(f) < 13 {
		return 0, fmt.Errorf("stat: %d fields after the command name, want at least 13", len(f))
	}
	u, err := strconv.ParseFloat(f[11], 64)
	if err != nil {
		return 0, fmt.Errorf("stat utime: %w", err)
	}
	st, err := strconv.ParseFloat(f[12], 64)
	if err != nil {
		return 0, fmt.Errorf("stat stime: %w", err)
	}
	return u + st, nil
}

// Ticking calls a function at once and then every interval, in its own
// goroutine, until stopped.
type Ticking struct {
	stopc, done chan struct{}
	once        sync.Once
}

// StartTicking starts calling f.
func StartTicking(every time.Duration, f func()) *Ticking {
	t := &Ticking{stopc: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(t.done)
		tk := time.NewTicker(every)
		defer tk.Stop()
		for {
			f()
			select {
			case <-t.stopc:
				return
			case <-tk.C:
			}
		}
	}()
	return t
}

// Stop returns once the function has run for the last time; stopping again
// is a no-op.
func (t *Ticking) Stop() {
	t.once.Do(func() { close(t.stopc) })
	<-t.done
}

// Series holds readings made every interval, so that the CPU used between
// two moments known only afterwards (the first and the last job received)
// can be told. M is Mark or a reading that embeds one.
type Series[M interface{ Taken() time.Time }] struct {
	mu    sync.Mutex
	marks []M
	tick  *Ticking
}

// StartSeries calls read now and every interval until Stop.
func StartSeries[M interface{ Taken() time.Time }](every time.Duration, read func() M) *Series[M] {
	s := &Series[M]{}
	s.tick = StartTicking(every, func() { s.Add(read()) })
	return s
}

// Add appends a reading (made after the others).
func (s *Series[M]) Add(m M) {
	s.mu.Lock()
	s.marks = append(s.marks, m)
	s.mu.Unlock()
}

// Stop ends the readings (again: a no-op). A series built by Add alone has
// nothing to stop.
func (s *Series[M]) Stop() {
	if s.tick != nil {
		s.tick.Stop()
	}
}

// Window returns the first reading at or after from and the last one at or
// before to: the span they bound lies within [from, to]; ok is false when
// the series has no two readings there.
func (s *Series[M]) Window(from, to time.Time) (a, b M, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ia, ib := -1, -1
	for i, m := range s.marks {
		if ia < 0 && !m.Taken().Before(from) {
			ia = i
		}
		if !m.Taken().After(to) {
			ib = i
		}
	}
	if ia < 0 || ib <= ia {
		return a, b, false
	}
	return s.marks[ia], s.marks[ib], true
}

// QuietWait is the wait for a quiet machine before a run.
type QuietWait struct {
	WaitedS float64 `json:"waited_s"`
	// BusyPct is the machine's last QuietProbe before the run, in percent
	// of all cores
	BusyPct float64 `json:"busy_pct"`
	Quiet   bool    `json:"quiet"` // under the threshold, not given up
}

// QuietProbe is how long each look at the machine's CPU lasts.
const QuietProbe = 500 * time.Millisecond

// WaitQuiet waits until the machine's cores were less than busyPct % busy
// over one QuietProbe, at most maxWait: a run then does not start while
// what the one before left behind (MySQL flushing its dirty pages and
// purging, the broker's clean-up) still takes the cores.
func WaitQuiet(ctx context.Context, busyPct float64, maxWait time.Duration) QuietWait {
	start := time.Now()
	var w QuietWait
	for {
		a := ReadMark()
		select {
		case <-ctx.Done():
			return w
		case <-time.After(QuietProbe):
		}
		w.BusyPct = Between(a, ReadMark()).BusyPct
		w.WaitedS = time.Since(start).Seconds()
		if w.BusyPct < busyPct {
			w.Quiet = true
			return w
		}
		if time.Since(start)+QuietProbe > maxWait {
			return w
		}
	}
}

// LoadAvg is the machine's load average over 1, 5 and 15 minutes, as
// /proc/loadavg gives it ("" when it cannot be read).
func LoadAvg() string {
	b, _ := os.ReadFile("/proc/loadavg")
	f := strings.Fields(string(b))
	return strings.Join(f[:min(3, len(f))], " ")
}
