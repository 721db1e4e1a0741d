package alarm

import "context"

// EachLister is a Store that hands out a list page row by row, so that a
// page of large payloads is never held in memory as a whole.
type EachLister interface {
	// ListEach calls fn for each clock of q, newest first, until fn
	// returns false. Without payload, Clock.Payload is left empty.
	ListEach(ctx context.Context, q ListQuery, withPayload bool, fn func(Clock) bool) error
}

// ListEach is List one clock at a time: fn gets each clock of the page and
// returns false to end the page early (when the answer is full); the
// returned cursor then points after the last clock fn accepted, so that
// the next page starts with the one it refused. fn must accept the first
// clock of a page. Stores that are not EachListers are read with List.
func (s *Service) ListEach(ctx context.Context, q ListQuery, withPayload bool, fn func(Clock) bool) (next int64, err error) {
	el, ok := s.store.(EachLister)
	if !ok {
		cs, next, err := s.List(ctx, q)
		if err != nil {
			return 0, err
		}
		for i, c := range cs {
			if !withPayload {
				c.Payload = ""
			}
			if !fn(c) && i > 0 {
				return cs[i-1].ID, nil
			}
		}
		return next, nil
	}
	if err := q.check(); err != nil {
		return 0, err
	}
	limit := q.Limit
	q.Limit++ // one more tells whether there is a next page
	ctx, cancel := s.bound(ctx)
	defer cancel()
	var n int
	var last int64
	more := false
	err = el.ListEach(ctx, q, withPayload, func(c Clock) bool {
		if n == limit || !fn(c) {
			more = true
			return false
		}
		n++
		last = c.ID
		return true
	})
	if err != nil {
		return 0, err
	}
	if more {
		return last, nil
	}
	return 0, nil
}
