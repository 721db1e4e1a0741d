package consume

import (
	"context"
	"sync"
)

// MemoryDedup is a Dedup that remembers the last Size message_ids handled
// in this process (first in, first out). It protects against the repeats
// that come soon after (a redelivery after a lost connection, a re-ring
// after a clockd crash), not across restarts of the application nor
// between its instances.
type MemoryDedup struct {
	mu    sync.Mutex
	size  int
	seen  map[string]struct{}
	order []string // ring buffer of the ids in seen
	next  int
}

// NewMemoryDedup returns a MemoryDedup of size ids (at least 1).
func NewMemoryDedup(size int) *MemoryDedup {
	size = max(size, 1)
	return &MemoryDedup{size: size, seen: make(map[string]struct{}, size), order: make([]string, 0, size)}
}

// Seen reports whether id was recorded by Done and not yet forgotten.
func (m *MemoryDedup) Seen(_ context.Context, id string) (bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	_, ok := m.seen[id]
	return ok, nil
}

// Done records id, forgetting the oldest one when full.
func (m *MemoryDedup) Done(_ context.Context, id string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.seen[id]; ok {
		return nil
	}
	if len(m.order) < m.size {
		m.order = append(m.order, id)
	} else {
		delete(m.seen, m.order[m.next])
		m.order[m.next] = id
		m.next = (m.next + 1) % m.size
	}
	m.seen[id] = struct{}{}
	return nil
}
