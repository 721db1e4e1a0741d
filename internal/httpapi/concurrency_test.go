package httpapi_test

import (
	"encoding/json"
	"fmt"
	"reflect"
	"sync"
	"testing"

	"github.com/clockd/clockd/internal/httpapi"
)

type answer struct {
	code int
	data []byte
	err  error
}

// concurrently sends n requests at once, built by mk, and returns the answers.
func (e *apiEnv) concurrently(n int, method, path string, mk func(i int) any) []answer {
	e.t.Helper()
	out := make([]answer, n)
	var ready, done sync.WaitGroup
	start := make(chan struct{})
	for i := 0; i < n; i++ {
		ready.Add(1)
		done.Add(1)
		go func() {
			defer done.Done()
			b := js(mk(i))
			ready.Done()
			<-start
			out[i].code, out[i].data, out[i].err = e.try(method, path, b)
		}()
	}
	ready.Wait()
	close(start)
	done.Wait()
	for i, a := range out {
		if a.err != nil {
			e.t.Fatalf("request %d: %v", i, a.err)
		}
	}
	return out
}

func TestConcurrentIdenticalCreates(t *testing.T) {
	t.Parallel()
	e := newAPI(t)
	for _, tt := range []struct {
		name string
		when []any
	}{
		{"ring_at", []any{"delay", nil, "ring_at", "2030-06-01T12:00:00.250Z"}},
		{"delay", []any{"delay", "10m"}}, // each request has its own "now"; retries are still identical
	} {
		t.Run(tt.name, func(t *testing.T) {
			e := e.with(t)
			id := "same-" + tt.name
			answers := e.concurrently(100, "POST", "/v1/clocks", func(int) any {
				return createBody("order", id, tt.when...)
			})
			var created, same int
			var first httpapi.Clock
			for i, a := range answers {
				switch a.code {
				case 201:
					created++
				case 200:
					same++
				default:
					t.Errorf("request %d: %d %s", i, a.code, a.data)
					continue
				}
				c := checkClockJSON(t, a.data)
				if first.ID == 0 {
					first = c
				} else if !reflect.DeepEqual(c, first) {
					t.Errorf("request %d answered\n %+v\nanother answered\n %+v", i, c, first)
				}
			}
			if created != 1 || same != 99 {
				t.Errorf("%d created and %d identical, want 1 and 99", created, same)
			}
			if n := e.count("business_id = ?", id); n != 1 {
				t.Errorf("%d rows, want 1", n)
			}
		})
	}
}

func TestConcurrentDifferentCreates(t *testing.T) {
	t.Parallel()
	e := newAPI(t)
	answers := e.concurrently(50, "POST", "/v1/clocks", func(i int) any {
		return createBody("order", "contested", "payload", fmt.Sprintf("version %d", i))
	})
	var created, conflicts int
	winner := ""
	for i, a := range answers {
		switch a.code {
		case 201:
			created++
			winner = fmt.Sprintf("version %d", i)
			if c := checkClockJSON(t, a.data); c.Payload != winner {
				t.Errorf("winner %d answered payload %q", i, c.Payload)
			}
		case 409:
			conflicts++
			checkErrorJSON(t, a.code, a.data)
		default:
			t.Errorf("request %d: %d %s", i, a.code, a.data)
		}
	}
	if created != 1 || conflicts != 49 {
		t.Fatalf("%d created and %d conflicts, want 1 and 49", created, conflicts)
	}
	if got := e.mustClock(200, "GET", "/v1/clocks/order/contested", nil); got.Payload != winner {
		t.Errorf("stored payload %q, want the winner's %q", got.Payload, winner)
	}
	if n := e.count("1=1"); n != 1 {
		t.Errorf("%d rows, want 1", n)
	}
}

func TestConcurrentDistinctCreates(t *testing.T) {
	t.Parallel()
	e := newAPI(t)
	const n = 600
	answers := e.concurrently(n, "POST", "/v1/clocks", func(i int) any {
		return createBody(fmt.Sprintf("app%d", i%7), fmt.Sprintf("c-%d", i))
	})
	ids := map[int64]int{}
	for i, a := range answers {
		if a.code != 201 {
			t.Fatalf("request %d: %d %s", i, a.code, a.data)
		}
		var c httpapi.Clock
		if err := json.Unmarshal(a.data, &c); err != nil {
			t.Fatal(err)
		}
		if c.BusinessID != fmt.Sprintf("c-%d", i) || c.Application != fmt.Sprintf("app%d", i%7) {
			t.Errorf("request %d answered clock %s/%s", i, c.Application, c.BusinessID)
		}
		if j, dup := ids[c.ID]; dup {
			t.Errorf("requests %d and %d got the same id %d", j, i, c.ID)
		}
		ids[c.ID] = i
	}
	// Every answered id is a committed row with the answered key.
	var rows []struct {
		ID  int64  `db:"id"`
		BID string `db:"business_id"`
	}
	if err := e.db.Select(&rows, "SELECT id, business_id FROM clock"); err != nil {
		t.Fatal(err)
	}
	if len(rows) != n {
		t.Errorf("%d rows, want %d", len(rows), n)
	}
	for _, r := range rows {
		i, ok := ids[r.ID]
		if !ok || r.BID != fmt.Sprintf("c-%d", i) {
			t.Errorf("row %d %s was not answered as such", r.ID, r.BID)
		}
	}
	// Group commit: fewer INSERT batches than creates.
	mfs, err := e.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var batches, rowsObserved uint64
	for _, mf := range mfs {
		if mf.GetName() == "clockd_create_batch_rows" {
			h := mf.GetMetric()[0].GetHistogram()
			batches, rowsObserved = h.GetSampleCount(), uint64(h.GetSampleSum())
		}
	}
	t.Logf("%d creates committed in %d batches", n, batches)
	if batches == 0 || batches >= n || rowsObserved != n {
		t.Errorf("clockd_create_batch_rows: %d batches holding %d rows for %d creates; want fewer batches than creates",
			batches, rowsObserved, n)
	}
}
