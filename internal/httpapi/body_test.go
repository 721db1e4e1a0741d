package httpapi

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"testing/iotest"
	"time"
)

// readBody must read exactly what io.ReadAll would, whatever the declared
// length says, and in one allocation when the declared length is right.
func TestReadBodyReadsWhatReadAllReads(t *testing.T) {
	body := bytes.Repeat([]byte(`{"application":"a","business_id":"b","delay":"1s"},`), 2000)
	for _, n := range []int{0, 1, 511, 512, 513, 4096, len(body)} {
		want := body[:n]
		for _, declared := range []int64{-1, 0, int64(n) - 1, int64(n), int64(n) + 1, 10 * int64(n), 1 << 40} {
			for name, r := range map[string]io.Reader{
				"whole":    bytes.NewReader(want),
				"one byte": iotest.OneByteReader(bytes.NewReader(want)),
				"data+EOF": iotest.DataErrReader(bytes.NewReader(want)),
			} {
				got, err := readBody(r, declared, 1<<20)
				if err != nil || !bytes.Equal(got, want) {
					t.Fatalf("n %d, declared %d, %s: read %d bytes, err %v", n, declared, name, len(got), err)
				}
			}
		}
	}
	boom := errors.New("boom")
	got, err := readBody(io.MultiReader(bytes.NewReader(body[:100]), iotest.ErrReader(boom)), 1000, 1<<20)
	if !errors.Is(err, boom) || !bytes.Equal(got, body[:100]) {
		t.Fatalf("a failed read: %d bytes, err %v; want 100 bytes and the error", len(got), err)
	}
	br := bytes.NewReader(body)
	allocs := testing.AllocsPerRun(20, func() {
		br.Reset(body)
		_, _ = readBody(br, int64(len(body)), 1<<20)
	})
	if allocs > 2 {
		t.Fatalf("a body of %d bytes, its declared length, took %.0f allocations; want 2 at most", len(body), allocs)
	}
}

// A client that declares the largest body and sends a trickle holds a
// buffer in proportion to what it sent.
func TestReadBodyTrickleHoldsLittle(t *testing.T) {
	boom := errors.New("cut off")
	for _, sent := range []int{0, 10, 40 << 10, 100 << 10} {
		r := io.MultiReader(bytes.NewReader(make([]byte, sent)), iotest.ErrReader(boom))
		got, err := readBody(r, 8<<20, 8<<20)
		if !errors.Is(err, boom) || len(got) != sent {
			t.Fatalf("sent %d: read %d, err %v", sent, len(got), err)
		}
		if c := cap(got); c > max(32<<10, 4*sent) {
			t.Errorf("sent %d of a declared 8 MiB: the buffer holds %d bytes; want at most max(32 KiB, 4 × sent)", sent, c)
		}
	}
}

// Past the limit the error is http.MaxBytesError, as from io.ReadAll, so
// that the handlers answer 413.
func TestReadBodyOverTheLimit(t *testing.T) {
	w := httptest.NewRecorder()
	r := http.MaxBytesReader(w, io.NopCloser(bytes.NewReader(make([]byte, 2000))), 1000)
	_, err := readBody(r, 2000, 1000)
	var mbe *http.MaxBytesError
	if !errors.As(err, &mbe) {
		t.Fatalf("err %v; want *http.MaxBytesError", err)
	}
}

// The bodies clockd holds at once (received, or being received, until
// their request ends) are capped: 1,024 reader slots of 8 MiB bodies would
// otherwise be 8 GiB. Past the budget a request answers 503 at once, and
// the budget comes back when the requests holding it end.
func TestBodiesHeldAreBudgeted(t *testing.T) {
	l := newLimiter(8, 1<<20)
	l.bodyBudget = 1 << 20
	release := make(chan struct{})
	entered := make(chan struct{}, 8)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		l.serve(w, r, 1<<20, func(w http.ResponseWriter, r *http.Request) {
			entered <- struct{}{}
			<-release
			w.WriteHeader(http.StatusOK)
		}, "", true) // no client share: the whole budget
	}))
	defer srv.Close()
	post := func() int {
		resp, err := srv.Client().Post(srv.URL, "application/json", bytes.NewReader(make([]byte, 400<<10)))
		if err != nil {
			t.Error(err)
			return 0
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	first := make(chan int, 1)
	go func() { first <- post() }()
	<-entered // holds its 400 KiB body (and the buffers it grew through)
	if code := post(); code != http.StatusServiceUnavailable {
		t.Errorf("a second 400 KiB body with the first one held: %d, want 503", code)
	}
	close(release)
	if code := <-first; code != http.StatusOK {
		t.Errorf("the first request: %d", code)
	}
	if n := l.bodies.Load(); n != 0 {
		t.Errorf("%d bytes of the budget still taken after every request ended", n)
	}
	if code := post(); code != http.StatusOK {
		t.Errorf("a body once the budget is back: %d, want 200", code)
	}
}

// slowBody is a request body that sends nothing until released.
func slowBody(t *testing.T, method string, n int64) (*http.Request, func()) {
	t.Helper()
	pr, pw := io.Pipe()
	r := httptest.NewRequest(method, "/v1/clocks", pr)
	r.ContentLength = n
	return r, func() { pw.CloseWithError(io.ErrUnexpectedEOF) }
}

// One client holds at most a quarter of the reader slots and of the body
// budget: one client's slow or huge bodies held them all, and every other
// client's creates answered 503 (found by review). A call that takes no
// body (a GET) takes no reader slot at all, and carries at most 1 KiB.
func TestOneClientHoldsAQuarterOfTheReadersAndTheBudget(t *testing.T) {
	l := newLimiter(8, 1<<20) // 32 readers, 8 a client; budget 64 MiB, 16 MiB a client
	ok := func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusOK) }
	var wg sync.WaitGroup
	var releases []func()
	defer func() {
		for _, release := range releases {
			release()
		}
		wg.Wait()
	}()
	serve := func(r *http.Request, client string, body bool) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l.serve(httptest.NewRecorder(), r, 1<<20, ok, client, body)
		}()
	}
	// GETs with slow bodies of client a: no reader slot
	for range 40 {
		r, release := slowBody(t, http.MethodGet, 100)
		releases = append(releases, release)
		serve(r, "a", false)
	}
	// client a's slow creates: a quarter of the readers
	for range 8 {
		r, release := slowBody(t, http.MethodPost, 100)
		releases = append(releases, release)
		serve(r, "a", true)
	}
	waitFor(t, func() bool { return len(l.readers) == 8 }, "8 readers held")
	r, release := slowBody(t, http.MethodPost, 100)
	defer release()
	w := httptest.NewRecorder()
	l.serve(w, r, 1<<20, ok, "a", true)
	if w.Code != http.StatusServiceUnavailable {
		t.Errorf("client a's ninth slow body: %d, want 503 (its share is 8 readers)", w.Code)
	}
	w = httptest.NewRecorder()
	l.serve(w, httptest.NewRequest(http.MethodPost, "/v1/clocks", strings.NewReader(`{}`)), 1<<20, ok, "b", true)
	if w.Code != http.StatusOK {
		t.Errorf("client b's create while a holds its share: %d, want 200", w.Code)
	}
	// the budget: a holds 8 bodies; 16 MiB is its share of 64 MiB
	w = httptest.NewRecorder()
	big := httptest.NewRequest(http.MethodPost, "/v1/clocks/batch", bytes.NewReader(make([]byte, 17<<20)))
	l.serve(w, big, 32<<20, ok, "c", true)
	if w.Code != http.StatusServiceUnavailable {
		t.Errorf("client c's 17 MiB body: %d, want 503 (its share of the budget is 16 MiB)", w.Code)
	}
	w = httptest.NewRecorder()
	l.serve(w, httptest.NewRequest(http.MethodPost, "/v1/clocks/batch", bytes.NewReader(make([]byte, 8<<20))), 32<<20, ok, "d", true)
	if w.Code != http.StatusOK {
		t.Errorf("client d's 8 MiB body: %d, want 200", w.Code)
	}
	// a body of a call that takes none: at most 1 KiB
	w = httptest.NewRecorder()
	var got error
	l.serve(w, httptest.NewRequest(http.MethodDelete, "/v1/clocks/a/b", bytes.NewReader(make([]byte, 4<<10))), 1<<20,
		func(w http.ResponseWriter, r *http.Request) { _, got = io.ReadAll(r.Body) }, "b", false)
	var mbe *http.MaxBytesError
	if !errors.As(got, &mbe) {
		t.Errorf("a 4 KiB body on a call that takes none: read %v, want http.MaxBytesError (413)", got)
	}
	for _, release := range releases {
		release()
	}
	releases = nil
	wg.Wait()
	if n := l.bodies.Load(); n != 0 || len(l.shares) != 0 {
		t.Errorf("after every request: %d bytes of the budget, %d client shares still held", n, len(l.shares))
	}
}

func waitFor(t *testing.T, cond func() bool, what string) {
	t.Helper()
	for end := time.Now().Add(5 * time.Second); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// A body's buffer grows to at most four times what has arrived (plus
// 1 KiB): a client that declares much and sends little holds memory in
// proportion to what it sent (a rule "halfway there, all of it" let it
// reach eight times: found by review). And a body of exactly 4^k × 32 KiB
// (8 MiB) needs no second buffer of its size to see its end: the buffers
// a whole body reserves add up to under 1.7 times its size (the 4× steps
// before the last: 2.3 times for 8 MiB before; found by review).
func TestBodyBuffersGrowInProportion(t *testing.T) {
	for _, c := range []struct{ declared, sent int64 }{
		{8<<20 - 1024, 1 << 20}, {8 << 20, 1 << 20}, {4<<20 - 1024, 512 << 10}, {4<<20 + 512, 512 << 10}, {1 << 20, 100 << 10},
	} {
		var arrived, reserved int64
		worst := 0.0
		_, err := readBodyWithin(&arrivingReader{left: c.sent, cut: true, arrived: &arrived}, c.declared, 8<<20, func(n int64) bool {
			if arrived > 0 {
				worst = max(worst, float64(n-1<<10)/float64(arrived))
			}
			return true
		})
		if err != io.ErrUnexpectedEOF {
			t.Fatalf("declared %d: %v", c.declared, err)
		}
		if worst > 4 {
			t.Errorf("declared %d, %d sent: a buffer of %.1f times what had arrived (plus 1 KiB), want at most 4", c.declared, c.sent, worst)
		}
		arrived = 0
		data, err := readBodyWithin(&arrivingReader{left: c.declared, arrived: &arrived}, c.declared, 8<<20, func(n int64) bool {
			reserved += n
			return true
		})
		if err != nil || int64(len(data)) != c.declared {
			t.Fatalf("declared %d: read %d, %v", c.declared, len(data), err)
		}
		if ratio := float64(reserved) / float64(c.declared); ratio > 1.7 {
			t.Errorf("a whole body of %d bytes reserved %d bytes of buffers (%.2f times), want under 1.7", c.declared, reserved, ratio)
		}
	}
}

// arrivingReader gives left bytes in reads of at most 64 KiB, then
// io.ErrUnexpectedEOF when cut (a client that stopped short), else io.EOF.
type arrivingReader struct {
	left    int64
	cut     bool
	arrived *int64
}

func (r *arrivingReader) Read(b []byte) (int, error) {
	if r.left == 0 {
		if r.cut {
			return 0, io.ErrUnexpectedEOF
		}
		return 0, io.EOF
	}
	n := int(min(int64(len(b)), r.left, 64<<10))
	r.left -= int64(n)
	*r.arrived += int64(n)
	return n, nil
}
