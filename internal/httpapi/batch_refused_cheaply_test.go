package httpapi

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"runtime"
	"testing"
)

// A batch body within http.max_body_bytes whose "clocks" array holds
// millions of one-byte items is refused (413, more than 1,000 clocks) for
// about the memory of its body: the README's budget of 32 ×
// http.max_body_bytes for the bodies held at once must hold. Splitting every
// item out before counting them cost 75 times the body.
func TestBatchOfMillionsOfItemsIsRefusedCheaply(t *testing.T) { // not parallel: measures allocations
	const maxBody = 8 << 20
	var b bytes.Buffer
	b.Grow(maxBody)
	b.WriteString(`{"clocks":[`)
	for b.Len() < maxBody-8 {
		b.WriteString("0,")
	}
	b.WriteString("0]}")
	body := b.Bytes()

	// auth off, no store: the batch is refused before anything is asked of MySQL
	h := New(Options{MaxBodyBytes: maxBody})
	req := httptest.NewRequest(http.MethodPost, "/v1/clocks/batch", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	rec := httptest.NewRecorder()

	runtime.GC()
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	h.ServeHTTP(rec, req)
	runtime.ReadMemStats(&m1)
	alloc := m1.TotalAlloc - m0.TotalAlloc

	if rec.Code != http.StatusRequestEntityTooLarge {
		t.Fatalf("batch of millions of items: %d %s, want 413", rec.Code, rec.Body.String())
	}
	t.Logf("one %d-byte batch body: %d, allocated %.0f MiB (%.1f× the body)", len(body), rec.Code,
		float64(alloc)/(1<<20), float64(alloc)/float64(len(body)))
	// the body itself, its read buffers and json.Valid: a few times the body
	if limit := uint64(4 * len(body)); alloc > limit {
		t.Errorf("refusing one batch of %d bytes allocated %.0f MiB, want at most %.0f MiB (4× the body): "+
			"the items are all split out before their count is checked against %d",
			len(body), float64(alloc)/(1<<20), float64(limit)/(1<<20), MaxBatch)
	}
}
