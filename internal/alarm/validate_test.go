package alarm_test

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/clockd/clockd/internal/alarm"
)

var (
	now   = time.Date(2026, 1, 1, 10, 0, 0, 123456789, time.UTC) // sub-millisecond on purpose
	nowMS = now.Truncate(time.Millisecond)
	lim   = alarm.Limits{MaxPayloadBytes: 64 << 10}
)

func ptr[T any](v T) *T { return &v }

// wantFieldErr checks err is a FieldError of field matching kind.
func wantFieldErr(t *testing.T, err error, field string, kind error) {
	t.Helper()
	if err == nil {
		t.Fatalf("no error, want an error naming %q", field)
	}
	var fe *alarm.FieldError
	if !errors.As(err, &fe) {
		t.Fatalf("error %v (%T) is not a *alarm.FieldError", err, err)
	}
	if fe.Field != field {
		t.Errorf("error %q names field %q, want %q", err, fe.Field, field)
	}
	if !strings.HasPrefix(err.Error(), field+": ") {
		t.Errorf("error text %q does not start with the field %q", err, field)
	}
	if !errors.Is(err, kind) {
		t.Errorf("errors.Is(%v, %v) = false", err, kind)
	}
	other := alarm.ErrTooLarge
	if kind == alarm.ErrTooLarge {
		other = alarm.ErrInvalid
	}
	if errors.Is(err, other) {
		t.Errorf("errors.Is(%v, %v) = true, want only %v", err, other, kind)
	}
}

func TestCheckApplication(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		in   string
		ok   bool
	}{
		{"simple", "order", true},
		{"every allowed class", "Order.v2_eu-West9", true},
		{"one char", "a", true},
		{"dots only", "...", true},
		{"64 chars", strings.Repeat("a", 64), true},
		{"65 chars", strings.Repeat("a", 65), false},
		{"empty", "", false},
		{"slash", "a/b", false},
		{"space", "a b", false},
		{"leading space", " a", false},
		{"trailing space", "a ", false},
		{"colon", "a:b", false},
		{"plus", "a+b", false},
		{"multibyte", "ordér", false},
		{"NUL", "a\x00", false},
		{"newline", "a\n", false},
		{"tab", "a\tb", false},
		{"DEL", "a\x7f", false},
		{"invalid UTF-8", "a\xff", false},
		{"64 multibyte runes", strings.Repeat("é", 32), false},
		{"dot", ".", false},         // a URL path cannot carry "." or ".."
		{"dot dot", "..", false},    // as a segment: clients and servers
		{"three dots", "...", true}, // remove them
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := alarm.CheckApplication(tt.in)
			if tt.ok {
				if err != nil {
					t.Fatalf("CheckApplication(%q) = %v, want nil", tt.in, err)
				}
				return
			}
			wantFieldErr(t, err, "application", alarm.ErrInvalid)
		})
	}
}

func TestCheckBusinessID(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		in   string
		ok   bool
	}{
		{"simple", "o-123", true},
		{"one char", "x", true},
		{"128 ASCII", strings.Repeat("x", 128), true},
		{"129 ASCII", strings.Repeat("x", 129), false},
		{"128 two-byte runes", strings.Repeat("é", 128), true}, // 256 bytes, 128 characters
		{"129 two-byte runes", strings.Repeat("é", 129), false},
		{"128 three-byte runes", strings.Repeat("日", 128), true},
		{"128 runes with a four-byte emoji", strings.Repeat("x", 127) + "😀", true},
		{"129 runes with a four-byte emoji", strings.Repeat("x", 128) + "😀", false},
		{"inner space", "order 123", true},
		{"leading space", " o-1", true},
		{"punctuation", `o:1?a=b&c#d%20"'\`, true},
		{"empty", "", false},
		{"slash", "o/1", false},
		{"only slash", "/", false},
		{"dot", ".", false},
		{"dot dot", "..", false},
		{"three dots", "...", true},
		{"dot dot inside", "a..b", true},
		{"trailing space", "o-1 ", false}, // MySQL PAD SPACE collations make "o-1 " equal to "o-1"
		{"only spaces", "   ", false},
		{"NUL", "o\x00", false},
		{"control char", "o\x01", false},
		{"newline", "o\n1", false},
		{"tab", "o\t1", false},
		{"DEL", "o\x7f", false},
		{"C1 control", "o\u0085", false},
		{"no-break space", "o\u00a0", false},
		{"zero-width space", "o\u200b", false},
		{"invalid UTF-8", "o\xff", false},
		{"truncated UTF-8", "o\xc3", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := alarm.CheckBusinessID(tt.in)
			if tt.ok {
				if err != nil {
					t.Fatalf("CheckBusinessID(%q) = %v, want nil", tt.in, err)
				}
				return
			}
			wantFieldErr(t, err, "business_id", alarm.ErrInvalid)
		})
	}
}

func TestCheckKey(t *testing.T) {
	t.Parallel()
	if err := alarm.CheckKey(alarm.Key{Application: "order", BusinessID: "o-1"}); err != nil {
		t.Fatalf("CheckKey: %v", err)
	}
	wantFieldErr(t, alarm.CheckKey(alarm.Key{Application: "", BusinessID: "o-1"}), "application", alarm.ErrInvalid)
	wantFieldErr(t, alarm.CheckKey(alarm.Key{Application: "order", BusinessID: ""}), "business_id", alarm.ErrInvalid)
	if got := (alarm.Key{Application: "a", BusinessID: "b"}).String(); got != "a/b" {
		t.Errorf("Key.String() = %q", got)
	}
}

func TestCreateInputValidate(t *testing.T) {
	t.Parallel()
	future := now.Add(time.Hour)
	futureMS := future.Truncate(time.Millisecond)
	futureUp := futureMS.Add(time.Millisecond) // ring times round up
	base := func() alarm.CreateInput {
		return alarm.CreateInput{Application: "order", BusinessID: "o-1", Payload: ptr(`{"order":1}`),
			When: alarm.When{At: &future, AtSet: true}}
	}
	tests := []struct {
		name  string
		edit  func(*alarm.CreateInput)
		field string // "" = valid
		kind  error
		check func(t *testing.T, n alarm.NewClock)
	}{
		{name: "ring_at", edit: func(*alarm.CreateInput) {}, check: func(t *testing.T, n alarm.NewClock) {
			want := alarm.NewClock{Application: "order", BusinessID: "o-1", Payload: `{"order":1}`,
				ContentType: alarm.DefaultContentType, RingAt: futureUp}
			if n != want {
				t.Errorf("got %+v\nwant %+v", n, want)
			}
		}},
		{name: "ring_at in another zone becomes UTC", edit: func(in *alarm.CreateInput) {
			at := time.Date(2026, 1, 1, 13, 0, 0, 0, time.FixedZone("X", 2*3600))
			in.When.At = &at
		}, check: func(t *testing.T, n alarm.NewClock) {
			if n.RingAt != time.Date(2026, 1, 1, 11, 0, 0, 0, time.UTC) || n.RingAt.Location() != time.UTC {
				t.Errorf("RingAt = %v", n.RingAt)
			}
		}},
		{name: "ring_at in the past is allowed", edit: func(in *alarm.CreateInput) {
			in.When.At = ptr(now.Add(-24 * time.Hour))
		}, check: func(t *testing.T, n alarm.NewClock) {
			if !n.RingAt.Equal(nowMS.Add(-24*time.Hour + time.Millisecond)) {
				t.Errorf("RingAt = %v", n.RingAt)
			}
		}},
		{name: "delay", edit: func(in *alarm.CreateInput) {
			in.When = alarm.When{Delay: ptr(30 * time.Minute), DelaySet: true}
		}, check: func(t *testing.T, n alarm.NewClock) {
			if !n.ByDelay || n.Delay != 30*time.Minute || !n.RingAt.Equal(nowMS.Add(30*time.Minute+time.Millisecond)) {
				t.Errorf("got ByDelay=%v Delay=%v RingAt=%v", n.ByDelay, n.Delay, n.RingAt)
			}
		}},
		{name: "zero delay", edit: func(in *alarm.CreateInput) {
			in.When = alarm.When{Delay: ptr(time.Duration(0)), DelaySet: true}
		}, check: func(t *testing.T, n alarm.NewClock) {
			if want := nowMS.Add(time.Millisecond); !n.RingAt.Equal(want) { // now, rounded up
				t.Errorf("RingAt = %v, want %v", n.RingAt, want)
			}
		}},
		{name: "no payload is empty", edit: func(in *alarm.CreateInput) { in.Payload = nil }, check: func(t *testing.T, n alarm.NewClock) {
			if n.Payload != "" {
				t.Errorf("Payload = %q", n.Payload)
			}
		}},
		{name: "payload at the limit", edit: func(in *alarm.CreateInput) { in.Payload = ptr(strings.Repeat("p", 64<<10)) }},
		{name: "payload one byte over", edit: func(in *alarm.CreateInput) { in.Payload = ptr(strings.Repeat("p", 64<<10+1)) },
			field: "payload", kind: alarm.ErrTooLarge},
		{name: "payload limit counts bytes", edit: func(in *alarm.CreateInput) { in.Payload = ptr(strings.Repeat("é", 32<<10+1)) },
			field: "payload", kind: alarm.ErrTooLarge},
		{name: "content_type", edit: func(in *alarm.CreateInput) { in.ContentType = ptr("text/plain; charset=utf-8") },
			check: func(t *testing.T, n alarm.NewClock) {
				if n.ContentType != "text/plain; charset=utf-8" {
					t.Errorf("ContentType = %q", n.ContentType)
				}
			}},
		{name: "content_type empty", edit: func(in *alarm.CreateInput) { in.ContentType = ptr("") }, field: "content_type", kind: alarm.ErrInvalid},
		{name: "content_type 255", edit: func(in *alarm.CreateInput) { in.ContentType = ptr(strings.Repeat("t", 255)) }},
		{name: "content_type 256", edit: func(in *alarm.CreateInput) { in.ContentType = ptr(strings.Repeat("t", 256)) }, field: "content_type", kind: alarm.ErrInvalid},
		{name: "content_type non-ASCII", edit: func(in *alarm.CreateInput) { in.ContentType = ptr("text/é") }, field: "content_type", kind: alarm.ErrInvalid},
		{name: "content_type control", edit: func(in *alarm.CreateInput) { in.ContentType = ptr("text/plain\n") }, field: "content_type", kind: alarm.ErrInvalid},
		{name: "missing application", edit: func(in *alarm.CreateInput) { in.Application = "" }, field: "application", kind: alarm.ErrInvalid},
		{name: "bad business_id", edit: func(in *alarm.CreateInput) { in.BusinessID = "a/b" }, field: "business_id", kind: alarm.ErrInvalid},
		{name: "neither ring_at nor delay", edit: func(in *alarm.CreateInput) { in.When = alarm.When{} }, field: "ring_at", kind: alarm.ErrInvalid},
		{name: "both ring_at and delay", edit: func(in *alarm.CreateInput) {
			in.When = alarm.When{At: &future, AtSet: true, Delay: ptr(time.Minute), DelaySet: true}
		}, field: "ring_at", kind: alarm.ErrInvalid},
		{name: "ring_at null", edit: func(in *alarm.CreateInput) { in.When = alarm.When{AtSet: true} }, field: "ring_at", kind: alarm.ErrInvalid},
		{name: "delay null", edit: func(in *alarm.CreateInput) { in.When = alarm.When{DelaySet: true} }, field: "delay", kind: alarm.ErrInvalid},
		{name: "negative delay", edit: func(in *alarm.CreateInput) {
			in.When = alarm.When{Delay: ptr(-time.Millisecond), DelaySet: true}
		}, field: "delay", kind: alarm.ErrInvalid},
		{name: "ring_at before 1970", edit: func(in *alarm.CreateInput) {
			in.When.At = ptr(time.Date(1969, 12, 31, 23, 59, 59, 0, time.UTC))
		}, field: "ring_at", kind: alarm.ErrInvalid},
		{name: "ring_at after 9999", edit: func(in *alarm.CreateInput) {
			in.When.At = ptr(time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC))
		}, field: "ring_at", kind: alarm.ErrInvalid},
		{name: "latest_ring_at after ring_at", edit: func(in *alarm.CreateInput) { in.LatestRingAt = ptr(future.Add(time.Minute)) },
			check: func(t *testing.T, n alarm.NewClock) {
				if !n.LatestRingAt.Equal(future.Add(time.Minute).Truncate(time.Millisecond)) {
					t.Errorf("LatestRingAt = %v", n.LatestRingAt)
				}
			}},
		{name: "latest_ring_at equal to ring_at", edit: func(in *alarm.CreateInput) {
			in.When.At, in.LatestRingAt = ptr(futureMS), ptr(futureMS)
		}},
		{name: "latest_ring_at the millisecond after ring_at", edit: func(in *alarm.CreateInput) {
			in.LatestRingAt = ptr(futureUp) // ring_at rounds up to it
		}},
		// No whole millisecond lies between them: the clock could ring
		// neither at ring_at nor after it and before latest_ring_at.
		{name: "latest_ring_at equal to ring_at with sub-millisecond digits", edit: func(in *alarm.CreateInput) {
			in.LatestRingAt = ptr(future)
		}, field: "latest_ring_at", kind: alarm.ErrInvalid},
		{name: "latest_ring_at after ring_at within the millisecond", edit: func(in *alarm.CreateInput) {
			in.LatestRingAt = ptr(future.Add(time.Microsecond))
		}, field: "latest_ring_at", kind: alarm.ErrInvalid},
		{name: "latest_ring_at before ring_at", edit: func(in *alarm.CreateInput) { in.LatestRingAt = ptr(future.Add(-time.Millisecond)) },
			field: "latest_ring_at", kind: alarm.ErrInvalid},
		{name: "latest_ring_at already past", edit: func(in *alarm.CreateInput) {
			in.When.At = ptr(now.Add(-time.Hour))
			in.LatestRingAt = ptr(now.Add(-time.Minute))
		}, field: "latest_ring_at", kind: alarm.ErrInvalid},
		{name: "latest_ring_at is now", edit: func(in *alarm.CreateInput) {
			in.When.At = ptr(now.Add(-time.Hour))
			in.LatestRingAt = ptr(nowMS)
		}, field: "latest_ring_at", kind: alarm.ErrInvalid},
		{name: "latest_ring_at before delay", edit: func(in *alarm.CreateInput) {
			in.When = alarm.When{Delay: ptr(time.Hour), DelaySet: true}
			in.LatestRingAt = ptr(now.Add(time.Minute))
		}, field: "latest_ring_at", kind: alarm.ErrInvalid},
		{name: "latest_ring_at after 9999", edit: func(in *alarm.CreateInput) {
			in.LatestRingAt = ptr(time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC))
		}, field: "latest_ring_at", kind: alarm.ErrInvalid},
		{name: "max_attempts", edit: func(in *alarm.CreateInput) { in.MaxAttempts = ptr(5) }, check: func(t *testing.T, n alarm.NewClock) {
			if n.MaxAttempts != 5 {
				t.Errorf("MaxAttempts = %d", n.MaxAttempts)
			}
		}},
		{name: "max_attempts zero", edit: func(in *alarm.CreateInput) { in.MaxAttempts = ptr(0) }},
		{name: "max_attempts MaxInt32", edit: func(in *alarm.CreateInput) { in.MaxAttempts = ptr(math.MaxInt32) }},
		{name: "max_attempts over MaxInt32", edit: func(in *alarm.CreateInput) { in.MaxAttempts = ptr(math.MaxInt32 + 1) },
			field: "max_attempts", kind: alarm.ErrInvalid},
		{name: "negative max_attempts", edit: func(in *alarm.CreateInput) { in.MaxAttempts = ptr(-1) }, field: "max_attempts", kind: alarm.ErrInvalid},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := base()
			tt.edit(&in)
			n, err := in.Validate(now, lim)
			if tt.field != "" {
				wantFieldErr(t, err, tt.field, tt.kind)
				if n != (alarm.NewClock{}) {
					t.Errorf("refused input returned %+v", n)
				}
				return
			}
			if err != nil {
				t.Fatalf("Validate: %v", err)
			}
			if n.RingAt.Location() != time.UTC || n.RingAt != n.RingAt.Truncate(time.Millisecond) {
				t.Errorf("RingAt %v is not UTC whole milliseconds", n.RingAt)
			}
			if tt.check != nil {
				tt.check(t, n)
			}
		})
	}
}

func TestPatchInput(t *testing.T) {
	t.Parallel()
	ringAt := nowMS.Add(time.Hour)
	cur := alarm.Clock{ID: 7, Application: "order", BusinessID: "o-1", Payload: "old", ContentType: "application/json",
		RingAt: ringAt, MaxAttempts: 3, Status: alarm.StatusPending, NextTryAt: ringAt,
		CreatedAt: nowMS.Add(-time.Hour), UpdatedAt: nowMS.Add(-time.Hour)}
	withLatest := cur
	withLatest.LatestRingAt = ringAt.Add(time.Hour)

	tests := []struct {
		name  string
		cur   alarm.Clock
		p     alarm.PatchInput
		field string // "" = valid
		kind  error
		want  func(c alarm.Clock) alarm.Clock // expected result from the current clock
	}{
		{name: "empty", cur: cur, p: alarm.PatchInput{}, field: "body", kind: alarm.ErrInvalid},
		{name: "ring_at", cur: cur, p: alarm.PatchInput{When: alarm.When{At: ptr(ringAt.Add(time.Hour)), AtSet: true}},
			want: func(c alarm.Clock) alarm.Clock {
				c.RingAt, c.NextTryAt = ringAt.Add(time.Hour), ringAt.Add(time.Hour)
				return c
			}},
		{name: "ring_at in the past is due now", cur: cur, p: alarm.PatchInput{When: alarm.When{At: ptr(now.Add(-time.Hour)), AtSet: true}},
			want: func(c alarm.Clock) alarm.Clock {
				c.RingAt, c.NextTryAt = nowMS.Add(-time.Hour+time.Millisecond), nowMS
				return c
			}},
		{name: "delay", cur: cur, p: alarm.PatchInput{When: alarm.When{Delay: ptr(2 * time.Hour), DelaySet: true}},
			want: func(c alarm.Clock) alarm.Clock {
				c.RingAt = nowMS.Add(2*time.Hour + time.Millisecond)
				c.NextTryAt = c.RingAt
				return c
			}},
		{name: "payload keeps the time", cur: cur, p: alarm.PatchInput{Payload: ptr("new")},
			want: func(c alarm.Clock) alarm.Clock { c.Payload = "new"; return c }},
		{name: "empty payload", cur: cur, p: alarm.PatchInput{Payload: ptr("")},
			want: func(c alarm.Clock) alarm.Clock { c.Payload = ""; return c }},
		{name: "max_attempts", cur: cur, p: alarm.PatchInput{MaxAttempts: ptr(0)},
			want: func(c alarm.Clock) alarm.Clock { c.MaxAttempts = 0; return c }},
		{name: "latest_ring_at set", cur: cur, p: alarm.PatchInput{LatestSet: true, LatestRingAt: ptr(ringAt.Add(time.Minute))},
			want: func(c alarm.Clock) alarm.Clock { c.LatestRingAt = ringAt.Add(time.Minute); return c }},
		{name: "latest_ring_at null clears", cur: withLatest, p: alarm.PatchInput{LatestSet: true},
			want: func(c alarm.Clock) alarm.Clock { c.LatestRingAt = time.Time{}; return c }},
		{name: "latest_ring_at before ring_at", cur: cur, p: alarm.PatchInput{LatestSet: true, LatestRingAt: ptr(ringAt.Add(-time.Minute))},
			field: "latest_ring_at", kind: alarm.ErrInvalid},
		{name: "latest_ring_at already past", cur: cur, p: alarm.PatchInput{
			When:      alarm.When{At: ptr(now.Add(-time.Hour)), AtSet: true},
			LatestSet: true, LatestRingAt: ptr(now.Add(-time.Minute))}, field: "latest_ring_at", kind: alarm.ErrInvalid},
		{name: "ring_at moved past the existing latest_ring_at", cur: withLatest,
			p:     alarm.PatchInput{When: alarm.When{At: ptr(withLatest.LatestRingAt.Add(time.Second)), AtSet: true}},
			field: "latest_ring_at", kind: alarm.ErrInvalid},
		{name: "ring_at and latest_ring_at moved together", cur: withLatest, p: alarm.PatchInput{
			When:      alarm.When{At: ptr(ringAt.Add(5 * time.Hour)), AtSet: true},
			LatestSet: true, LatestRingAt: ptr(ringAt.Add(6 * time.Hour))},
			want: func(c alarm.Clock) alarm.Clock {
				c.RingAt, c.NextTryAt, c.LatestRingAt = ringAt.Add(5*time.Hour), ringAt.Add(5*time.Hour), ringAt.Add(6*time.Hour)
				return c
			}},
		{name: "both ring_at and delay", cur: cur, p: alarm.PatchInput{When: alarm.When{At: &ringAt, AtSet: true, Delay: ptr(time.Minute), DelaySet: true}},
			field: "ring_at", kind: alarm.ErrInvalid},
		{name: "ring_at null", cur: cur, p: alarm.PatchInput{When: alarm.When{AtSet: true}}, field: "ring_at", kind: alarm.ErrInvalid},
		{name: "negative delay", cur: cur, p: alarm.PatchInput{When: alarm.When{Delay: ptr(-time.Second), DelaySet: true}},
			field: "delay", kind: alarm.ErrInvalid},
		{name: "negative max_attempts", cur: cur, p: alarm.PatchInput{MaxAttempts: ptr(-1)}, field: "max_attempts", kind: alarm.ErrInvalid},
		{name: "payload over the limit", cur: cur, p: alarm.PatchInput{Payload: ptr(strings.Repeat("p", 64<<10+1))},
			field: "payload", kind: alarm.ErrTooLarge},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			checkErr := tt.p.Check(now, lim)
			got, err := tt.p.Apply(tt.cur, now, lim)
			if tt.field != "" {
				wantFieldErr(t, err, tt.field, tt.kind)
				// What Check can see without the clock it must refuse too.
				if tt.field != "latest_ring_at" {
					wantFieldErr(t, checkErr, tt.field, tt.kind)
				}
				return
			}
			if checkErr != nil {
				t.Fatalf("Check: %v", checkErr)
			}
			if err != nil {
				t.Fatalf("Apply: %v", err)
			}
			want := tt.want(tt.cur)
			want.UpdatedAt = now
			if got != want {
				t.Errorf("Apply:\n got %+v\nwant %+v", got, want)
			}
		})
	}
}

func TestNewClockSame(t *testing.T) {
	t.Parallel()
	created := nowMS
	ex := alarm.Clock{ID: 1, Application: "a", BusinessID: "b", Payload: "p", ContentType: "application/json",
		RingAt: created.Add(30 * time.Minute), MaxAttempts: 2, LatestRingAt: created.Add(time.Hour),
		Status: alarm.StatusRung, CreatedAt: created}
	same := alarm.NewClock{Application: "a", BusinessID: "b", Payload: "p", ContentType: "application/json",
		RingAt: ex.RingAt, MaxAttempts: 2, LatestRingAt: ex.LatestRingAt}
	byDelay := same
	byDelay.ByDelay, byDelay.Delay = true, 30*time.Minute
	byDelay.RingAt = created.Add(5 * time.Hour).Add(30 * time.Minute) // a retry five hours later

	tests := []struct {
		name string
		edit func(n *alarm.NewClock)
		from alarm.NewClock
		want bool
	}{
		{"identical", func(*alarm.NewClock) {}, same, true},
		{"other payload", func(n *alarm.NewClock) { n.Payload = "q" }, same, false},
		{"payload differs in case", func(n *alarm.NewClock) { n.Payload = "P" }, same, false},
		{"other content_type", func(n *alarm.NewClock) { n.ContentType = "text/plain" }, same, false},
		{"other ring_at", func(n *alarm.NewClock) { n.RingAt = n.RingAt.Add(time.Millisecond) }, same, false},
		{"same ring_at in another zone", func(n *alarm.NewClock) { n.RingAt = n.RingAt.In(time.FixedZone("X", 3600)) }, same, true},
		{"no latest_ring_at", func(n *alarm.NewClock) { n.LatestRingAt = time.Time{} }, same, false},
		{"other latest_ring_at", func(n *alarm.NewClock) { n.LatestRingAt = n.LatestRingAt.Add(time.Second) }, same, false},
		{"other max_attempts", func(n *alarm.NewClock) { n.MaxAttempts = 0 }, same, false},
		{"same delay retried later", func(*alarm.NewClock) {}, byDelay, true},
		// created_at keeps milliseconds: the create may have run up to 1 ms
		// after it, so a delay up to 1 ms shorter can have given this ring time
		{"delay shorter by less than a millisecond", func(n *alarm.NewClock) { n.Delay -= 999 * time.Microsecond }, byDelay, true},
		{"delay one millisecond shorter", func(n *alarm.NewClock) { n.Delay -= time.Millisecond }, byDelay, true},
		{"delay longer by a microsecond", func(n *alarm.NewClock) { n.Delay += time.Microsecond }, byDelay, false},
		{"delay one millisecond longer", func(n *alarm.NewClock) { n.Delay += time.Millisecond }, byDelay, false},
		{"delay two milliseconds shorter", func(n *alarm.NewClock) { n.Delay -= 2 * time.Millisecond }, byDelay, false},
		{"other delay", func(n *alarm.NewClock) { n.Delay = 31 * time.Minute }, byDelay, false},
		{"same delay, other payload", func(n *alarm.NewClock) { n.Payload = "q" }, byDelay, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n := tt.from
			tt.edit(&n)
			if got := n.Same(ex); got != tt.want {
				t.Errorf("Same = %v, want %v\nnew %+v\nexisting %+v", got, tt.want, n, ex)
			}
		})
	}
}

// A ring time is never before the instant asked for, to the nanosecond:
// ring_at and now+delay round up to the next whole millisecond (the
// precision of the store), in a create and in a reschedule; latest_ring_at
// ("never after") rounds down.
func TestRingTimeRoundsUp(t *testing.T) {
	t.Parallel()
	base := time.Date(2026, 1, 1, 10, 0, 0, 0, time.UTC)
	tests := []struct {
		name   string
		now    time.Time // when the request is validated
		at     *time.Time
		delay  *time.Duration
		latest *time.Time
		want   time.Time // the ring time
		wantL  time.Time // the latest ring time
	}{
		{name: "ring_at on a millisecond stays", now: base, at: ptr(base.Add(time.Hour)), want: base.Add(time.Hour)},
		{name: "ring_at 1 ns past a millisecond", now: base, at: ptr(base.Add(time.Hour + time.Nanosecond)),
			want: base.Add(time.Hour + time.Millisecond)},
		{name: "ring_at 1 µs past a millisecond", now: base, at: ptr(base.Add(time.Hour + time.Microsecond)),
			want: base.Add(time.Hour + time.Millisecond)},
		{name: "ring_at 0.999999 ms past a millisecond", now: base, at: ptr(base.Add(time.Hour + 999999)),
			want: base.Add(time.Hour + time.Millisecond)},
		{name: "ring_at in another zone, sub-millisecond", now: base,
			at:   ptr(base.Add(time.Hour + 500*time.Microsecond).In(time.FixedZone("X", -5*3600))),
			want: base.Add(time.Hour + time.Millisecond)},
		{name: "ring_at in the past rounds up too", now: base, at: ptr(base.Add(-time.Hour - time.Microsecond)),
			want: base.Add(-time.Hour)},
		{name: "delay from a whole millisecond", now: base, delay: ptr(30 * time.Minute), want: base.Add(30 * time.Minute)},
		{name: "delay from a sub-millisecond now", now: base.Add(123456 * time.Nanosecond), delay: ptr(30 * time.Minute),
			want: base.Add(30*time.Minute + time.Millisecond)},
		{name: "sub-millisecond delay", now: base, delay: ptr(1500 * time.Microsecond), want: base.Add(2 * time.Millisecond)},
		{name: "zero delay at a sub-millisecond now", now: base.Add(time.Nanosecond), delay: ptr(time.Duration(0)),
			want: base.Add(time.Millisecond)},
		{name: "latest_ring_at rounds down", now: base, at: ptr(base.Add(time.Hour)),
			latest: ptr(base.Add(2*time.Hour + 999*time.Microsecond)), want: base.Add(time.Hour), wantL: base.Add(2 * time.Hour)},
		{name: "ring_at up and latest_ring_at down meet", now: base, at: ptr(base.Add(time.Hour - 500*time.Microsecond)),
			latest: ptr(base.Add(time.Hour + 500*time.Microsecond)), want: base.Add(time.Hour), wantL: base.Add(time.Hour)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := alarm.When{At: tt.at, AtSet: tt.at != nil, Delay: tt.delay, DelaySet: tt.delay != nil}
			asked := tt.now.Add(0)
			if tt.at != nil {
				asked = *tt.at
			} else {
				asked = tt.now.Add(*tt.delay)
			}
			in := alarm.CreateInput{Application: "a", BusinessID: "b", When: w, LatestRingAt: tt.latest}
			n, err := in.Validate(tt.now, lim)
			if err != nil {
				t.Fatalf("Validate: %v", err)
			}
			if !n.RingAt.Equal(tt.want) || n.RingAt.Location() != time.UTC {
				t.Errorf("create: RingAt = %v, want %v", n.RingAt, tt.want)
			}
			if n.RingAt.Before(asked) || n.RingAt.Sub(asked) >= time.Millisecond {
				t.Errorf("create: RingAt %v is not the first whole millisecond at or after %v", n.RingAt, asked)
			}
			if !n.LatestRingAt.Equal(tt.wantL) {
				t.Errorf("create: LatestRingAt = %v, want %v", n.LatestRingAt, tt.wantL)
			}

			cur := alarm.Clock{ID: 1, Application: "a", BusinessID: "b", Status: alarm.StatusPending,
				RingAt: base.Add(9 * time.Hour), NextTryAt: base.Add(9 * time.Hour)}
			p := alarm.PatchInput{When: w, LatestRingAt: tt.latest, LatestSet: tt.latest != nil}
			c, err := p.Apply(cur, tt.now, lim)
			if err != nil {
				t.Fatalf("Apply: %v", err)
			}
			if !c.RingAt.Equal(tt.want) {
				t.Errorf("reschedule: RingAt = %v, want %v", c.RingAt, tt.want)
			}
			if !c.LatestRingAt.Equal(tt.wantL) {
				t.Errorf("reschedule: LatestRingAt = %v, want %v", c.LatestRingAt, tt.wantL)
			}
			if c.NextTryAt.Before(asked) && !c.NextTryAt.Equal(alarm.DueAt(c.RingAt, tt.now)) {
				t.Errorf("reschedule: NextTryAt %v before %v", c.NextTryAt, asked)
			}
		})
	}
}

// An identical retry of a create given as a delay finds the clock that
// create made the same, whatever the sub-millisecond digits of either
// moment and of the delay; a retry with another delay does not.
func TestSameRetryOfDelayCreate(t *testing.T) {
	t.Parallel()
	base := time.Date(2026, 1, 1, 10, 0, 0, 0, time.UTC)
	subMS := []time.Duration{0, time.Nanosecond, 1234 * time.Nanosecond, 500 * time.Microsecond, 999999}
	delays := []time.Duration{0, time.Millisecond, 30 * time.Minute, 30*time.Minute + time.Nanosecond,
		30*time.Minute + 500*time.Microsecond, 30*time.Minute + 999999, 7 * 24 * time.Hour}
	for _, d := range delays {
		for _, f := range subMS {
			created := base.Add(f)
			in := alarm.CreateInput{Application: "a", BusinessID: "b", Payload: ptr("p"),
				When: alarm.When{Delay: ptr(d), DelaySet: true}}
			n, err := in.Validate(created, lim)
			if err != nil {
				t.Fatal(err)
			}
			// the clock as the store keeps it: created_at in whole milliseconds
			ex := alarm.Clock{ID: 1, Application: "a", BusinessID: "b", Payload: "p", ContentType: n.ContentType,
				RingAt: n.RingAt, Status: alarm.StatusPending, CreatedAt: created.Truncate(time.Millisecond)}
			for _, later := range []time.Duration{0, time.Microsecond, 5*time.Hour + 777*time.Microsecond} {
				retryAt := created.Add(later)
				tests := []struct {
					name  string
					delay time.Duration
					want  bool
				}{
					{"the same delay", d, true},
					// created_at keeps whole milliseconds, so delays that
					// differ by less than 2 ms can be indistinguishable;
					// from 2 ms on they are told apart
					{"a delay 2 ms longer", d + 2*time.Millisecond, false},
					{"a delay 2 ms shorter", d - 2*time.Millisecond, false},
					{"a delay 1 s longer", d + time.Second, false},
				}
				for _, tt := range tests {
					if tt.delay < 0 {
						continue
					}
					retry := in
					retry.When = alarm.When{Delay: ptr(tt.delay), DelaySet: true}
					rn, err := retry.Validate(retryAt, lim)
					if err != nil {
						t.Fatal(err)
					}
					if got := rn.Same(ex); got != tt.want {
						t.Errorf("delay %v created at +%v (ring %v), retried %v later with %s: Same = %v, want %v",
							d, f, ex.RingAt.Format("15:04:05.000000000"), later, tt.name, got, tt.want)
					}
				}
			}
		}
	}
}

func TestShardOf(t *testing.T) {
	t.Parallel()
	// Pinned values: the shard is stored in every row, so the hash must never change.
	pinned := []struct {
		app, id string
		n, want int
	}{
		{"order", "o-123", 32, 29},
		{"order", "o-123", 4096, 1149},
		{"a", "b", 7, 0},
		{"order", "o-123", 1, 0},
	}
	for _, p := range pinned {
		if got := alarm.ShardOf(p.app, p.id, p.n); got != p.want {
			t.Errorf("ShardOf(%q, %q, %d) = %d, want %d", p.app, p.id, p.n, got, p.want)
		}
	}
	// The separator keeps ("ab","c") and ("a","bc") apart.
	if alarm.ShardOf("ab", "c", 4096) == alarm.ShardOf("a", "bc", 4096) {
		t.Errorf("ShardOf ignores where application ends")
	}
	for _, n := range []int{1, 2, 7, 32, 4096} {
		counts := make([]int, n)
		const keys = 20000
		for i := 0; i < keys; i++ {
			id := "o-" + strings.Repeat("x", i%5) + itoa(i)
			s := alarm.ShardOf("order", id, n)
			if s < 0 || s >= n {
				t.Fatalf("ShardOf(.., %d) = %d, out of range", n, s)
			}
			if again := alarm.ShardOf("order", id, n); again != s {
				t.Fatalf("ShardOf not stable: %d then %d", s, again)
			}
			counts[s]++
		}
		if n <= 32 {
			for s, c := range counts {
				if expect := keys / n; c < expect/2 || c > expect*3/2 {
					t.Errorf("n=%d: shard %d got %d of %d keys; the spread is uneven", n, s, c, keys)
				}
			}
		}
	}
}

func itoa(i int) string {
	if i == 0 {
		return "0"
	}
	var b []byte
	for ; i > 0; i /= 10 {
		b = append([]byte{byte('0' + i%10)}, b...)
	}
	return string(b)
}

func TestDueAt(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		ringAt time.Time
		want   time.Time
	}{
		{"future", nowMS.Add(time.Minute), nowMS.Add(time.Minute)},
		{"now", nowMS, nowMS},
		{"one millisecond ago", nowMS.Add(-time.Millisecond), nowMS},
		{"long ago", time.Unix(0, 0).UTC(), nowMS},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := alarm.DueAt(tt.ringAt, now)
			if !got.Equal(tt.want) {
				t.Errorf("DueAt(%v, %v) = %v, want %v", tt.ringAt, now, got, tt.want)
			}
			if got != got.Truncate(time.Millisecond) {
				t.Errorf("DueAt = %v has sub-millisecond digits", got)
			}
		})
	}
	// now in another zone still gives UTC.
	if got := alarm.DueAt(time.Time{}, now.In(time.FixedZone("X", 3600))); got.Location() != time.UTC {
		t.Errorf("DueAt location = %v, want UTC", got.Location())
	}
}

func TestStatusValid(t *testing.T) {
	t.Parallel()
	for _, s := range []alarm.Status{alarm.StatusPending, alarm.StatusFiring, alarm.StatusRung,
		alarm.StatusCancelled, alarm.StatusExpired, alarm.StatusDead} {
		if !s.Valid() {
			t.Errorf("%q not valid", s)
		}
	}
	for _, s := range []alarm.Status{"", "PENDING", "done", "pending "} {
		if s.Valid() {
			t.Errorf("%q valid", s)
		}
	}
}

func TestErrors(t *testing.T) {
	t.Parallel()
	fe := &alarm.FieldError{Field: "x", Message: "bad"}
	if !errors.Is(fe, alarm.ErrInvalid) || errors.Is(fe, alarm.ErrTooLarge) {
		t.Errorf("FieldError without Kind must be ErrInvalid only")
	}
	ce := &alarm.ConflictError{Message: "it is rung"}
	if !errors.Is(ce, alarm.ErrConflict) || errors.Is(ce, alarm.ErrNotFound) || ce.Error() != "it is rung" {
		t.Errorf("ConflictError: Is/Error wrong")
	}
}

func TestTrimError(t *testing.T) {
	t.Parallel()
	if got := alarm.TrimError("short"); got != "short" {
		t.Errorf("TrimError(short) = %q", got)
	}
	long := strings.Repeat("é", 800) // 1600 bytes; byte 1000 splits nothing, 999 would
	got := alarm.TrimError("x" + long)
	if len(got) > 1000+len("…") || !strings.HasSuffix(got, "…") {
		t.Errorf("TrimError: %d bytes, suffix %q", len(got), got[len(got)-3:])
	}
	for _, r := range got {
		if r == '\uFFFD' {
			t.Fatalf("TrimError cut a rune in half")
		}
	}
}

// A PATCH that brings latest_ring_at before a failing clock's next retry
// moves that retry to its last try, LastTryLead before the new limit (or
// now, when that is past), as a failure would have: before, the retry came
// after the limit and the clock expired without it. A clock not yet tried,
// or whose retry comes in time, keeps its next try.
func TestPatchLatestMovesALateRetry(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 1, 1, 10, 0, 0, 0, time.UTC)
	latest := func(d time.Duration) *time.Time { l := now.Add(d); return &l }
	for _, tt := range []struct {
		name     string
		attempts int
		next     time.Duration // the current next try, from now
		latest   *time.Time
		want     time.Duration // the next try after the PATCH, from now
	}{
		{"retry after the new limit: the last try before it", 2, 10 * time.Minute, latest(time.Minute), time.Minute - alarm.LastTryLead},
		{"retry within the lead of the new limit: moved to the last try", 2, time.Minute - 50*time.Millisecond, latest(time.Minute), time.Minute - alarm.LastTryLead},
		{"new limit sooner than the lead: now", 2, 10 * time.Minute, latest(50 * time.Millisecond), 0},
		{"retry in time for the new limit: kept", 2, 30 * time.Second, latest(time.Minute), 30 * time.Second},
		{"not tried yet: its ring time", 0, 30 * time.Second, latest(time.Minute), 30 * time.Second},
		{"the limit removed: kept", 2, 10 * time.Minute, nil, 10 * time.Minute},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cur := alarm.Clock{ID: 1, Application: "a", BusinessID: "b", Status: alarm.StatusPending,
				RingAt: now.Add(-time.Minute), NextTryAt: now.Add(tt.next), Attempts: tt.attempts}
			if tt.attempts == 0 {
				cur.RingAt = cur.NextTryAt
			}
			c, err := alarm.PatchInput{LatestRingAt: tt.latest, LatestSet: true}.Apply(cur, now, alarm.Limits{})
			if err != nil {
				t.Fatal(err)
			}
			if want := now.Add(tt.want); !c.NextTryAt.Equal(want) {
				t.Errorf("NextTryAt %v, want %v", c.NextTryAt.Sub(now), tt.want)
			}
			if !c.RingAt.Equal(cur.RingAt) {
				t.Errorf("RingAt moved to %v", c.RingAt)
			}
		})
	}
}
