package main

import (
	"context"
	"math"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
)

// The CPU accounting is clockbench's (cmd/clockbench/rss.go): the machine's
// counters in /proc/stat are read every cpuEvery while the jobs come, and the
// drain's CPU is told between the first reading at or after the first receipt
// and the last one at or before the last receipt, when the receipts are at
// least minDrainCPUSpan apart (the counters tick every 10 ms).
const (
	cpuEvery        = 100 * time.Millisecond
	minDrainCPUSpan = time.Second
	jiffy           = 0.01 // USER_HZ is 100 on Linux
)

// CPUUse is the CPU used between two readings.
type CPUUse struct {
	Machine      float64 `json:"machine_busy_pct"`   // of all cores: 100 = every core busy
	MachineBusyS float64 `json:"machine_busy_cpu_s"` // CPU time of every process of the machine
	Cores        float64 `json:"cores"`
	WallS        float64 `json:"wall_s"`
	Self         float64 `json:"peers_pct"` // this process (the peer's workers and the harness), % of one core
}

type cpuMark struct {
	at          time.Time
	total, idle float64 // jiffies of all cores
	self        float64 // utime+stime of this process, jiffies
}

func readCPU() cpuMark {
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
	if b, err := os.ReadFile("/proc/self/stat"); err == nil {
		s := string(b)
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:]) // f[0] is field 3
		if len(f) > 12 {
			u, _ := strconv.ParseFloat(f[11], 64)
			st, _ := strconv.ParseFloat(f[12], 64)
			m.self = u + st
		}
	}
	return m
}

func cpuBetween(a, b cpuMark) CPUUse {
	u := CPUUse{WallS: b.at.Sub(a.at).Seconds()}
	if d := b.total - a.total; d > 0 {
		u.Machine = 100 * (1 - (b.idle-a.idle)/d)
		u.MachineBusyS = max(0, d-(b.idle-a.idle)) * jiffy
		if u.WallS > 0 {
			u.Cores = math.Round(d * jiffy / u.WallS)
		}
	}
	if u.WallS > 0 {
		u.Self = 100 * (b.self - a.self) * jiffy / u.WallS
	}
	return u
}

// cpuSeries reads the counters every cpuEvery until stopped.
type cpuSeries struct {
	mu          sync.Mutex
	marks       []cpuMark
	stopc, done chan struct{}
	once        sync.Once
}

func startCPUSeries() *cpuSeries {
	s := &cpuSeries{stopc: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(s.done)
		tk := time.NewTicker(cpuEvery)
		defer tk.Stop()
		for {
			m := readCPU()
			s.mu.Lock()
			s.marks = append(s.marks, m)
			s.mu.Unlock()
			select {
			case <-s.stopc:
				return
			case <-tk.C:
			}
		}
	}()
	return s
}

func (s *cpuSeries) stop() {
	s.once.Do(func() { close(s.stopc) })
	<-s.done
}

// window returns the first reading at or after from and the last one at or
// before to; ok is false when there are not two such readings.
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

// QuietWait is the wait for a quiet machine before a run.
type QuietWait struct {
	WaitedS float64 `json:"waited_s"`
	BusyPct float64 `json:"busy_pct"` // the machine's last half second before the run
	Quiet   bool    `json:"quiet"`    // under the threshold, not given up
}

// waitQuiet waits until the machine's cores were less than busyPct % busy
// over half a second, maxWait at most (clockbench's waitQuiet).
func waitQuiet(ctx context.Context, busyPct float64, maxWait time.Duration) QuietWait {
	const probe = 500 * time.Millisecond
	start := time.Now()
	var w QuietWait
	for {
		a := readCPU()
		select {
		case <-ctx.Done():
			return w
		case <-time.After(probe):
		}
		w.BusyPct = cpuBetween(a, readCPU()).Machine
		w.WaitedS = time.Since(start).Seconds()
		if w.BusyPct < busyPct {
			w.Quiet = true
			return w
		}
		if time.Since(start)+probe > maxWait {
			return w
		}
	}
}

func loadAvg() string {
	b, _ := os.ReadFile("/proc/loadavg")
	f := strings.Fields(string(b))
	return strings.Join(f[:min(3, len(f))], " ")
}
