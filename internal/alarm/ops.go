package alarm

import "time"

// What operators look at (the console): figures the store reads for them.
// They are views, never inputs to the ring path.

// StatusCount is how many clocks of one application are in one status.
// The store counts exactly up to a cap; past it, Count is MySQL's estimate
// of the index range (Estimated), or, when there is none, the cap
// (AtLeast), so that a table of ten million clocks is never scanned for a
// page.
type StatusCount struct {
	Application string
	Status      Status
	Count       int64
	AtLeast     bool
	Estimated   bool
}

// DueBucket is the number of pending clocks whose next try falls in
// [At, At+width).
type DueBucket struct {
	At    time.Time
	Count int64
}

// FailureGroup is the pending clocks of one application that failed with
// the same last error.
type FailureGroup struct {
	Application string
	LastError   string
	Count       int64
	MaxAttempts int       // the most attempts among them
	Sample      string    // one business id, to open
	LastAt      time.Time // the latest failed attempt among them
}

// Instance is one clockd process of the cluster as its heartbeat row shows
// it: written by that instance, so every instance sees every instance.
type Instance struct {
	ID         string
	HTTPAddr   string
	StartedAt  time.Time
	ExpiresAt  time.Time
	HeapClocks int64     // clocks in its in-memory heap at its last heartbeat
	HeapBytes  int64     // its Go heap (live objects) at its last heartbeat
	StatsAt    time.Time // zero: it never reported (an older clockd)
	Rings      bool      // it can publish to RabbitMQ (only such instances hold shards)
}

// ShardLease is one shard's lease as the store holds it.
type ShardLease struct {
	Shard int
	Owner string // empty: free
	Epoch int64
	Until time.Time
}
