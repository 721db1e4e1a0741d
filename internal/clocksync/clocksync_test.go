package clocksync

import (
	"bytes"
	"context"
	"database/sql"
	"log/slog"
	"strings"
	"testing"
	"time"

	_ "github.com/go-sql-driver/mysql"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/clockd/clockd/internal/testenv"
)

// fakeLocal is a local clock that tests move by hand.
type fakeLocal struct{ t time.Time }

func (f *fakeLocal) now() time.Time { return f.t }

// reading is one reading of MySQL's clock, whose time is db at the moment
// the query reaches it: sent rtt/2 before by the local clock, answered
// rtt/2 after. ahead is how far the local clock is ahead of MySQL's.
func reading(s *Sync, local *fakeLocal, ahead, rtt time.Duration) {
	t0 := local.t
	db := t0.Add(rtt / 2).Add(-ahead)
	local.t = t0.Add(rtt)
	s.Observe(t0, db, local.t)
}

func newSync(t *testing.T, local *fakeLocal) (*Sync, *bytes.Buffer) {
	t.Helper()
	var logs bytes.Buffer
	return New(local.now, slog.New(slog.NewTextHandler(&logs, nil)), prometheus.NewRegistry()), &logs
}

// An instance whose clock runs ahead of MySQL's rings by MySQL's clock:
// its Now is never ahead of MySQL's time, and behind it by at most the
// round trip; a WARN says so once.
func TestAheadClockIsMovedBackNeverPastMySQL(t *testing.T) {
	for _, ahead := range []time.Duration{2 * time.Second, 50 * time.Millisecond, 11 * time.Millisecond, time.Hour} {
		local := &fakeLocal{t: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)}
		s, logs := newSync(t, local)
		for _, rtt := range []time.Duration{3 * time.Millisecond, 40 * time.Millisecond, 400 * time.Microsecond, 9 * time.Millisecond} {
			reading(s, local, ahead, rtt)
			local.t = local.t.Add(5 * time.Second)
			dbNow := local.t.Add(-ahead)
			if got := s.Now(); got.After(dbNow.Add(Tolerance)) {
				t.Fatalf("ahead %s, rtt %s: Now %s is after MySQL's time %s by more than the tolerance", ahead, rtt, got, dbNow)
			}
			// at most the round trip of the tightest reading so far behind
			if lag := dbNow.Sub(s.Now()); lag > rtt && lag > 3*time.Millisecond {
				t.Errorf("ahead %s, after a reading with rtt %s: Now lags MySQL's time by %s", ahead, rtt, lag)
			}
		}
		if s.Local() != local.t {
			t.Errorf("Local %s, want the local clock %s", s.Local(), local.t)
		}
		if n := strings.Count(logs.String(), "level=WARN"); n != 1 {
			t.Errorf("ahead %s: %d WARN lines, want 1:\n%s", ahead, n, logs)
		}
	}
}

// A clock behind MySQL's is moved forward, but only as far as MySQL's
// time surely is: never past it.
func TestBehindClockIsMovedForwardNeverPastMySQL(t *testing.T) {
	local := &fakeLocal{t: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)}
	s, _ := newSync(t, local)
	behind := 3 * time.Second
	for range 5 {
		reading(s, local, -behind, 2*time.Millisecond)
		dbNow := local.t.Add(behind)
		if got := s.Now(); got.After(dbNow) || dbNow.Sub(got) > 2*time.Millisecond {
			t.Fatalf("Now %s, MySQL's time %s", got, dbNow)
		}
	}
}

// Clocks that agree within the tolerance are left alone: no correction, no
// log. A slow reading alone cannot tell, and is taken at its worst (never
// early) until a quicker one bounds the offset.
func TestAgreeingClocksAreLeftAlone(t *testing.T) {
	local := &fakeLocal{t: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)}
	s, logs := newSync(t, local)
	for _, c := range []struct{ ahead, rtt time.Duration }{
		{0, time.Millisecond}, {3 * time.Millisecond, time.Millisecond}, {-5 * time.Millisecond, 2 * time.Millisecond},
		{8 * time.Millisecond, time.Millisecond},
	} {
		reading(s, local, c.ahead, c.rtt)
		if got := s.Correction(); got != 0 {
			t.Errorf("ahead %s, rtt %s: correction %s, want none", c.ahead, c.rtt, got)
		}
		s.samples = nil
	}
	if logs.Len() != 0 {
		t.Errorf("logged:\n%s", logs)
	}
	reading(s, local, 2*time.Millisecond, 200*time.Millisecond)
	if got := s.Correction(); got < 100*time.Millisecond {
		t.Errorf("after one reading of 200 ms: correction %s, want its upper bound", got)
	}
	reading(s, local, 2*time.Millisecond, time.Millisecond)
	if got := s.Correction(); got != 0 {
		t.Errorf("after a quick reading: correction %s, want none", got)
	}
}

// A local clock stepped (NTP, a VM resumed) makes the readings disagree:
// the newest one counts at once, not the old tight ones.
func TestSteppedClockIsFollowedAtOnce(t *testing.T) {
	local := &fakeLocal{t: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)}
	s, logs := newSync(t, local)
	for range 7 {
		reading(s, local, 0, 100*time.Microsecond)
	}
	local.t = local.t.Add(2 * time.Second) // stepped ahead
	reading(s, local, 2*time.Second, 5*time.Millisecond)
	dbNow := local.t.Add(-2 * time.Second)
	if got := s.Now(); got.After(dbNow) {
		t.Fatalf("after a 2 s step: Now %s is after MySQL's time %s (correction %s)", got, dbNow, s.Correction())
	}
	// and back once the clock is set right
	local.t = local.t.Add(-2 * time.Second)
	reading(s, local, 0, 100*time.Microsecond)
	if got := s.Correction(); got != 0 {
		t.Errorf("after the clock was set right: correction %s", got)
	}
	if !strings.Contains(logs.String(), "agrees with MySQL's again") {
		t.Errorf("no line that the clocks agree again:\n%s", logs)
	}
}

// Against the real MariaDB: a local clock 3 s ahead (shifted here, as the
// process's own cannot be) is corrected to within the round trip, and the
// real one, on the same machine as MySQL, is left alone.
func TestReadsMySQLClock(t *testing.T) {
	db, err := sql.Open("mysql", testenv.ServerDSN())
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	read := func(ctx context.Context) (time.Time, error) {
		var us int64
		err := db.QueryRowContext(ctx, "SELECT CAST(UNIX_TIMESTAMP(NOW(6)) * 1000000 AS SIGNED)").Scan(&us)
		return time.UnixMicro(us), err
	}
	ctx := context.Background()
	real := New(nil, nil, nil)
	shifted := New(func() time.Time { return time.Now().Add(3 * time.Second) }, nil, nil)
	for range 3 {
		if err := real.Read(ctx, read); err != nil {
			t.Fatal(err)
		}
		if err := shifted.Read(ctx, read); err != nil {
			t.Fatal(err)
		}
	}
	if c := real.Correction(); c != 0 {
		t.Errorf("the machine's own clock against its MySQL: correction %s, want none", c)
	}
	if c := shifted.Correction(); c < 3*time.Second || c > 3*time.Second+50*time.Millisecond {
		t.Errorf("a clock 3 s ahead: correction %s, want 3 s and at most the round trip more", c)
	}
	if d := shifted.Now().Sub(time.Now()); d > 0 {
		t.Errorf("the corrected clock is %s ahead of the real one", d)
	}
}
