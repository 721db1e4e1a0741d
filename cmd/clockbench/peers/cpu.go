package main

import (
	"time"

	"github.com/clockd/clockd/internal/benchkit"
)

// The CPU accounting is clockbench's (internal/benchkit): the machine's
// counters in /proc/stat are read every cpuEvery while the jobs come, and the
// drain's CPU is told between the first reading at or after the first receipt
// and the last one at or before the last receipt, when the receipts are at
// least minDrainCPUSpan apart (the counters tick every 10 ms).
const (
	cpuEvery        = 100 * time.Millisecond
	minDrainCPUSpan = time.Second
)

// CPUUse is the CPU used between two readings.
type CPUUse struct {
	Machine      float64 `json:"machine_busy_pct"`   // of all cores: 100 = every core busy
	MachineBusyS float64 `json:"machine_busy_cpu_s"` // CPU time of every process of the machine
	Cores        float64 `json:"cores"`
	WallS        float64 `json:"wall_s"`
	Self         float64 `json:"peers_pct"` // this process (the peer's workers and the harness), % of one core
}

func cpuBetween(a, b benchkit.Mark) CPUUse {
	m := benchkit.Between(a, b)
	return CPUUse{Machine: m.BusyPct, MachineBusyS: m.BusyS, Cores: m.Cores, WallS: m.WallS, Self: m.SelfPct}
}

// QuietWait is the wait for a quiet machine before a run (clockbench's).
type QuietWait = benchkit.QuietWait

// Summary is a distribution of lateness in milliseconds (clockbench's).
type Summary = benchkit.Summary
