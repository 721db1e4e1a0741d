package schedule

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/robfig/cron/v3"
)

func mustTime(t *testing.T, s string) time.Time {
	t.Helper()
	v, err := time.Parse(time.RFC3339, s)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// walk lists n occurrences after from, as RFC 3339 times in the zone.
func walk(t *testing.T, s *Schedule, from time.Time, n int, zone string) []string {
	t.Helper()
	loc, err := time.LoadLocation(zone)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for range n {
		next, ok := s.Next(from)
		if !ok {
			break
		}
		if !next.After(from) {
			t.Fatalf("Next(%s) = %s: not after", from, next)
		}
		out = append(out, next.In(loc).Format("2006-01-02T15:04:05Z07:00"))
		from = next
	}
	return out
}

func TestCronOccurrences(t *testing.T) {
	tests := []struct {
		name, cron, zone, from string
		want                   []string
	}{
		{"daily at 02:00 Berlin, winter", "0 2 * * *", "Europe/Berlin", "2026-01-10T00:00:00Z",
			[]string{"2026-01-10T02:00:00+01:00", "2026-01-11T02:00:00+01:00"}},
		{"five fields, UTC by default", "*/20 * * * *", "", "2026-01-10T00:05:00Z",
			[]string{"2026-01-10T00:20:00Z", "2026-01-10T00:40:00Z", "2026-01-10T01:00:00Z"}},
		{"optional seconds field", "*/15 * * * * *", "UTC", "2026-01-10T00:00:07Z",
			[]string{"2026-01-10T00:00:15Z", "2026-01-10T00:00:30Z"}},
		{"@daily shortcut in Tokyo", "@daily", "Asia/Tokyo", "2026-01-10T00:00:00Z",
			[]string{"2026-01-11T00:00:00+09:00", "2026-01-12T00:00:00+09:00"}},
		{"weekdays at 09:30 New York", "30 9 * * MON-FRI", "America/New_York", "2026-01-09T15:00:00Z",
			[]string{"2026-01-12T09:30:00-05:00", "2026-01-13T09:30:00-05:00"}},
		// clocks go forward 02:00 -> 03:00 on 2026-03-29: 02:30 does not
		// exist and rings once, at the change
		{"Berlin spring forward: skipped hour rings once", "30 2 * * *", "Europe/Berlin", "2026-03-28T12:00:00Z",
			[]string{"2026-03-29T03:00:00+02:00", "2026-03-30T02:30:00+02:00"}},
		{"Berlin spring forward: every 15 min of the skipped hour collapse to one", "*/15 2 * * *", "Europe/Berlin", "2026-03-28T12:00:00Z",
			[]string{"2026-03-29T03:00:00+02:00", "2026-03-30T02:00:00+02:00"}},
		// clocks go back 03:00 -> 02:00 on 2026-10-25: 02:30 happens twice
		// and rings once, the first time
		{"Berlin fall back: repeated hour rings once", "30 2 * * *", "Europe/Berlin", "2026-10-24T12:00:00Z",
			[]string{"2026-10-25T02:30:00+02:00", "2026-10-26T02:30:00+01:00"}},
		{"Berlin fall back: the hour's quarter hours ring once each", "*/30 2 * * *", "Europe/Berlin", "2026-10-24T12:00:00Z",
			[]string{"2026-10-25T02:00:00+02:00", "2026-10-25T02:30:00+02:00", "2026-10-26T02:00:00+01:00"}},
		{"New York spring forward (2026-03-08)", "30 2 * * *", "America/New_York", "2026-03-07T12:00:00Z",
			[]string{"2026-03-08T03:00:00-04:00", "2026-03-09T02:30:00-04:00"}},
		{"New York fall back (2026-11-01)", "30 1 * * *", "America/New_York", "2026-10-31T12:00:00Z",
			[]string{"2026-11-01T01:30:00-04:00", "2026-11-02T01:30:00-05:00"}},
		// southern hemisphere: Sydney goes back 03:00 -> 02:00 on 2026-04-05
		{"Sydney fall back", "30 2 * * *", "Australia/Sydney", "2026-04-04T00:00:00Z",
			[]string{"2026-04-05T02:30:00+11:00", "2026-04-06T02:30:00+10:00"}},
		// an every-hour expression runs in real time: each real hour rings
		{"hourly across fall back runs each real hour", "30 * * * *", "Europe/Berlin", "2026-10-24T23:40:00Z",
			[]string{"2026-10-25T02:30:00+02:00", "2026-10-25T02:30:00+01:00", "2026-10-25T03:30:00+01:00"}},
		{"hourly across spring forward", "30 * * * *", "Europe/Berlin", "2026-03-28T23:40:00Z",
			[]string{"2026-03-29T01:30:00+01:00", "2026-03-29T03:30:00+02:00"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := Parse(Spec{Cron: tt.cron, TimeZone: tt.zone})
			if err != nil {
				t.Fatal(err)
			}
			zone := tt.zone
			if zone == "" {
				zone = "UTC"
			}
			got := walk(t, s, mustTime(t, tt.from), len(tt.want), zone)
			if strings.Join(got, " ") != strings.Join(tt.want, " ") {
				t.Errorf("occurrences\n got %v\nwant %v", got, tt.want)
			}
		})
	}
}

func TestIntervalStartEndFirst(t *testing.T) {
	start := mustTime(t, "2026-01-10T10:00:00Z")
	s := MustParse(Spec{Every: 30 * time.Second, Start: start, End: start.Add(90 * time.Second)})
	got := walk(t, s, start.Add(-time.Hour), 10, "UTC")
	want := []string{"2026-01-10T10:00:00Z", "2026-01-10T10:00:30Z", "2026-01-10T10:01:00Z", "2026-01-10T10:01:30Z"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("got %v, want %v (end is inclusive, nothing after it)", got, want)
	}
	// an interval is real time: a DST change does not move it
	if first, _ := s.First(start.Add(10 * time.Second)); !first.Equal(start.Add(30 * time.Second)) {
		t.Errorf("First = %s", first)
	}
	if first, _ := s.First(start); !first.Equal(start) {
		t.Errorf("First at an occurrence = %s, want it", first)
	}
	// a cron schedule with a start in the future begins there
	c := MustParse(Spec{Cron: "0 * * * *", Start: mustTime(t, "2026-02-01T05:30:00Z")})
	if first, _ := c.First(start); !first.Equal(mustTime(t, "2026-02-01T06:00:00Z")) {
		t.Errorf("cron First with start = %s", first)
	}
	// nothing matches: Feb 30th
	never := MustParse(Spec{Cron: "0 0 30 2 *"})
	if _, ok := never.First(start); ok {
		t.Error("0 0 30 2 * has an occurrence")
	}
}

// After a simulated outage of 10 minutes of a one-minute schedule.
func TestMisfire(t *testing.T) {
	occ := mustTime(t, "2026-01-10T10:00:00Z")
	back := occ.Add(10*time.Minute + 30*time.Second) // clockd back at 10:10:30
	tests := []struct {
		name string
		spec Spec
		// the rings after the late ring of occ, as After gives them while
		// each rings at once (at `back`)
		want []string
	}{
		{"skip: once now, then the next future one", Spec{Cron: "* * * * *"},
			[]string{"10:11:00"}},
		{"catch_up: each missed one, at most the limit (the latest)", Spec{Cron: "* * * * *", Misfire: MisfireCatchUp, CatchUpLimit: 3},
			[]string{"10:08:00", "10:09:00", "10:10:00", "10:11:00"}},
		{"catch_up: the missed ones past their deadline are left out", Spec{Cron: "* * * * *", Misfire: MisfireCatchUp, CatchUpLimit: 10, OccurrenceDeadline: 90 * time.Second},
			[]string{"10:09:00", "10:10:00", "10:11:00"}},
		{"catch_up with an interval", Spec{Every: time.Minute, Start: occ, Misfire: MisfireCatchUp, CatchUpLimit: 2},
			[]string{"10:09:00", "10:10:00", "10:11:00"}},
		{"max_occurrences ends it", Spec{Cron: "* * * * *", Misfire: MisfireCatchUp, MaxOccurrences: 3},
			[]string{"10:01:00", "10:02:00"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := MustParse(tt.spec)
			var got []string
			cur, rung := occ, 1
			for range 20 {
				next, ok := s.After(cur, back, rung)
				if !ok {
					break
				}
				got = append(got, next.Format("15:04:05"))
				if next.After(back) {
					break // a future one: rung on time
				}
				cur, rung = next, rung+1
			}
			if strings.Join(got, " ") != strings.Join(tt.want, " ") {
				t.Errorf("got %v, want %v", got, tt.want)
			}
		})
	}
	// on time, the misfire rule changes nothing
	s := MustParse(Spec{Cron: "* * * * *"})
	if next, _ := s.After(occ, occ.Add(5*time.Millisecond), 1); !next.Equal(occ.Add(time.Minute)) {
		t.Errorf("on time: next %s", next)
	}
}

func TestParseRefuses(t *testing.T) {
	start := mustTime(t, "2026-01-10T10:00:00Z")
	tests := []struct {
		spec  Spec
		field string
	}{
		{Spec{}, "schedule"},
		{Spec{Cron: "* * * * *", Every: time.Minute, Start: start}, "schedule"},
		{Spec{Cron: "61 * * * *"}, "cron"},
		{Spec{Cron: "* * *"}, "cron"},
		{Spec{Cron: "TZ=Europe/Berlin 0 2 * * *"}, "cron"},
		{Spec{Cron: "@every 1m"}, "cron"},
		{Spec{Cron: "0 2 * * *", TimeZone: "Mars/Olympus"}, "time_zone"},
		{Spec{Cron: "0 2 * * *", TimeZone: "Local"}, "time_zone"},
		{Spec{Every: 500 * time.Millisecond, Start: start}, "every"},
		{Spec{Every: time.Minute, Start: start, TimeZone: "UTC"}, "time_zone"},
		{Spec{Cron: "* * * * *", Misfire: "later"}, "misfire"},
		{Spec{Cron: "* * * * *", CatchUpLimit: -1}, "catch_up_limit"},
		{Spec{Cron: "* * * * *", MaxOccurrences: -1}, "max_occurrences"},
		{Spec{Cron: "* * * * *", OccurrenceDeadline: -time.Second}, "occurrence_deadline"},
		// kept in milliseconds: 2.5ms answered as such and stored as 2ms
		// made an identical retry conflict (found by review)
		{Spec{Cron: "* * * * *", OccurrenceDeadline: 2500 * time.Microsecond}, "occurrence_deadline"},
		{Spec{Cron: "* * * * *", Start: start, End: start.Add(-time.Second)}, "end"},
	}
	for _, tt := range tests {
		_, err := Parse(tt.spec)
		var se *Error
		if !errors.As(err, &se) || se.Field != tt.field {
			t.Errorf("Parse(%+v) = %v, want an error of field %s", tt.spec, err, tt.field)
		}
	}
	s := MustParse(Spec{Cron: " 0 2 * * * "})
	if sp := s.Spec(); sp.Cron != "0 2 * * *" || sp.TimeZone != "UTC" || sp.Misfire != MisfireSkip || sp.CatchUpLimit != DefaultCatchUpLimit {
		t.Errorf("defaults: %+v", sp)
	}
}

func TestUpcoming(t *testing.T) {
	s := MustParse(Spec{Cron: "0 2 * * *", TimeZone: "Europe/Berlin", End: mustTime(t, "2026-01-12T12:00:00Z")})
	cur := mustTime(t, "2026-01-10T01:00:00Z")
	got := s.Upcoming(cur, 5)
	if len(got) != 3 || !got[0].Equal(cur) || !got[2].Equal(mustTime(t, "2026-01-12T01:00:00Z")) {
		t.Errorf("Upcoming = %v", got)
	}
}

// TestRealTimeMatchesAMinuteByMinuteScan: an expression whose hour field is
// "*" runs in real time: its occurrences are the instants whose local time
// in the zone matches. Next is checked against a scan of every minute
// around each of 2026's changes in zones that change at midnight (Beirut,
// Havana, Santiago, the Azores), by half an hour (Lord Howe), at odd
// offsets (Chatham, Tehran, Casablanca) and as most do. In Asia/Beirut,
// whose clocks go forward at 00:00, "0 * * * 0" skipped that Sunday's 23
// hours (found by review).
func TestRealTimeMatchesAMinuteByMinuteScan(t *testing.T) {
	zones := []string{"Asia/Beirut", "America/Havana", "America/Santiago", "Atlantic/Azores", "Australia/Lord_Howe",
		"Pacific/Chatham", "Asia/Tehran", "Africa/Casablanca", "Europe/Berlin", "America/New_York"}
	exprs := []string{"0 * * * *", "30 * * * *", "*/20 * * * *", "0 * * * 0", "0 * * * 6", "15 * 1,29 * *", "45 * * * 1-5"}
	const starBit = 1 << 63
	for _, zone := range zones {
		loc, err := time.LoadLocation(zone)
		if err != nil {
			t.Fatal(err)
		}
		// the zone's changes in 2026
		var changes []time.Time
		for at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC); at.Year() == 2026; {
			_, end := at.In(loc).ZoneBounds()
			if end.IsZero() || end.Year() != 2026 {
				break
			}
			changes = append(changes, end)
			at = end
		}
		for _, expr := range exprs {
			s := MustParse(Spec{Cron: expr, TimeZone: zone})
			if s.wall {
				t.Fatalf("%q is not real time", expr)
			}
			spec := s.cron.(*cron.SpecSchedule)
			matches := func(u time.Time) bool {
				l := u.In(loc)
				dom := 1<<uint(l.Day())&spec.Dom > 0
				dow := 1<<uint(l.Weekday())&spec.Dow > 0
				day := dom || dow
				if spec.Dom&starBit > 0 || spec.Dow&starBit > 0 {
					day = dom && dow
				}
				return l.Second() == 0 && 1<<uint(l.Minute())&spec.Minute > 0 && 1<<uint(l.Hour())&spec.Hour > 0 &&
					1<<uint(l.Month())&spec.Month > 0 && day
			}
			for _, c := range changes {
				from, to := c.Add(-8*24*time.Hour), c.Add(8*24*time.Hour)
				var want []time.Time
				for u := from.Add(time.Minute).Truncate(time.Minute); !u.After(to); u = u.Add(time.Minute) {
					if matches(u) {
						want = append(want, u)
					}
				}
				cur := from
				for i, w := range want {
					got, ok := s.Next(cur)
					if !ok || !got.Equal(w) {
						t.Fatalf("%s %q around the change at %s: occurrence %d after %s is %s, want %s",
							zone, expr, c.In(loc), i, cur.In(loc), got.In(loc), w.In(loc))
					}
					cur = got
				}
			}
		}
	}
}

// TestCatchUpAfterALongOutage: catch_up rings the latest catch_up_limit
// missed occurrences also after an outage of more than 100,000 of them
// (a 1 s interval or a per-second cron down for 30 h): After walked from
// the oldest missed one, gave up after 100,000 and skipped them all
// (found by review). Fewer missed than the limit, they all ring; the
// deadline still leaves the older ones out.
func TestCatchUpAfterALongOutage(t *testing.T) {
	occ := mustTime(t, "2026-01-10T10:00:00Z")
	back := occ.Add(30*time.Hour + 500*time.Millisecond)
	for _, tt := range []struct {
		spec Spec
		now  time.Time
		want time.Time
	}{
		{Spec{Every: time.Second, Start: occ, Misfire: MisfireCatchUp, CatchUpLimit: 3}, back, back.Add(-2500 * time.Millisecond)},
		{Spec{Cron: "* * * * * *", Misfire: MisfireCatchUp, CatchUpLimit: 3}, back, back.Add(-2500 * time.Millisecond)},
		{Spec{Cron: "* * * * * *", Misfire: MisfireCatchUp, CatchUpLimit: MaxCatchUpLimit}, back, back.Add(-(MaxCatchUpLimit*time.Second - 500*time.Millisecond))},
		{Spec{Cron: "0 0 * * *", Misfire: MisfireCatchUp, CatchUpLimit: 10}, occ.Add(72 * time.Hour), mustTime(t, "2026-01-11T00:00:00Z")},
		{Spec{Cron: "0 0 1 * *", Misfire: MisfireCatchUp, CatchUpLimit: 2}, mustTime(t, "2027-03-15T00:00:00Z"), mustTime(t, "2027-02-01T00:00:00Z")},
		{Spec{Every: time.Second, Start: occ, Misfire: MisfireCatchUp, CatchUpLimit: 10, OccurrenceDeadline: 4 * time.Second}, back, back.Add(-3500 * time.Millisecond)},
	} {
		next, ok := MustParse(tt.spec).After(occ, tt.now, 1)
		if !ok || !next.Equal(tt.want) {
			t.Errorf("%+v, back at %s: next %s (ok %v), want %s", tt.spec, tt.now.Format(time.RFC3339Nano),
				next.Format(time.RFC3339Nano), ok, tt.want.Format(time.RFC3339Nano))
		}
	}
}
