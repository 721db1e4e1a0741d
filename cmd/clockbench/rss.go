package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/clockd/clockd/internal/benchkit"
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

// cpuMark is a reading of the CPU counters: the machine's and clockbench's
// own (benchkit's), and those of clockd and the local servers.
type cpuMark struct {
	benchkit.Mark
	pid     float64            // utime+stime jiffies of the -rss-pid process
	servers map[string]float64 // utime+stime jiffies of localServers, by name
}

func readCPU(pid int) cpuMark {
	m := cpuMark{Mark: benchkit.ReadMark()}
	if pid > 0 {
		m.pid = benchkit.ProcTicks(strconv.Itoa(pid))
	}
	if len(localServers) > 0 {
		m.servers = map[string]float64{}
		for _, s := range localServers {
			m.servers[s.Name] = benchkit.ProcTicks(strconv.Itoa(s.PID))
		}
	}
	return m
}

// clockdSeconds returns the CPU seconds the -rss-pid process used between
// two marks.
func clockdSeconds(a, b cpuMark) float64 {
	return max(0, b.pid-a.pid) * benchkit.Jiffy
}

// cpuBetween returns the CPU use between two marks.
func cpuBetween(a, b cpuMark, pid int) CPUUse {
	m := benchkit.Between(a.Mark, b.Mark)
	u := CPUUse{Machine: m.BusyPct, MachineBusyS: m.BusyS, Cores: m.Cores, WallS: m.WallS, Clockbench: m.SelfPct,
		LoadAvg: benchkit.LoadAvg()}
	if wall := m.WallS; wall > 0 {
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
type cpuSeries = benchkit.Series[cpuMark]

func startCPUSeries(pid int, every time.Duration) *cpuSeries {
	return benchkit.StartSeries(every, func() cpuMark { return readCPU(pid) })
}

// QuietWait is the wait for a quiet machine before a scenario.
type QuietWait = benchkit.QuietWait

// quietBefore waits for a quiet machine before the scenario (or sweep step)
// name, as cfg says (-quiet-busy 0: not at all, ok false), and logs a wait
// that gave up.
func quietBefore(ctx context.Context, cfg *config, name string, logf func(string, ...any)) (q QuietWait, ok bool) {
	if cfg.quietBusy <= 0 {
		return q, false
	}
	q = benchkit.WaitQuiet(ctx, cfg.quietBusy, cfg.quietMax)
	if !q.Quiet && ctx.Err() == nil {
		logf("%s: the machine is still %.0f%% busy after %.1f s; starting anyway", name, q.BusyPct, q.WaitedS)
	}
	return q, true
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
	tick     *benchkit.Ticking
}

func startRSS(pid int) *rssSampler {
	s := &rssSampler{res: RSSResult{PID: pid, ByScenario: map[string]float64{}}}
	s.tick = benchkit.StartTicking(100*time.Millisecond, s.sample)
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
	s.tick.Stop()
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
