package alarm

import (
	"context"
	"errors"
	"time"
)

// Service is what the API calls: it validates, changes the store, and tells
// the scheduler about clocks whose next try moved.
type Service struct {
	store   Store
	sched   Scheduler
	now     func() time.Time
	limits  Limits
	timeout time.Duration
}

// DefaultTimeout bounds the store work of one call when none is given.
const DefaultTimeout = 5 * time.Second

// NewService wires a service. sched may be nil (no ring loop in process).
// timeout bounds the store work of each call (0: DefaultTimeout): past it
// the call fails with ErrUnavailable and, for a change, nothing changed
// (unless the change's outcome had to be found out, see the Store).
func NewService(store Store, sched Scheduler, now func() time.Time, lim Limits, timeout time.Duration) *Service {
	if now == nil {
		now = time.Now
	}
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	return &Service{store: store, sched: sched, now: now, limits: lim, timeout: timeout}
}

func (s *Service) bound(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, s.timeout)
}

// settle keeps memory in step with MySQL after a change failed: when its
// outcome is unknown, the row may have changed, so its shard is read again.
func (s *Service) settle(err error) {
	var u *UnknownOutcomeError
	if s.sched != nil && errors.As(err, &u) {
		s.sched.Recheck(u.Shard)
	}
}

// Create validates and stores the given inputs, one result per input in
// order. Invalid inputs get their error and are not written. An input that
// is invalid only as a new clock at now (a time it names has passed, see
// CreateInput.Resolve) may be the retry of the create that set its key's
// clock: when the store holds a clock it would answer that create with
// (200), that is the answer; else the input's error. Only such inputs cost
// a read of the store before their answer.
func (s *Service) Create(ctx context.Context, ins []CreateInput) []CreateResult {
	now := s.now()
	results := make([]CreateResult, len(ins))
	valid := make([]NewClock, 0, len(ins))
	pos := make([]int, 0, len(ins))
	var late []NewClock
	var latePos []int
	for i, in := range ins {
		n, lateErr, err := in.Resolve(now, s.limits)
		switch {
		case err != nil:
			results[i].Err = err
		case lateErr != nil:
			results[i].Err = lateErr // unless an identical clock answers it
			late = append(late, n)
			latePos = append(latePos, i)
		default:
			valid = append(valid, n)
			pos = append(pos, i)
		}
	}
	if len(valid) == 0 && len(late) == 0 {
		return results
	}
	ctx, cancel := s.bound(ctx)
	defer cancel()
	created := make([]Clock, 0, len(valid)+len(late))
	if len(valid) > 0 {
		stored := s.store.Create(ctx, valid, now)
		for j, r := range stored {
			s.settle(r.Err)
			results[pos[j]] = r
			// An identical clock that already existed is offered too: if its
			// create answered after the commit was lost, this is its first offer.
			if r.Err == nil && r.Clock.Status == StatusPending {
				created = append(created, r.Clock)
			}
		}
	}
	if len(late) > 0 {
		found, err := s.store.Identical(ctx, late, now)
		for j, i := range latePos {
			switch {
			case err != nil:
				// whether a clock answers it is not known: not "invalid",
				// which would tell a retry to give up on a clock that exists
				results[i].Err = err
			case found[j] != nil:
				results[i] = CreateResult{Clock: *found[j]}
				if found[j].Status == StatusPending {
					created = append(created, *found[j])
				}
			}
		}
	}
	s.scheduled(created)
	return results
}

// Invalid is the error a create is refused with whatever the table holds
// (a bad field, both ring_at and delay, ...), or nil. A time that has
// passed is not such an error: a retry of the create that set the key's
// clock is still answered by that clock. The API asks it before an
// application's quota, so that an invalid create is answered 400 and
// costs no quota (found by review: 429 with Retry-After for a create that
// could never succeed, and a creates_per_second token spent on it).
func (s *Service) Invalid(in CreateInput) error {
	_, _, err := in.Resolve(s.now(), s.limits)
	return err
}

// InvalidPatch is Invalid for a reschedule: the error its fields are
// refused with whatever the clock is.
func (s *Service) InvalidPatch(p PatchInput) error {
	return p.Check(s.now(), s.limits)
}

// PatchError is the error reschedule p would be refused with on clock c
// as it is, or nil.
func (s *Service) PatchError(c Clock, p PatchInput) error {
	_, err := p.Apply(c, s.now(), s.limits)
	return err
}

// Now is the time by the service's clock, the one its changes are made at.
func (s *Service) Now() time.Time { return s.now() }

// Get reads one clock.
func (s *Service) Get(ctx context.Context, k Key) (Clock, error) {
	if err := CheckKey(k); err != nil {
		return Clock{}, err
	}
	ctx, cancel := s.bound(ctx)
	defer cancel()
	return s.store.Get(ctx, k)
}

// InClock reads, in one go, the clocks of app's business ids that are in
// the live table (see Store.InClock); ids that are not valid are left out.
func (s *Service) InClock(ctx context.Context, app string, businessIDs []string) ([]Clock, error) {
	if CheckApplication(app) != nil {
		return nil, nil
	}
	ids := make([]string, 0, len(businessIDs))
	for _, id := range businessIDs {
		if CheckBusinessID(id) == nil {
			ids = append(ids, id)
		}
	}
	if len(ids) == 0 {
		return nil, nil
	}
	ctx, cancel := s.bound(ctx)
	defer cancel()
	return s.store.InClock(ctx, app, ids)
}

// Cancel cancels a pending clock.
func (s *Service) Cancel(ctx context.Context, k Key) (Clock, error) {
	if err := CheckKey(k); err != nil {
		return Clock{}, err
	}
	ctx, cancel := s.bound(ctx)
	defer cancel()
	c, err := s.store.Cancel(ctx, k, s.now())
	if err == nil && s.sched != nil {
		s.sched.Unscheduled([]int64{c.ID})
	}
	s.settle(err)
	return c, err
}

// Reschedule changes a pending clock.
func (s *Service) Reschedule(ctx context.Context, k Key, p PatchInput) (Clock, error) {
	if err := CheckKey(k); err != nil {
		return Clock{}, err
	}
	now := s.now()
	if err := p.Check(now, s.limits); err != nil {
		return Clock{}, err
	}
	ctx, cancel := s.bound(ctx)
	defer cancel()
	c, err := s.store.Reschedule(ctx, k, now, func(c Clock) (Clock, error) {
		return p.Apply(c, now, s.limits)
	})
	if err == nil {
		s.scheduled([]Clock{c})
	}
	s.settle(err)
	return c, err
}

// Pause parks a pending recurring clock: no occurrence rings until Resume.
func (s *Service) Pause(ctx context.Context, k Key) (Clock, error) {
	return s.change(ctx, k, "pause", Pause)
}

// Resume lets a paused recurring clock ring again, from its first
// occurrence after now.
func (s *Service) Resume(ctx context.Context, k Key) (Clock, error) {
	return s.change(ctx, k, "resume", Resume)
}

// change runs one state change of a pending clock and tells the scheduler
// where the clock is now.
func (s *Service) change(ctx context.Context, k Key, verb string, apply func(Clock, time.Time) (Clock, error)) (Clock, error) {
	if err := CheckKey(k); err != nil {
		return Clock{}, err
	}
	now := s.now()
	ctx, cancel := s.bound(ctx)
	defer cancel()
	c, err := s.store.Change(ctx, k, verb, now, func(c Clock) (Clock, error) { return apply(c, now) })
	if err == nil && s.sched != nil {
		if c.Paused {
			s.sched.Unscheduled([]int64{c.ID})
		} else {
			s.sched.Scheduled([]Clock{c})
		}
	}
	s.settle(err)
	return c, err
}

// Replay puts an expired or dead clock back to pending, due now.
func (s *Service) Replay(ctx context.Context, k Key) (Clock, error) {
	if err := CheckKey(k); err != nil {
		return Clock{}, err
	}
	ctx, cancel := s.bound(ctx)
	defer cancel()
	c, err := s.store.Replay(ctx, k, s.now())
	if err == nil {
		s.scheduled([]Clock{c})
	}
	s.settle(err)
	return c, err
}

// List lists clocks, newest first, and returns the cursor of the next page
// (0 when this is the last).
func (s *Service) List(ctx context.Context, q ListQuery) ([]Clock, int64, error) {
	if err := q.check(); err != nil {
		return nil, 0, err
	}
	limit := q.Limit
	q.Limit++ // one more tells whether there is a next page
	ctx, cancel := s.bound(ctx)
	defer cancel()
	cs, err := s.store.List(ctx, q)
	if err != nil {
		return nil, 0, err
	}
	if len(cs) > limit {
		cs = cs[:limit]
		return cs, cs[limit-1].ID, nil
	}
	return cs, 0, nil
}

// check validates a list query.
func (q ListQuery) check() error {
	if q.Application != "" {
		if err := CheckApplication(q.Application); err != nil {
			return err
		}
	}
	if q.Status != "" && !q.Status.Valid() {
		return invalid("status", "must be one of pending, firing, rung, cancelled, expired, dead")
	}
	if q.Limit <= 0 || q.Limit > 1000 {
		return invalid("limit", "must be between 1 and 1000, got %d", q.Limit)
	}
	if q.BeforeID < 0 {
		return invalid("after", "is not a cursor from a previous page")
	}
	return nil
}

// Ping tells whether the store answers.
func (s *Service) Ping(ctx context.Context) error { return s.store.Ping(ctx) }

func (s *Service) scheduled(cs []Clock) {
	if s.sched != nil && len(cs) > 0 {
		s.sched.Scheduled(cs)
	}
}
