package httpapi

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"testing/iotest"
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
		})
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
