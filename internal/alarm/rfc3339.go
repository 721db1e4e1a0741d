package alarm

import (
	"errors"
	"fmt"
	"time"
)

// ParseRFC3339 parses an RFC 3339 date-time (section 5.6), as every time
// clockd is given: YYYY-MM-DDTHH:MM:SS, an optional fraction after a ".",
// and "Z" or an offset ±hh:mm within ±23:59; "T" and "Z" may be lower
// case. Go's time.Parse alone is laxer: it takes +24:00 as a day's offset
// (moving the time a day without a word), a one-digit hour, or a comma
// before the fraction.
func ParseRFC3339(s string) (time.Time, error) {
	b := []byte(s)
	if !rfc3339Shape(b) {
		return time.Time{}, errors.New("not of the form 2026-01-01T10:30:00.000Z")
	}
	b[10] &^= 0x20 // t -> T
	n := len(b)
	if b[n-1] == 'z' {
		b[n-1] = 'Z'
	}
	t, err := time.Parse(time.RFC3339Nano, string(b))
	if err != nil {
		return time.Time{}, err
	}
	if b[n-1] != 'Z' {
		if hh, mm := int(b[n-5]-'0')*10+int(b[n-4]-'0'), int(b[n-2]-'0')*10+int(b[n-1]-'0'); hh > 23 || mm > 59 {
			return time.Time{}, fmt.Errorf("offset %s out of range", b[n-6:])
		}
	}
	return t, nil
}

// rfc3339Shape reports whether b has the characters of an RFC 3339
// date-time in their places (the values are time.Parse's to check).
func rfc3339Shape(b []byte) bool {
	digit := func(i int) bool { return i < len(b) && b[i] >= '0' && b[i] <= '9' }
	const form = "dddd-dd-ddTdd:dd:dd"
	if len(b) < len(form)+1 {
		return false
	}
	for i := range len(form) {
		switch c := form[i]; c {
		case 'd':
			if !digit(i) {
				return false
			}
		case 'T':
			if b[i] != 'T' && b[i] != 't' {
				return false
			}
		default:
			if b[i] != c {
				return false
			}
		}
	}
	i := len(form)
	if b[i] == '.' {
		i++
		if !digit(i) {
			return false
		}
		for digit(i) {
			i++
		}
	}
	switch rest := b[i:]; {
	case len(rest) == 1:
		return rest[0] == 'Z' || rest[0] == 'z'
	case len(rest) == 6:
		return (rest[0] == '+' || rest[0] == '-') && digit(i+1) && digit(i+2) && rest[3] == ':' && digit(i+4) && digit(i+5)
	}
	return false
}
