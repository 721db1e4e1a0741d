package janitor

import (
	"sync"
	"time"
)

// pace sizes the janitor's batches and the rest after each.
//
// Size: a batch grows (by a quarter) while its move transaction takes less
// than half of moveTarget and halves when one takes longer, between
// minBatch and the configured largest batch: statements stay short on a
// busy server and long drains on a quiet one go in large batches.
//
// Rest: while the ring path has work (Busy), a mover works at most a
// share of the time (the rest after a batch that took d is
// d·(1−share)/share, at least Pause), so that a drain leaves MySQL and the
// cores to the rings; while it has none, movers do not rest at all. The
// share is BusyShare for a run's first ten intervals and grows with the
// run's length (twice BusyShare after ten intervals, three times after
// twenty, up to all the time): rings that never stop still leave the
// janitor enough to keep up. A backlog batch (its newest clock finished
// more than backlogLag before the retention boundary: after an outage of
// the janitor, or retention switched on for an old table) works a tenth of
// that share: catching up can wait for the rings, keeping up cannot.
type pace struct {
	max      int
	share    float64
	pause    time.Duration
	busy     func() bool
	interval time.Duration
	start    time.Time
	now      func() time.Time

	mu   sync.Mutex
	size int
}

const (
	// moveTarget: the longest a move transaction (lock, copy, delete,
	// commit) should take; its statements then stay well under 100 ms.
	moveTarget = 100 * time.Millisecond
	// minBatch: batches never shrink below it.
	minBatch = 25
	// backlogLag: a batch whose newest clock finished more than this long
	// before the retention boundary is backlog; in steady state a batch is
	// at most an interval and a run's length behind it.
	backlogLag = time.Hour
	// backlogShareDivisor: while rings are due, backlog moves at
	// BusyShare / this. At 10 % a drain of 10 M clocks made rings at
	// 5,000/s 3-4 times later at p99; at 1 % no later (docs/benchmarks.md).
	backlogShareDivisor = 10
)

func newPace(cfg Config) *pace {
	p := &pace{max: cfg.Batch, share: cfg.BusyShare, pause: cfg.Pause, busy: cfg.Busy,
		interval: cfg.Interval, now: time.Now}
	p.start = p.now()
	p.size = min(p.max, 250) // start modest: the server's state is unknown
	return p
}

// batch is the size of the next batch.
func (p *pace) batch() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.size
}

// moved records that a batch of n clocks took d, adapts the size, and
// returns how long the mover rests before its next batch (longer after a
// backlog batch).
func (p *pace) moved(n int, d time.Duration, backlog bool) time.Duration {
	p.mu.Lock()
	switch {
	case d > moveTarget:
		p.size = max(min(minBatch, p.max), p.size/2)
	case d < moveTarget/2 && n >= p.size:
		p.size = min(p.max, p.size+max(p.size/4, 1))
	}
	p.mu.Unlock()
	if p.busy == nil || !p.busy() {
		return 0
	}
	share := p.share
	if backlog {
		share /= backlogShareDivisor
	}
	share = min(1, share*(1+float64(p.now().Sub(p.start))/float64(10*p.interval)))
	if share >= 1 {
		return 0
	}
	rest := time.Duration(float64(d) * (1 - share) / share)
	return max(rest, p.pause)
}
