package alarm

import (
	"testing"
	"time"
)

// Times are RFC 3339: its offset is hours 00-23 and minutes 00-59, its
// fields have two digits (four for the year), a fraction follows a ".",
// and its "T" and "Z" may be lower case (section 5.6). Before, +24:00
// moved a clock by a day without a word, and "t"/"z" were refused; a
// one-digit hour and a comma before the fraction were taken.
func TestParseRFC3339(t *testing.T) {
	t.Parallel()
	for _, s := range []string{"2030-01-01T10:00:00+24:00", "2030-01-01T10:00:00-24:00", "2030-01-01T10:00:00+23:60",
		"2030-01-01T10:00:00+99:99", "2030-01-01 10:00:00Z", "2030-01-01T10:00:00", "2030-01-01T10:00:00+0100", "",
		"2030-01-01T1:00:00Z", "2030-01-01T10:00:00,5Z", "2030-01-01T10:00:00.Z", "2030-1-01T10:00:00Z",
		"2030-01-01T10:00:00ZZ", "2030-01-01T10:00:00+01:00Z", "2030-01-01X10:00:00Z", "2030-13-01T10:00:00Z",
		"2030-02-30T10:00:00Z", "2030-01-01T24:00:00Z", "+2030-01-01T10:00:00Z", "2030-01-01T10:00:00+1:00",
		"2030-01-01T10:00:00.5+01:0a", "２０３０-01-01T10:00:00Z"} {
		if got, err := ParseRFC3339(s); err == nil {
			t.Errorf("ParseRFC3339(%q) = %v; want an error", s, got.UTC())
		}
	}
	want := time.Date(2030, 1, 1, 10, 0, 0, 0, time.UTC)
	for s, at := range map[string]time.Time{
		"2030-01-01t10:00:00z":                want,
		"2030-01-01T10:00:00z":                want,
		"2030-01-01t10:00:00Z":                want,
		"2030-01-01T10:00:00.000Z":            want,
		"2030-01-01T11:30:00+01:30":           want,
		"2030-01-01T09:00:00-01:00":           want,
		"2030-01-01T23:59:00+23:59":           want.Add(-10 * time.Hour),
		"2030-01-01t10:00:00.123+00:00":       want.Add(123 * time.Millisecond),
		"2030-01-01T10:00:00.123456789Z":      want.Add(123456789 * time.Nanosecond),
		"2030-01-01T10:00:00.5-00:00":         want.Add(500 * time.Millisecond),
		"2029-12-31T23:59:59.999999999Z":      want.Add(-10*time.Hour - time.Nanosecond),
		"2030-01-01T10:00:00.000000000+00:00": want,
	} {
		got, err := ParseRFC3339(s)
		if err != nil || !got.Equal(at) {
			t.Errorf("ParseRFC3339(%q) = %v, %v; want %v", s, got, err, at)
		}
	}
}
