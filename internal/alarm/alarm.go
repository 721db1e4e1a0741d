// Package alarm is the domain of clockd: what a clock is, the rules a new or
// changed clock must follow, the errors callers can tell apart, and the
// interfaces the adapters (MySQL store, scheduler) implement.
package alarm

import (
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"net/url"
	"time"

	"github.com/clockd/clockd/internal/schedule"
)

// Status is where a clock is in its life.
type Status string

// The statuses of a clock.
const (
	StatusPending   Status = "pending"   // waiting for its time
	StatusFiring    Status = "firing"    // claimed by a ring loop, being published
	StatusRung      Status = "rung"      // the broker confirmed the ring
	StatusCancelled Status = "cancelled" // cancelled by the application
	StatusExpired   Status = "expired"   // could not ring before latest_ring_at
	StatusDead      Status = "dead"      // max_attempts failed attempts
)

// Valid reports whether s is one of the statuses above.
func (s Status) Valid() bool {
	switch s {
	case StatusPending, StatusFiring, StatusRung, StatusCancelled, StatusExpired, StatusDead:
		return true
	}
	return false
}

// Clock is one alarm: one-shot, or recurring when Schedule is set. A zero
// time means "not set" (null).
//
// A recurring clock is one row that moves from occurrence to occurrence:
// RingAt is the scheduled time of its current occurrence (the one pending
// or firing), Attempts count that occurrence's attempts, and Status stays
// pending between occurrences; it finishes (rung) after its last one.
type Clock struct {
	ID           int64
	Application  string
	BusinessID   string
	Shard        int
	Payload      string
	ContentType  string
	RingAt       time.Time
	LatestRingAt time.Time
	MaxAttempts  int
	Status       Status
	Attempts     int
	// ReplayedAttempts are the attempts made before the clock's last
	// replay (Attempts restarts at 0); a ring's attempt number counts them.
	// Set on clocks claimed for a ring, and on the clock a Store's Change
	// hands to apply, which keeps them while the occurrence stays and sets
	// 0 for a new one.
	ReplayedAttempts int
	NextTryAt        time.Time
	LastError        string
	CreatedAt        time.Time
	UpdatedAt        time.Time
	RungAt           time.Time
	// Schedule is nil for a one-shot clock. Paused: a paused recurring
	// clock rings no occurrence until resumed. Occurrences counts the
	// occurrences that rang.
	Schedule    *schedule.Spec
	Paused      bool
	Occurrences int
	// Archived: the clock finished and was moved out of the clock table
	// into the history (read-only; FinishedAt is when it finished).
	Archived   bool
	FinishedAt time.Time
}

// Finished reports whether s is a final status: rung, cancelled, expired
// or dead. A create for the key of a finished clock sets a new clock.
func (s Status) Finished() bool {
	switch s {
	case StatusRung, StatusCancelled, StatusExpired, StatusDead:
		return true
	}
	return false
}

// Key identifies a clock.
type Key struct {
	Application string
	BusinessID  string
}

func (k Key) String() string { return k.Application + "/" + k.BusinessID }

// ShardOf returns the shard of a clock among n shards. It is stable: the
// same pair always lands in the same shard for a given n.
func ShardOf(application, businessID string, n int) int {
	h := crc32.NewIEEE()
	h.Write([]byte(application))
	h.Write([]byte{0})
	h.Write([]byte(businessID))
	return int(h.Sum32() % uint32(n))
}

// Errors that callers tell apart with errors.Is.
var (
	ErrNotFound    = errors.New("not found")
	ErrConflict    = errors.New("conflict")
	ErrInvalid     = errors.New("invalid argument")
	ErrTooLarge    = errors.New("too large")
	ErrUnavailable = errors.New("unavailable")
	// ErrInstanceTaken: another live process holds this instance id (its
	// heartbeat): this one must not run under it.
	ErrInstanceTaken = errors.New("instance id taken by another live process")
	// ErrExchangeChanged: the instances of this database ring to another
	// exchange than this one was given.
	ErrExchangeChanged = errors.New("the database's clocks ring to another exchange")
)

// FieldError is a validation failure of one field. It matches ErrInvalid
// (or ErrTooLarge for sizes) with errors.Is.
type FieldError struct {
	Field   string
	Message string
	Kind    error // ErrInvalid or ErrTooLarge
}

func (e *FieldError) Error() string { return e.Field + ": " + e.Message }

// Is makes errors.Is(err, ErrInvalid) and errors.Is(err, ErrTooLarge) work.
func (e *FieldError) Is(target error) bool {
	if e.Kind == nil {
		return target == ErrInvalid
	}
	return target == e.Kind
}

func invalid(field, format string, args ...any) error {
	return &FieldError{Field: field, Message: fmt.Sprintf(format, args...), Kind: ErrInvalid}
}

// ConflictError says why a change was refused for the clock's current state.
type ConflictError struct {
	Clock   Clock
	Message string
}

func (e *ConflictError) Error() string { return e.Message }

// Is makes errors.Is(err, ErrConflict) work.
func (e *ConflictError) Is(target error) bool { return target == ErrConflict }

// NewClock is a validated create request.
type NewClock struct {
	Application  string
	BusinessID   string
	Payload      string
	ContentType  string
	RingAt       time.Time
	LatestRingAt time.Time
	MaxAttempts  int
	// Delay is set when the ring time was given as a delay: a retried
	// create then means the same clock when the existing one was set to
	// ring the same delay after its creation.
	Delay   time.Duration
	ByDelay bool
	// Schedule makes the clock recurring (RingAt is then its first
	// occurrence). StartGiven: the request named the schedule's start
	// (else it was derived from the time of the create, and a retry of
	// the create derives another).
	Schedule   *schedule.Spec
	StartGiven bool
}

// Same reports whether an existing clock was created by an identical request,
// which makes a repeated create idempotent.
func (n NewClock) Same(c Clock) bool {
	sameTime := n.RingAt.Equal(c.RingAt)
	if n.ByDelay {
		// The create ran at an instant in [CreatedAt, CreatedAt+1ms) (created_at
		// keeps milliseconds) and set the ring to that instant plus the delay,
		// rounded up: CeilMS(CreatedAt+Delay) or one millisecond later.
		diff := c.RingAt.Sub(CeilMS(c.CreatedAt.Truncate(time.Millisecond).Add(n.Delay)))
		sameTime = diff == 0 || diff == time.Millisecond
	}
	if n.Schedule != nil || c.Schedule != nil {
		// a recurring clock moves on: its first occurrence is no measure
		sameTime = sameSchedule(n.Schedule, c.Schedule, n.StartGiven)
	}
	return sameTime && n.Payload == c.Payload && n.ContentType == c.ContentType &&
		n.LatestRingAt.Equal(c.LatestRingAt) && n.MaxAttempts == c.MaxAttempts
}

// AnswerExisting answers a create for a key whose clock ex is live (or was
// just created by the same batch): ex when the create is identical (200),
// else a conflict (409) saying what to do instead.
func AnswerExisting(n NewClock, ex Clock) CreateResult {
	if n.Same(ex) {
		return CreateResult{Clock: ex}
	}
	path := "/v1/clocks/" + url.PathEscape(ex.Application) + "/" + url.PathEscape(ex.BusinessID)
	var msg string
	switch ex.Status {
	case StatusPending:
		msg = fmt.Sprintf("clock %s/%s exists, pending, with different content: to change it, PATCH %s (clockctl reschedule); "+
			"to replace it, cancel it (DELETE %s) and create it again", ex.Application, ex.BusinessID, path, path)
	case StatusFiring:
		if ex.Schedule != nil {
			// once the occurrence has rung, the clock is pending on its
			// next one: a create would answer 409 again
			msg = fmt.Sprintf("clock %s/%s exists, recurring, with different content and is ringing an occurrence now (firing): "+
				"it stays for its next occurrences; retry in a moment, or PATCH %s (clockctl reschedule) to change it, "+
				"or cancel it (DELETE %s) and create it again", ex.Application, ex.BusinessID, path, path)
			break
		}
		msg = fmt.Sprintf("clock %s/%s exists with different content and is ringing now (firing): once it has rung, "+
			"a create for the key sets a new clock (but one identical to a clock of the key created within "+
			"clock.idempotency_window that rang is taken for its retry and answered with it); retry in a moment", ex.Application, ex.BusinessID)
	default:
		msg = fmt.Sprintf("clock %s/%s exists with different content (status %s)", ex.Application, ex.BusinessID, ex.Status)
	}
	return CreateResult{Clock: ex, Err: &ConflictError{Clock: ex, Message: msg}}
}

// CreateResult is the outcome of one create.
type CreateResult struct {
	Clock   Clock
	Created bool  // true: a new clock; false with Err nil: an identical one existed
	Err     error // ErrConflict, ErrInvalid, ErrUnavailable, ...
}

// ListQuery selects clocks for listing, newest first.
type ListQuery struct {
	Application string
	Status      Status
	// Recurring: nil lists every clock; true only recurring ones, false
	// only one-shot ones.
	Recurring *bool
	Limit     int
	BeforeID  int64 // cursor: only ids below this; 0 = from the newest
}

// Store keeps clocks durable. Implementations map their errors to the
// sentinels above. A nil error from a change means it is committed.
type Store interface {
	// Create inserts clocks, idempotently per key, and returns one result per
	// input in order.
	Create(ctx context.Context, clocks []NewClock, now time.Time) []CreateResult
	// Identical finds, for each clock, the clock its key holds that Create
	// would answer it with (200) at now, by Create's rule (a live clock
	// that is Same; a finished one that is Same and within the idempotency
	// window, or one re-armed since); nil when none. It reads only: it is
	// for creates that are not valid as new clocks at now (see
	// CreateInput.Resolve) but may be retries of the create that set one.
	Identical(ctx context.Context, clocks []NewClock, now time.Time) ([]*Clock, error)
	Get(ctx context.Context, k Key) (Clock, error)
	// InClock returns the clocks in the live table of those of the business
	// ids of app that have one there, in no order: one read for many keys
	// (finished ones included; history is not read).
	InClock(ctx context.Context, app string, businessIDs []string) ([]Clock, error)
	// Cancel moves a pending clock to cancelled.
	Cancel(ctx context.Context, k Key, now time.Time) (Clock, error)
	// Reschedule changes a pending clock: apply turns the current clock into
	// the new one (or refuses it) inside the store's transaction.
	Reschedule(ctx context.Context, k Key, now time.Time, apply func(Clock) (Clock, error)) (Clock, error)
	// Change is Reschedule under another name (pause, resume): verb names
	// the change in a refusal.
	Change(ctx context.Context, k Key, verb string, now time.Time, apply func(Clock) (Clock, error)) (Clock, error)
	// Replay moves an expired or dead clock back to pending, due now.
	Replay(ctx context.Context, k Key, now time.Time) (Clock, error)
	List(ctx context.Context, q ListQuery) ([]Clock, error)
	Ping(ctx context.Context) error
}

// Scheduler learns about clocks whose next try changed, so that a clock due
// soon reaches the in-memory heap without waiting for the next scan.
type Scheduler interface {
	Scheduled(clocks []Clock) // pending clocks, new or moved
	Unscheduled(ids []int64)  // clocks no longer pending
	// Recheck reads a shard from the store again: a change to one of its
	// clocks may or may not have been applied.
	Recheck(shard int)
}

// Due is a pending clock's place in time, as the preloader loads it.
type Due struct {
	ID    int64
	Shard int
	At    time.Time
}

// Lease is an instance's hold on a shard; Epoch is its fencing token.
type Lease struct {
	Shard int
	Epoch int64
	Until time.Time // by the database clock
	// RescanAt is when another instance last asked the owner to rescan
	// the shard (a hint it could not send), ms by the database clock; 0:
	// never. Only its changes matter.
	RescanAt int64
}

// Outcome is what became of one failed ring attempt.
type Outcome struct {
	ID        int64
	Status    Status    // pending (retry), expired or dead
	NextTryAt time.Time // for pending
	Error     string
}

// UnknownOutcomeError says a change was sent to the store but its outcome
// could not be learned (MySQL stopped answering after the COMMIT was sent).
// It matches ErrUnavailable. Shard tells the scheduler which shard to read
// again, since memory may no longer match the row.
type UnknownOutcomeError struct {
	Shard int
	Err   error
}

func (e *UnknownOutcomeError) Error() string { return e.Err.Error() }
func (e *UnknownOutcomeError) Unwrap() error { return e.Err }

// Is makes errors.Is(err, ErrUnavailable) work.
func (e *UnknownOutcomeError) Is(target error) bool { return target == ErrUnavailable }

// Rung is a confirmed ring: the clock and when its confirm arrived.
type Rung struct {
	ID int64
	At time.Time
}
