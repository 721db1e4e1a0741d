package httpapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"time"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/clockd/clockd/internal/alarm"
	"github.com/clockd/clockd/internal/quote"
)

// createBody is the JSON of a create, field by field as raw JSON, so that
// errors name the field and "absent" (nil) differs from "null".
type createBody struct {
	Application, BusinessID, Payload, ContentType json.RawMessage
	RingAt, Delay, LatestRingAt, MaxAttempts      json.RawMessage
	// Schedule makes a recurring clock; its options may stand beside it
	Schedule json.RawMessage
	options  scheduleBody
}

// field maps an exact JSON key to where its value goes.
func (b *createBody) field(k string) *json.RawMessage {
	switch k {
	case "application":
		return &b.Application
	case "business_id":
		return &b.BusinessID
	case "payload":
		return &b.Payload
	case "content_type":
		return &b.ContentType
	case "ring_at":
		return &b.RingAt
	case "delay":
		return &b.Delay
	case "latest_ring_at":
		return &b.LatestRingAt
	case "max_attempts":
		return &b.MaxAttempts
	case "schedule":
		return &b.Schedule
	}
	return b.options.option(k)
}

// patchBody is the JSON of a reschedule.
type patchBody struct {
	RingAt, Delay, Payload, LatestRingAt, MaxAttempts json.RawMessage
	Schedule                                          json.RawMessage
}

func (b *patchBody) field(k string) *json.RawMessage {
	switch k {
	case "ring_at":
		return &b.RingAt
	case "delay":
		return &b.Delay
	case "payload":
		return &b.Payload
	case "latest_ring_at":
		return &b.LatestRingAt
	case "max_attempts":
		return &b.MaxAttempts
	case "schedule":
		return &b.Schedule
	}
	return nil
}

// decodeObject reads exactly one JSON object in one pass: every key must be
// one that field knows, spelled exactly (encoding/json would match it
// case-insensitively) and given once (it would keep the last silently);
// each value's raw JSON goes where field says.
func decodeObject(data []byte, field func(string) *json.RawMessage) error {
	if !json.Valid(data) {
		return decodeObjectSlow(data, field) // says precisely what is wrong
	}
	return decodeValidObject(data, field)
}

// decodeValidObject is decodeObject for data known to be valid JSON: an
// item of a batch, whose whole body json.Valid has checked already.
func decodeValidObject(data []byte, field func(string) *json.RawMessage) error {
	i := skipSpace(data, 0)
	if data[i] != '{' {
		return badField("body", "must be a JSON object")
	}
	i = skipSpace(data, i+1)
	if data[i] == '}' {
		return nil
	}
	for {
		end := endOfValue(data, i)
		k, _, valid := jsonString(data[i:end])
		if !valid {
			return badField("body", "has a field name that is not valid UTF-8 text")
		}
		i = skipSpace(data, end)
		i = skipSpace(data, i+1) // ':'
		end = endOfValue(data, i)
		dst := field(k)
		if dst == nil {
			return unknownField(k)
		}
		if *dst != nil {
			return badField(k, "is given more than once")
		}
		*dst = data[i:end:end]
		i = skipSpace(data, end)
		if data[i] == '}' {
			return nil // json.Valid: only white space follows
		}
		i = skipSpace(data, i+1) // ','
	}
}

func skipSpace(data []byte, i int) int {
	for i < len(data) && (data[i] == ' ' || data[i] == '\t' || data[i] == '\n' || data[i] == '\r') {
		i++
	}
	return i
}

// endOfValue returns the index just after the JSON value starting at i, in
// data already known to be valid JSON.
func endOfValue(data []byte, i int) int {
	switch data[i] {
	case '"':
		for j := i + 1; ; j++ {
			switch data[j] {
			case '\\':
				j++
			case '"':
				return j + 1
			}
		}
	case '{', '[':
		depth := 0
		for j := i; ; j++ {
			switch data[j] {
			case '"':
				j = endOfValue(data, j) - 1
			case '{', '[':
				depth++
			case '}', ']':
				if depth--; depth == 0 {
					return j + 1
				}
			}
		}
	}
	j := i
	for j < len(data) && !strings.ContainsRune(",}] \t\r\n", rune(data[j])) {
		j++
	}
	return j
}

// decodeObjectSlow is decodeObject for input that is not valid JSON: it
// reports what is wrong, field by field where it can.
func decodeObjectSlow(data []byte, field func(string) *json.RawMessage) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	tok, err := dec.Token()
	if err != nil {
		return jsonError(err)
	}
	if tok != json.Delim('{') {
		return badField("body", "must be a JSON object")
	}
	// Past the '{', the end of the input is a truncated object, not an
	// empty body: the decoder says io.EOF for both ('{', '{"a":1').
	inObject := func(err error) error {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return jsonError(err)
	}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return inObject(err)
		}
		k, _ := tok.(string)
		dst := field(k)
		if dst == nil {
			return unknownField(k)
		}
		if *dst != nil {
			return badField(k, "is given more than once")
		}
		if err := dec.Decode(dst); err != nil {
			return inObject(err)
		}
	}
	if _, err := dec.Token(); err != nil {
		return inObject(err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return badField("body", "has data after the JSON object")
	}
	return nil
}

// stringField reads a string field; nil when absent or null.
func stringField(field string, raw json.RawMessage) (*string, error) {
	if raw == nil || isNull(raw) {
		return nil, nil
	}
	s, ok, valid := jsonString(raw)
	if !ok {
		return nil, badField(field, "must be a string, not %s", jsonKind(raw))
	}
	if !valid {
		return nil, notUTF8(field)
	}
	return &s, nil
}

// textField reads a string field that a clock never shows as null
// (payload, content_type): absent is nil, null is refused, as a null
// ring_at or delay is (README: "null").
func textField(field string, raw json.RawMessage) (*string, error) {
	if raw != nil && isNull(raw) {
		return nil, badField(field, "must be a string, not null (leave it out for the default)")
	}
	return stringField(field, raw)
}

// jsonString decodes a JSON string value: ok is false when raw is not a
// JSON string; valid is false when it is one but does not encode valid
// UTF-8 text: it holds bytes that are not UTF-8, or a \u escape of a
// surrogate that is not one half of a pair ("\udcff"). encoding/json turns
// both into U+FFFD silently, so that "col\xff" and "col\xfe" would name
// the same clock; clockd refuses them instead. raw is a value from an input
// already checked to be valid JSON. The common case, with no escapes, is the
// bytes between the quotes.
func jsonString(raw json.RawMessage) (s string, ok, valid bool) {
	n := len(raw)
	if n < 2 || raw[0] != '"' || raw[n-1] != '"' {
		raw = bytes.TrimSpace(raw)
		if n = len(raw); n < 2 || raw[0] != '"' || raw[n-1] != '"' {
			return "", false, false
		}
	}
	body := raw[1 : n-1]
	// The escapes are ASCII: the bytes are valid UTF-8 as a whole exactly
	// when each run between escapes is.
	if !utf8.Valid(body) {
		return "", true, false
	}
	if bytes.IndexByte(body, '\\') < 0 {
		return string(body), true, true
	}
	out := make([]byte, 0, len(body))
	for {
		i := bytes.IndexByte(body, '\\')
		if i < 0 {
			return string(append(out, body...)), true, true
		}
		out = append(out, body[:i]...)
		if i+1 >= len(body) {
			return "", false, false
		}
		c := body[i+1]
		body = body[i+2:]
		switch c {
		case '"', '\\', '/':
			out = append(out, c)
		case 'b':
			out = append(out, '\b')
		case 'f':
			out = append(out, '\f')
		case 'n':
			out = append(out, '\n')
		case 'r':
			out = append(out, '\r')
		case 't':
			out = append(out, '\t')
		case 'u':
			r, ok := hex4(body)
			if !ok {
				return "", false, false
			}
			body = body[4:]
			if utf16.IsSurrogate(r) {
				// valid only as a high half followed at once by an escaped low half
				r2, ok := rune(-1), false
				if len(body) >= 6 && body[0] == '\\' && body[1] == 'u' {
					r2, ok = hex4(body[2:])
				}
				if r = utf16.DecodeRune(r, r2); !ok || r == utf8.RuneError {
					return "", true, false
				}
				body = body[6:]
			}
			out = utf8.AppendRune(out, r)
		default:
			return "", false, false
		}
	}
}

// hex4 reads the four hex digits of a \u escape.
func hex4(b []byte) (rune, bool) {
	if len(b) < 4 {
		return 0, false
	}
	var r rune
	for _, c := range b[:4] {
		switch {
		case '0' <= c && c <= '9':
			c -= '0'
		case 'a' <= c && c <= 'f':
			c -= 'a' - 10
		case 'A' <= c && c <= 'F':
			c -= 'A' - 10
		default:
			return 0, false
		}
		r = r<<4 | rune(c)
	}
	return r, true
}

// notUTF8 is the refusal of a string that is not valid UTF-8 text.
func notUTF8(field string) error {
	return badField(field, "is not valid UTF-8 text: it has bytes that are not UTF-8, or an unpaired surrogate escape such as \"\\udcff\"")
}

// jsonKind names the kind of a JSON value for error messages.
func jsonKind(raw json.RawMessage) string {
	switch t := bytes.TrimSpace(raw); {
	case len(t) == 0:
		return "nothing"
	case t[0] == '{':
		return "object"
	case t[0] == '[':
		return "array"
	case t[0] == '"':
		return "string"
	case t[0] == 't' || t[0] == 'f':
		return "bool"
	}
	return "number"
}

// parseDecimal reads a whole number written in a URL (a path segment or a
// query parameter) as decimal digits only: strconv.ParseInt alone also
// takes a sign, so "+7" would name token 7.
func parseDecimal(s string) (int64, error) {
	if s == "" {
		return 0, strconv.ErrSyntax
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, strconv.ErrSyntax
		}
	}
	return strconv.ParseInt(s, 10, 64)
}

func badField(field, format string, args ...any) error {
	return &alarm.FieldError{Field: field, Message: fmt.Sprintf(format, args...), Kind: alarm.ErrInvalid}
}

func jsonError(err error) error {
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &syn):
		return badField("body", "is not valid JSON at byte %d: %v", syn.Offset, err)
	case errors.As(err, &typ):
		field := typ.Field
		if field == "" {
			return badField("body", "must be a JSON object")
		}
		return badField(field, "must be a %s, not %s", typ.Type.String(), typ.Value)
	case errors.Is(err, io.EOF):
		return badField("body", "is empty; a JSON object is required")
	case errors.Is(err, io.ErrUnexpectedEOF):
		return badField("body", "is truncated: unexpected end of JSON input")
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		name := strings.TrimPrefix(err.Error(), "json: unknown field ")
		return unknownField(strings.Trim(name, `"`))
	}
	return badField("body", "%v", err)
}

func unknownField(name string) error {
	if name == "" {
		return badField("body", "has a field with an empty name")
	}
	return badField(name, "is not a known field")
}

func present(raw json.RawMessage) bool { return raw != nil }

func isNull(raw json.RawMessage) bool { return bytes.Equal(bytes.TrimSpace(raw), []byte("null")) }

// parseTime parses an RFC 3339 time; nil for JSON null.
func parseTime(field string, raw json.RawMessage) (*time.Time, error) {
	if isNull(raw) {
		return nil, nil
	}
	s, ok, valid := jsonString(raw)
	if !ok {
		return nil, badField(field, "must be an RFC 3339 time string such as \"2026-01-01T10:30:00.000Z\"")
	}
	if !valid {
		return nil, notUTF8(field)
	}
	t, err := alarm.ParseRFC3339(s)
	if err != nil {
		return nil, badField(field, "%s is not an RFC 3339 time such as \"2026-01-01T10:30:00.000Z\"", quote.Short(s))
	}
	return &t, nil
}

// parseDelay accepts a Go duration string ("30m") or integer milliseconds.
func parseDelay(raw json.RawMessage) (*time.Duration, error) {
	if isNull(raw) {
		return nil, nil
	}
	if s, ok, valid := jsonString(raw); ok {
		if !valid {
			return nil, notUTF8("delay")
		}
		d, err := time.ParseDuration(s)
		if err != nil {
			return nil, badField("delay", "%s is not a duration such as \"30m\" or \"1h30m\"", quote.Short(s))
		}
		return &d, nil
	}
	var n json.Number
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if err := dec.Decode(&n); err != nil {
		return nil, badField("delay", "must be a duration string such as \"30m\" or integer milliseconds")
	}
	v, err := strconv.ParseInt(n.String(), 10, 64)
	if errors.Is(err, strconv.ErrRange) {
		return nil, badField("delay", "%s milliseconds is out of range", n.String())
	}
	if err != nil {
		// A fraction or an exponent: say which is wrong, the value or
		// only how it is written (60000.0, 6e4).
		f, _ := strconv.ParseFloat(n.String(), 64) // ±Inf when beyond float64
		switch {
		case math.Abs(f) > math.MaxInt64/float64(time.Millisecond):
			return nil, badField("delay", "%s milliseconds is out of range", n.String())
		case f != math.Trunc(f):
			return nil, badField("delay", "%s is not a whole number of milliseconds", n.String())
		}
		return nil, badField("delay", "%s must be written as a whole number of milliseconds, without a fraction or exponent", n.String())
	}
	if v > math.MaxInt64/int64(time.Millisecond) || v < math.MinInt64/int64(time.Millisecond) {
		return nil, badField("delay", "%d milliseconds is out of range", v)
	}
	d := time.Duration(v) * time.Millisecond
	return &d, nil
}

func parseMaxAttempts(raw json.RawMessage) (*int, error) {
	// raw is one valid JSON value: a JSON integer is exactly what ParseInt takes
	n, err := strconv.ParseInt(string(bytes.TrimSpace(raw)), 10, 64)
	if err != nil {
		return nil, badField("max_attempts", "must be a whole number (0 = no limit)")
	}
	if n < 0 || n > math.MaxInt32 {
		return nil, badField("max_attempts", "must be between 0 and %d, got %d", math.MaxInt32, n)
	}
	v := int(n)
	return &v, nil
}

func parseWhen(ringAt, delay json.RawMessage) (alarm.When, error) {
	w := alarm.When{AtSet: present(ringAt), DelaySet: present(delay)}
	var err error
	if w.AtSet {
		if w.At, err = parseTime("ring_at", ringAt); err != nil {
			return w, err
		}
	}
	if w.DelaySet {
		if w.Delay, err = parseDelay(delay); err != nil {
			return w, err
		}
	}
	return w, nil
}

// DecodeCreate parses and validates one create request body.
func DecodeCreate(data []byte, now time.Time, lim alarm.Limits) (alarm.NewClock, error) {
	in, err := decodeCreateInput(data)
	if err != nil {
		return alarm.NewClock{}, err
	}
	return in.Validate(now, lim)
}

func (b createBody) input() (alarm.CreateInput, error) {
	var in alarm.CreateInput
	app, err := stringField("application", b.Application)
	if err != nil {
		return in, err
	}
	bid, err := stringField("business_id", b.BusinessID)
	if err != nil {
		return in, err
	}
	if app != nil {
		in.Application = *app
	}
	if bid != nil {
		in.BusinessID = *bid
	}
	if err := alarm.CheckKey(alarm.Key{Application: in.Application, BusinessID: in.BusinessID}); err != nil {
		return in, err
	}
	if in.Payload, err = textField("payload", b.Payload); err != nil {
		return in, err
	}
	if in.ContentType, err = textField("content_type", b.ContentType); err != nil {
		return in, err
	}
	if in.When, err = parseWhen(b.RingAt, b.Delay); err != nil {
		return in, err
	}
	if present(b.LatestRingAt) {
		if in.LatestRingAt, err = parseTime("latest_ring_at", b.LatestRingAt); err != nil {
			return in, err
		}
	}
	if present(b.MaxAttempts) {
		if in.MaxAttempts, err = parseMaxAttempts(b.MaxAttempts); err != nil {
			return in, err
		}
	}
	if in.Schedule, err = decodeSchedule(b.Schedule, &b.options); err != nil {
		return in, err
	}
	return in, nil
}

func decodeCreateInput(data []byte) (alarm.CreateInput, error) {
	return decodeCreate(data, decodeObject)
}

// decodeBatchItem is decodeCreateInput for an item of a batch that
// decodeBatch split out: valid JSON already, so it is not checked again.
func decodeBatchItem(data json.RawMessage) (alarm.CreateInput, error) {
	return decodeCreate(data, decodeValidObject)
}

func decodeCreate(data []byte, decode func([]byte, func(string) *json.RawMessage) error) (alarm.CreateInput, error) {
	var b createBody
	if err := decode(data, b.field); err != nil {
		return alarm.CreateInput{}, err
	}
	return b.input()
}

func decodePatch(data []byte) (alarm.PatchInput, error) {
	var b patchBody
	var p alarm.PatchInput
	if err := decodeObject(data, b.field); err != nil {
		return p, err
	}
	var err error
	if p.When, err = parseWhen(b.RingAt, b.Delay); err != nil {
		return p, err
	}
	if p.Payload, err = textField("payload", b.Payload); err != nil {
		return p, err
	}
	if present(b.LatestRingAt) {
		p.LatestSet = true
		if p.LatestRingAt, err = parseTime("latest_ring_at", b.LatestRingAt); err != nil {
			return p, err
		}
	}
	if present(b.MaxAttempts) {
		if p.MaxAttempts, err = parseMaxAttempts(b.MaxAttempts); err != nil {
			return p, err
		}
	}
	if present(b.Schedule) {
		if isNull(b.Schedule) {
			return p, badField("schedule", "cannot be removed: cancel the recurring clock instead")
		}
		if p.Schedule, err = decodeSchedule(b.Schedule, &scheduleBody{}); err != nil {
			return p, err
		}
	}
	return p, nil
}

// batchBody is the JSON of a batch create.
type batchBody struct {
	Clocks []json.RawMessage
	// Count is how many items the array holds. Only the first MaxBatch+1
	// are kept in Clocks: a batch of more is refused whole, and a body of
	// millions of tiny items must not cost millions of slice entries.
	Count int
}

// decodeBatch reads {"clocks":[...]} and splits the array into its items
// without decoding them (each is decoded, and judged, on its own, by
// decodeBatchItem: the whole body is valid JSON once decodeBatch is done).
func decodeBatch(data []byte) (batchBody, error) {
	var raw json.RawMessage
	err := decodeObject(data, func(k string) *json.RawMessage {
		if k == "clocks" {
			return &raw
		}
		return nil
	})
	if err != nil || raw == nil || isNull(raw) {
		return batchBody{}, err
	}
	if raw[0] != '[' {
		return batchBody{}, badField("clocks", "must be an array of clocks, not %s", jsonKind(raw))
	}
	items := []json.RawMessage{}
	n := 0
	for i := skipSpace(raw, 1); raw[i] != ']'; n++ {
		end := endOfValue(raw, i)
		if n <= MaxBatch {
			items = append(items, raw[i:end:end])
		}
		i = skipSpace(raw, end)
		if raw[i] == ',' {
			i = skipSpace(raw, i+1)
		}
	}
	return batchBody{Clocks: items, Count: n}, nil
}
