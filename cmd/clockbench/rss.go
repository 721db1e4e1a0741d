package main

import (
	"bufio"
	"context"
	"fmt"
	"math"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

// CPUUse is the CPU used during one scenario, in percent of one core.
type CPUUse struct {
	Machine float64 `json:"machine_busy_pct"` // of all cores: 100 = every core busy
	// MachineBusyS is the CPU time every process of the machine used (all
	// cores, from /proc/stat), Cores the cores it counts, WallS the span
	MachineBusyS float64 `json:"machine_busy_cpu_s,omitempty"`
	Cores        float64 `json:"cores,omitempty"`
	WallS        float64 `json:"wall_s,omitempty"`
	Clockd       float64 `json:"clockd_pct,omitempty"`
	ClockdCPUS   float64 `json:"clockd_cpu_s,omitempty"` // utime+stime of clockd during the scenario
	Clockbench   float64 `json:"clockbench_pct"`
	// the local MySQL and RabbitMQ processes (see findServers), by name:
	// percent of one core, and CPU seconds
	Servers    map[string]float64 `json:"server_pct,omitempty"`
	ServerCPUS map[string]float64 `json:"server_cpu_s,omitempty"`
	LoadAvg    string             `json:"loadavg_end"`
}

// cpuMark is a reading of the CPU counters.
type cpuMark struct {
	at          time.Time
	total, idle float64            // jiffies of all cores, from /proc/stat
	self, pid   float64            // utime+stime jiffies
	servers     map[string]float64 // utime+stime jiffies of localServers, by name
}

const jiffy = 0.01 // USER_HZ is 100 on Linux

func readCPU(pid int) cpuMark {
	m := cpuMark{at: time.Now()}
	if b, err := os.ReadFile("/proc/stat"); err == nil {
		line, _, _ := strings.Cut(string(b), "\n")
		f := strings.Fields(line) // cpu user nice system idle iowait irq softirq steal ...
		for i := 1; i < len(f) && i <= 8; i++ {
			v, _ := strconv.ParseFloat(f[i], 64)
			m.total += v
			if i == 4 || i == 5 {
				m.idle += v
			}
		}
	}
	m.self = procTicks("self")
	if pid > 0 {
		m.pid = procTicks(strconv.Itoa(pid))
	}
	if len(localServers) > 0 {
		m.servers = map[string]float64{}
		for _, s := range localServers {
			m.servers[s.Name] = procTicks(strconv.Itoa(s.PID))
		}
	}
	return m
}

// procTicks returns utime+stime of /proc/<which>/stat in jiffies, 0 when
// it cannot be read.
func procTicks(which string) float64 {
	b, err := os.ReadFile("/proc/" + which + "/stat")
	if err != nil {
		return 0
	}
	t, _ := parseStatTicks(string(b))
	return t
}

// parseStatTicks returns utime+stime (fields 14 and 15, in jiffies) of the
// text of a /proc/<pid>/stat file.
func parseStatTicks(s string) (float64, error) {
	// the command name, in parentheses, may hold spaces and parentheses:
	// the fields proper start after the last ')'
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, fmt.Errorf("stat: no command name in %q", snippet([]byte(s)))
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

// clockdSeconds returns the CPU seconds the -rss-pid process used between
// two marks.
func clockdSeconds(a, b cpuMark) float64 {
	return max(0, b.pid-a.pid) * jiffy
}

// cpuBetween returns the CPU use between two marks.
func cpuBetween(a, b cpuMark, pid int) CPUUse {
	wall := b.at.Sub(a.at).Seconds()
	u := CPUUse{}
	if d := b.total - a.total; d > 0 {
		u.Machine = 100 * (1 - (b.idle-a.idle)/d)
		u.MachineBusyS = max(0, d-(b.idle-a.idle)) * jiffy
		if wall > 0 {
			u.Cores = math.Round(d * jiffy / wall)
		}
	}
	u.WallS = wall
	if wall > 0 {
		u.Clockbench = 100 * (b.self - a.self) * jiffy / wall
		if pid > 0 {
			u.ClockdCPUS = clockdSeconds(a, b)
			u.Clockd = 100 * u.ClockdCPUS / wall
		}
		if u.ServerCPUS = serverSeconds(a, b); u.ServerCPUS != nil {
			u.Servers = map[string]float64{}
			for k, v := range u.ServerCPUS {
				u.Servers[k] = 100 * v / wall
			}
		}
	}
	if l, err := os.ReadFile("/proc/loadavg"); err == nil {
		f := strings.Fields(string(l))
		if len(f) >= 3 {
			u.LoadAvg = strings.Join(f[:3], " ")
		}
	}
	return u
}

// perOp is the machine's CPU time per operation in microseconds (0 when
// there is none to divide).
func (u CPUUse) perOp(n int) float64 {
	if n <= 0 || u.MachineBusyS <= 0 {
		return 0
	}
	return u.MachineBusyS / float64(n) * 1e6
}

// cpuSeries reads the CPU counters every interval, so that the CPU use
// between two moments known only afterwards (the first and the last ring
// received) can be told.
type cpuSeries struct {
	mu    sync.Mutex
	marks []cpuMark
	tick  *ticking
}

func startCPUSeries(pid int, every time.Duration) *cpuSeries {
	s := &cpuSeries{}
	s.tick = startTicking(every, func() {
		m := readCPU(pid)
		s.mu.Lock()
		s.marks = append(s.marks, m)
		s.mu.Unlock()
	})
	return s
}

// stop ends the readings (again: a no-op).
func (s *cpuSeries) stop() { s.tick.stop() }

// ticking calls a function at once and then every interval, in its own
// goroutine, until stopped.
type ticking struct {
	stopc, done chan struct{}
	once        sync.Once
}

func startTicking(every time.Duration, f func()) *ticking {
	t := &ticking{stopc: make(chan struct{}), done: make(chan struct{})}
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

// stop returns once the function has run for the last time; stopping
// again is a no-op.
func (t *ticking) stop() {
	t.once.Do(func() { close(t.stopc) })
	<-t.done
}

// window returns the first reading at or after from and the last one at or
// before to: the span they bound lies within [from, to]; ok is false when
// the series has no two readings there.
func (s *cpuSeries) window(from, to time.Time) (a, b cpuMark, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ia, ib := -1, -1
	for i, m := range s.marks {
		if ia < 0 && !m.at.Before(from) {
			ia = i
		}
		if !m.at.After(to) {
			ib = i
		}
	}
	if ia < 0 || ib <= ia {
		return cpuMark{}, cpuMark{}, false
	}
	return s.marks[ia], s.marks[ib], true
}

// QuietWait is the wait for a quiet machine before a scenario.
type QuietWait struct {
	WaitedS float64 `json:"waited_s"`
	// BusyPct is the machine's last half second before the scenario began,
	// in percent of all cores
	BusyPct float64 `json:"busy_pct"`
	Quiet   bool    `json:"quiet"` // under the threshold, not given up
}

// quietBefore waits for a quiet machine before the scenario (or sweep step)
// name, as cfg says (-quiet-busy 0: not at all, ok false), and logs a wait
// that gave up.
func quietBefore(ctx context.Context, cfg *config, name string, logf func(string, ...any)) (q QuietWait, ok bool) {
	if cfg.quietBusy <= 0 {
		return q, false
	}
	q = waitQuiet(ctx, cfg.quietBusy, cfg.quietMax)
	if !q.Quiet && ctx.Err() == nil {
		logf("%s: the machine is still %.0f%% busy after %.1f s; starting anyway", name, q.BusyPct, q.WaitedS)
	}
	return q, true
}

// quietProbe is how long each look at the machine's CPU lasts.
const quietProbe = 500 * time.Millisecond

// waitQuiet waits until the machine's cores were less than busyPct % busy
// over one quietProbe, at most maxWait: a scenario then does not start
// while what the previous one left behind (MySQL flushing its dirty pages
// and purging, the broker's clean-up) still takes the cores.
func waitQuiet(ctx context.Context, busyPct float64, maxWait time.Duration) QuietWait {
	start := time.Now()
	var w QuietWait
	for {
		a := readCPU(0)
		select {
		case <-ctx.Done():
			return w
		case <-time.After(quietProbe):
		}
		w.BusyPct = cpuBetween(a, readCPU(0), 0).Machine
		w.WaitedS = time.Since(start).Seconds()
		if w.BusyPct < busyPct {
			w.Quiet = true
			return w
		}
		if time.Since(start)+quietProbe > maxWait {
			return w
		}
	}
}

// RSSResult is the resident memory of the clockd process during the run.
type RSSResult struct {
	PID        int                `json:"pid"`
	MaxMiB     float64            `json:"max_mib"`
	LastMiB    float64            `json:"last_mib"`
	Samples    int                `json:"samples"`
	ByScenario map[string]float64 `json:"max_mib_by_scenario,omitempty"`
	Notes      []string           `json:"notes,omitempty"`
}

// rssSampler reads VmRSS of a process every 100 ms.
type rssSampler struct {
	mu       sync.Mutex
	res      RSSResult
	phaseMax float64
	tick     *ticking
}

func startRSS(pid int) *rssSampler {
	s := &rssSampler{res: RSSResult{PID: pid, ByScenario: map[string]float64{}}}
	s.tick = startTicking(100*time.Millisecond, s.sample)
	return s
}

func (s *rssSampler) sample() {
	mib, err := readRSS(s.res.PID)
	s.mu.Lock()
	defer s.mu.Unlock()
	if err != nil {
		if len(s.res.Notes) == 0 {
			s.res.Notes = append(s.res.Notes, "sampling stopped working: "+err.Error())
		}
		return
	}
	s.res.Samples++
	s.res.LastMiB = mib
	s.res.MaxMiB = max(s.res.MaxMiB, mib)
	s.phaseMax = max(s.phaseMax, mib)
}

// phase records the maximum since the previous call under name.
func (s *rssSampler) phase(name string) {
	s.sample()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.res.ByScenario[name] = s.phaseMax
	s.phaseMax = 0
}

// resetPhase starts a new phase.
func (s *rssSampler) resetPhase() {
	s.mu.Lock()
	s.phaseMax = 0
	s.mu.Unlock()
	s.sample()
}

func (s *rssSampler) stop() *RSSResult {
	s.tick.stop()
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.res
	return &r
}

// readRSS returns VmRSS of pid in MiB.
func readRSS(pid int) (float64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			fields := strings.Fields(rest) // "123456 kB"
			if len(fields) < 1 {
				break
			}
			kb, err := strconv.ParseFloat(fields[0], 64)
			if err != nil {
				return 0, err
			}
			return kb / 1024, nil
		}
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	return 0, fmt.Errorf("no VmRSS in /proc/%d/status", pid)
}

func sortedFloatKeys(m map[string]float64) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
