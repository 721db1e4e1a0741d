package console

import (
	"context"
	"sync"
	"time"
)

// kept keeps the last result of one of the console's heavier reads
// (the overview's counts and due chart, the trouble page's failing
// groups), so that a page answers from memory instead of reading a
// hundred thousand index entries of a ten-million-row table on every view.
//
// A result younger than fresh is served as is. An older one, up to stale,
// is served at once while one background read replaces it (so that an
// operator who keeps a page open sees figures at most about fresh old,
// and never waits for them). Past stale, or with none yet, or after
// forget (an action changed what it counts), the view reads synchronously.
// Nothing is read on a timer: an instance nobody looks at reads nothing.
type kept[T any] struct {
	fresh, stale time.Duration
	load         func(ctx context.Context) (T, error)
	now          func() time.Time

	mu         sync.Mutex
	val        T
	at         time.Time // zero: none
	floor      time.Time // reads begun before it are not kept (forget)
	refreshing bool
}

// get returns the value and when it was read.
func (s *kept[T]) get(ctx context.Context) (T, time.Time, error) {
	s.mu.Lock()
	val, at := s.val, s.at
	age := s.now().Sub(at)
	switch {
	case !at.IsZero() && age < s.fresh:
		s.mu.Unlock()
		return val, at, nil
	case !at.IsZero() && age < s.stale:
		if !s.refreshing {
			s.refreshing = true
			go s.refresh(context.WithoutCancel(ctx))
		}
		s.mu.Unlock()
		return val, at, nil
	}
	s.mu.Unlock()
	start := s.now()
	v, err := s.load(ctx)
	if err != nil {
		var zero T
		return zero, time.Time{}, err
	}
	s.store(v, start)
	return v, start, nil
}

func (s *kept[T]) refresh(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	start := s.now()
	v, err := s.load(ctx)
	s.mu.Lock()
	s.refreshing = false
	s.mu.Unlock()
	if err == nil {
		s.store(v, start)
	}
}

// store keeps v unless a newer read is kept already.
func (s *kept[T]) store(v T, at time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if at.Before(s.at) || at.Before(s.floor) {
		return
	}
	s.val, s.at = v, at
}

// forget drops the value: the next view reads again.
func (s *kept[T]) forget() {
	s.mu.Lock()
	defer s.mu.Unlock()
	var zero T
	s.val, s.at, s.floor = zero, time.Time{}, s.now()
}
