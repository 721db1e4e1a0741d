package httpapi_test

import (
	"encoding/json"
	"errors"
	"regexp"
	"strings"
	"testing"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/clockd/clockd/internal/alarm"
	"github.com/clockd/clockd/internal/httpapi"
)

var applicationRE = regexp.MustCompile(`^[A-Za-z0-9._-]{1,64}$`)

// FuzzDecodeCreate feeds arbitrary bodies to the create decoder. It must
// never panic, every refusal must be a field error, and whatever it accepts
// is checked again here, independently, against the SPEC's rules.
func FuzzDecodeCreate(f *testing.F) {
	for _, s := range []string{
		`{"application":"order","business_id":"o-123","payload":"{\"order\":123}","ring_at":"2026-01-01T10:30:00.000Z"}`,
		`{"application":"order","business_id":"o-123","delay":"30m"}`,
		`{"application":"order","business_id":"o-123","delay":1800000,"max_attempts":3}`,
		`{"application":"a.b_c-D","business_id":"订单 #1","payload":"","content_type":"text/plain","ring_at":"2026-01-01T12:30:00+02:00","latest_ring_at":"2026-01-02T00:00:00Z"}`,
		`{"application":"order","business_id":"o-1","ring_at":"2020-01-01T00:00:00Z"}`,
		`{"application":"order","business_id":"o-1","delay":"0s","latest_ring_at":null,"content_type":null,"payload":null}`,
		`{"application":"order","business_id":"o-1","delay":"1h","latest_ring_at":"2026-01-01T10:59:59.999Z"}`,
		`{"application":"order","business_id":"o-1","ring_at":"2026-01-01T10:30:00Z","delay":"1m"}`,
		`{"application":"order","business_id":"o-1"}`,
		`{"application":"order","business_id":"o/1","delay":"1m"}`,
		`{"application":"or der","business_id":"o-1","delay":"1m"}`,
		`{"application":"order","business_id":"o-1 ","delay":"1m"}`,
		`{"application":"order","business_id":"o\u0000","delay":"1m"}`,
		`{"application":"order","business_id":"o-1","delay":"-1m"}`,
		`{"application":"order","business_id":"o-1","delay":-5}`,
		`{"application":"order","business_id":"o-1","delay":1e3}`,
		`{"application":"order","business_id":"o-1","delay":"1m","max_attempts":-1}`,
		`{"application":"order","business_id":"o-1","delay":"1m","Delay":"2m"}`,
		`{"application":"order","business_id":"o-1","delay":"1m","delay":"2m"}`,
		`{"application":"order","business_id":"o-1","ring_at":"9999-12-31T23:59:59Z"}`,
		`{"application":"order","business_id":"o-1","ring_at":"1969-12-31T23:59:59Z"}`,
		`{"application":"order","business_id":"o-1","delay":"1m","extra":true}`,
		`{"application":"order","business_id":"o-1","delay":"1m"} {}`,
		`{"application":"order","business_id":"\ud800","delay":"1m"}`,
		`{"application":"order","business_id":"\udcff","delay":"1m"}`,
		`{"application":"order","business_id":"\ud83d\ude00","delay":"1m","payload":"\ufffd"}`,
		"{\"application\":\"order\",\"business_id\":\"col\xff\",\"delay\":\"1m\"}",
		"{\"application\":\"order\",\"business_id\":\"o-1\",\"delay\":\"1m\",\"payload\":\"x\xc3\x28y\"}",
		`{"application":"order","business_id":"o-1","ring_at":"2026-01-01T10:30:00.000000001Z","latest_ring_at":"2026-01-01T10:30:00.000999Z"}`,
		`{"application":"order","business_id":"o-1","delay":"1.5ms"}`,
		`{"application":"order","business_id":"o-1","delay":"1m","payload":"` + strings.Repeat("x", 1025) + `"}`,
		`[]`, `null`, `{}`, `"x"`, ``, `{`, `{"application":`,
	} {
		f.Add([]byte(s))
	}
	now := time.Date(2026, 1, 1, 10, 0, 0, 123456789, time.UTC)
	lim := alarm.Limits{MaxPayloadBytes: 1024} // small, so that the fuzzer reaches it
	known := map[string]bool{"application": true, "business_id": true, "payload": true, "content_type": true,
		"ring_at": true, "delay": true, "latest_ring_at": true, "max_attempts": true}

	strFields := []string{"application", "business_id", "payload", "content_type", "ring_at", "delay", "latest_ring_at"}

	f.Fuzz(func(t *testing.T, data []byte) {
		n, err := httpapi.DecodeCreate(data, now, lim)
		if err != nil {
			var fe *alarm.FieldError
			if !errors.As(err, &fe) || fe.Field == "" || fe.Message == "" {
				t.Fatalf("refusal %v (%T) is not a field error naming a field", err, err)
			}
			// A refusal for UTF-8 names a field whose string really is not
			// valid UTF-8 text.
			var m map[string]json.RawMessage
			if strings.Contains(fe.Message, "UTF-8") && json.Unmarshal(data, &m) == nil && fe.Field != "body" {
				if raw, ok := m[fe.Field]; ok && httpapi.ValidJSONText(string(raw)) {
					t.Fatalf("refused %s = %s as not UTF-8 text", fe.Field, raw)
				}
			}
			if !errors.Is(err, alarm.ErrInvalid) && !errors.Is(err, alarm.ErrTooLarge) {
				t.Fatalf("refusal %v is neither invalid nor too large", err)
			}
			if n != (alarm.NewClock{}) {
				t.Fatalf("refusal came with a clock %+v", n)
			}
			return
		}

		// Accepted: check it all again, independently.
		var m map[string]json.RawMessage
		if err := json.Unmarshal(data, &m); err != nil || m == nil {
			t.Fatalf("accepted %q, which is not a JSON object: %v", data, err)
		}
		for k := range m {
			if !known[k] {
				t.Fatalf("accepted unknown field %q", k)
			}
		}
		// Every string accepted is valid UTF-8 text: encoding/json would
		// have replaced invalid bytes and lone surrogate escapes by U+FFFD.
		for _, f := range strFields {
			if raw, ok := m[f]; ok && len(raw) > 0 && raw[0] == '"' && !httpapi.ValidJSONText(string(raw)) {
				t.Fatalf("accepted %s = %s, which is not valid UTF-8 text", f, raw)
			}
		}
		str := func(field string) (string, bool) {
			raw, ok := m[field]
			if !ok || string(raw) == "null" {
				return "", false
			}
			var s string
			if err := json.Unmarshal(raw, &s); err != nil {
				t.Fatalf("accepted %s = %s, not a string", field, raw)
			}
			return s, true
		}
		tm := func(field string) (time.Time, bool) {
			s, ok := str(field)
			if !ok {
				return time.Time{}, false
			}
			v, err := time.Parse(time.RFC3339Nano, s)
			if err != nil {
				t.Fatalf("accepted %s = %q: %v", field, s, err)
			}
			return v.UTC(), true
		}
		// whole milliseconds: ring times up (never early), latest_ring_at down (never after)
		up := func(v time.Time) time.Time {
			if d := v.Truncate(time.Millisecond); !d.Equal(v) {
				return d.Add(time.Millisecond)
			}
			return v
		}

		app, _ := str("application")
		if !applicationRE.MatchString(app) || n.Application != app {
			t.Fatalf("accepted application %q (clock has %q)", app, n.Application)
		}
		bid, _ := str("business_id")
		if n.BusinessID != bid || !utf8.ValidString(bid) || strings.ContainsRune(bid, '/') ||
			strings.HasSuffix(bid, " ") {
			t.Fatalf("accepted business_id %q (clock has %q)", bid, n.BusinessID)
		}
		if c := utf8.RuneCountInString(bid); c < 1 || c > 128 {
			t.Fatalf("accepted business_id of %d characters", c)
		}
		for _, r := range bid {
			if !unicode.IsPrint(r) {
				t.Fatalf("accepted business_id %q with non-printable %U", bid, r)
			}
		}
		payload, _ := str("payload")
		if n.Payload != payload || len(payload) > lim.MaxPayloadBytes {
			t.Fatalf("accepted payload of %d bytes (clock has %d)", len(payload), len(n.Payload))
		}
		ct, ok := str("content_type")
		if !ok {
			ct = alarm.DefaultContentType
		}
		if n.ContentType != ct || ct == "" {
			t.Fatalf("accepted content_type %q (clock has %q)", ct, n.ContentType)
		}

		_, hasAt := m["ring_at"]
		_, hasDelay := m["delay"]
		if hasAt == hasDelay {
			t.Fatalf("accepted a body with ring_at present=%v and delay present=%v", hasAt, hasDelay)
		}
		if hasAt {
			at, ok := tm("ring_at")
			if !ok || n.ByDelay || !n.RingAt.Equal(up(at)) {
				t.Fatalf("ring_at %v, clock has %v (by delay %v)", at, n.RingAt, n.ByDelay)
			}
		} else {
			if !n.ByDelay || n.Delay < 0 || !n.RingAt.Equal(up(now.Add(n.Delay))) {
				t.Fatalf("delay %s gave ring_at %v (by delay %v, delay %v)", m["delay"], n.RingAt, n.ByDelay, n.Delay)
			}
		}
		if n.RingAt.Location() != time.UTC || !n.RingAt.Equal(n.RingAt.Truncate(time.Millisecond)) ||
			n.RingAt.Before(time.Unix(0, 0)) || n.RingAt.Year() > 9999 {
			t.Fatalf("ring_at %v is not a UTC millisecond time between 1970 and 9999", n.RingAt)
		}

		if latest, ok := tm("latest_ring_at"); ok {
			if !n.LatestRingAt.Equal(latest.Truncate(time.Millisecond)) || n.LatestRingAt.Before(n.RingAt) || !n.LatestRingAt.After(now) {
				t.Fatalf("accepted latest_ring_at %v with ring_at %v at %v", n.LatestRingAt, n.RingAt, now)
			}
		} else if !n.LatestRingAt.IsZero() {
			t.Fatalf("latest_ring_at %v without one in the body", n.LatestRingAt)
		}

		if n.MaxAttempts < 0 {
			t.Fatalf("accepted max_attempts %d", n.MaxAttempts)
		}
		if raw, ok := m["max_attempts"]; ok {
			var v int
			if err := json.Unmarshal(raw, &v); err != nil || v != n.MaxAttempts {
				t.Fatalf("max_attempts %s became %d", raw, n.MaxAttempts)
			}
		} else if n.MaxAttempts != 0 {
			t.Fatalf("max_attempts %d without one in the body", n.MaxAttempts)
		}
	})
}
