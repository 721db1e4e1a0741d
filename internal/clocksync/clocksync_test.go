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

// world is a fake machine beside a fake MySQL: true time passes (mono, the
// local monotonic clock, runs with it); MySQL's clock and the local wall
// clock are each off true time by their own amount, which a step or a
// drift changes.
type world struct {
	mono     time.Duration // elapsed true time
	mysqlOff time.Duration // MySQL's clock minus true time
	wallOff  time.Duration // the local wall clock minus true time
}

var epoch = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)

func (w *world) mysqlNow() time.Time      { return epoch.Add(w.mono + w.mysqlOff) }
func (w *world) wall() time.Time          { return epoch.Add(w.mono + w.wallOff) }
func (w *world) monotonic() time.Duration { return w.mono }
func (w *world) pass(d time.Duration)     { w.mono += d }

// read takes one reading whose query reaches MySQL rtt/2 after it was sent
// and is answered rtt/2 later.
func (w *world) read(s *Sync, rtt time.Duration) {
	sent := w.mono
	w.pass(rtt / 2)
	db := w.mysqlNow()
	w.pass(rtt - rtt/2)
	s.Observe(sent, w.mono, db, w.wall())
}

// warm takes n quick readings a second apart, as clockd does while MySQL
// answers.
func (w *world) warm(s *Sync, n int) {
	for range n {
		w.read(s, time.Millisecond)
		w.pass(time.Second)
	}
}

// newWorld: the local wall clock is ahead of MySQL's by ahead.
func newWorld(t *testing.T, ahead time.Duration) (*world, *Sync, *bytes.Buffer) {
	t.Helper()
	w := &world{wallOff: ahead}
	var logs bytes.Buffer
	return w, newSync(w.wall, w.monotonic, slog.New(slog.NewTextHandler(&logs, nil)), prometheus.NewRegistry()), &logs
}

// notEarly fails when the ring clock is ahead of MySQL's by more than
// Slack, and when it lags it by more than lag.
func notEarly(t *testing.T, w *world, s *Sync, lag time.Duration, what string) {
	t.Helper()
	db := w.mysqlNow()
	got := s.Now()
	if got.After(db.Add(Slack)) {
		t.Fatalf("%s: the ring clock %s is %s ahead of MySQL's %s (rings that early)", what,
			got.Format(time.TimeOnly+".000000"), got.Sub(db), db.Format(time.TimeOnly+".000000"))
	}
	if db.Sub(got) > lag {
		t.Errorf("%s: the ring clock lags MySQL's by %s, want at most %s", what, db.Sub(got), lag)
	}
}

// Whatever the local wall clock says, ahead or behind, the ring clock is
// MySQL's: never ahead of it, behind it by at most a round trip and the
// drift since the reading; a WARN says the clocks differ, once.
func TestRingClockIsMySQLsWhateverTheLocalClockSays(t *testing.T) {
	for _, ahead := range []time.Duration{0, 3 * time.Millisecond, 2 * time.Second, -3 * time.Second, time.Hour} {
		w, s, logs := newWorld(t, ahead)
		for _, rtt := range []time.Duration{3 * time.Millisecond, 40 * time.Millisecond, 400 * time.Microsecond, 9 * time.Millisecond} {
			w.read(s, rtt)
			for range 5 {
				w.pass(200 * time.Millisecond)
				notEarly(t, w, s, 3*time.Millisecond, "ahead "+ahead.String())
			}
		}
		if s.Local() != w.wall() {
			t.Errorf("Local %s, want the local wall clock %s", s.Local(), w.wall())
		}
		warns := strings.Count(logs.String(), "level=WARN")
		if want := map[bool]int{true: 1, false: 0}[ahead > WarnOffset || ahead < -WarnOffset]; warns != want {
			t.Errorf("ahead %s: %d WARN lines, want %d:\n%s", ahead, warns, want, logs)
		}
	}
}

// An NTP step of the local wall clock, either way, moves nothing: the ring
// clock counts on the monotonic clock from its readings. (A clock behind
// MySQL's, corrected forward and then stepped right, rang early until the
// next reading when the correction was applied to the wall clock.)
func TestWallClockStepsDoNotMoveTheRingClock(t *testing.T) {
	for _, ahead := range []time.Duration{-3 * time.Second, 3 * time.Second} {
		w, s, _ := newWorld(t, ahead)
		w.warm(s, 3)
		w.wallOff = 0 // NTP steps the wall clock right
		for range 5 {
			notEarly(t, w, s, 2*time.Millisecond, "after a step of "+(-ahead).String())
			w.pass(time.Second)
		}
	}
}

// Readings stop (MySQL away) while the clocks drift apart; then the first
// readings back are slow. The old, quick readings widen with their age, so
// they cannot hide the drift: the ring clock stays behind MySQL's.
func TestOldReadingsCannotHideADrift(t *testing.T) {
	w, s, _ := newWorld(t, 0)
	w.warm(s, 8)
	// an hour without a reading, MySQL's clock losing 55 ppm on the
	// monotonic clock: 200 ms
	w.pass(time.Hour)
	w.mysqlOff -= 200 * time.Millisecond
	notEarly(t, w, s, time.Second, "an hour after the last reading")
	for range 3 {
		w.read(s, 500*time.Millisecond)
		notEarly(t, w, s, time.Second, "a slow reading after an hour")
		w.pass(time.Second)
	}
}

// MySQL's own clock stepped back (its host's NTP): the readings from
// before contradict the new one and are dropped at once.
func TestMySQLClockSteppedBack(t *testing.T) {
	w, s, _ := newWorld(t, 0)
	w.warm(s, 4)
	w.mysqlOff -= 2 * time.Second // MySQL's clock two seconds back
	w.read(s, time.Millisecond)
	notEarly(t, w, s, 2*time.Millisecond, "after MySQL's clock stepped back")
}

// No reading yet (MySQL away at start): the local wall clock.
func TestBeforeTheFirstReadingTheLocalClock(t *testing.T) {
	w, s, _ := newWorld(t, time.Second)
	if got := s.Now(); !got.Equal(w.wall()) {
		t.Errorf("Now %s before any reading, want the local clock %s", got, w.wall())
	}
}

// Against the real MariaDB on this machine: the ring clock is never ahead
// of MySQL's nor of the machine's own (they agree here), and lags them by
// no more than a round trip; no WARN.
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
	var logs bytes.Buffer
	s := New(slog.New(slog.NewTextHandler(&logs, nil)), nil)
	for range 3 {
		if err := s.Read(ctx, read); err != nil {
			t.Fatal(err)
		}
	}
	for range 20 {
		now := time.Now()
		got := s.Now()
		if got.After(now.Add(time.Millisecond)) || now.Sub(got) > 20*time.Millisecond {
			t.Fatalf("the ring clock %s against the machine's %s", got, now)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if logs.Len() != 0 {
		t.Errorf("logged against the machine's own MySQL:\n%s", logs.String())
	}
}

// Clocks that agree (MySQL on this machine, or both on NTP) ring by the
// wall clock itself, not a round trip late.
func TestAgreeingClocksRingByTheWallClock(t *testing.T) {
	w, s, logs := newWorld(t, 0)
	for range 5 {
		w.read(s, 400*time.Microsecond)
		w.pass(700 * time.Millisecond)
		if got := s.Now(); !got.Equal(w.wall()) {
			t.Fatalf("the ring clock %s, the wall clock %s: they agree, want the wall clock", got, w.wall())
		}
	}
	if logs.Len() != 0 {
		t.Errorf("logged:\n%s", logs)
	}
}

// MySQL busy for a while (the rings themselves keep it so): every reading
// takes 200 ms. The quick readings from before still bound MySQL's time,
// so the ring clock does not fall 100 ms behind with the slow ones.
func TestSlowReadingsDoNotDragTheRingClockBehind(t *testing.T) {
	w, s, _ := newWorld(t, 5*time.Second) // a wall clock far off, so the bound decides
	for range 3 {
		w.read(s, 300*time.Microsecond)
		w.pass(time.Second)
	}
	for range 30 {
		w.read(s, 200*time.Millisecond)
		w.pass(800 * time.Millisecond)
		notEarly(t, w, s, 10*time.Millisecond, "30 s of slow readings")
	}
}
