package httpapi_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// TestBadInput sends every kind of bad request and checks the status, the
// error's shape, that the message names the field, and that nothing was
// written.
func TestBadInput(t *testing.T) {
	t.Parallel()
	e := newAPI(t)
	e.mustClock(201, "POST", "/v1/clocks", createBody("order", "exists", "delay", "1h"))

	future := fmtTime(time.Now().Add(time.Hour))
	past := fmtTime(time.Now().Add(-time.Hour))
	c := func(extra ...any) string { return js(createBody("order", "new", extra...)) }
	ok := c() // a valid create, for the cases that change its framing
	// raw is a create body with field's value given as raw JSON text, so
	// that it can carry bytes json.Marshal would not write (invalid UTF-8).
	raw := func(field, value string) string {
		fields := []string{"application", "business_id", "payload", "delay"}
		values := map[string]string{"application": `"order"`, "business_id": `"new"`, "payload": `"p"`, "delay": `"1h"`}
		if field == "ring_at" {
			fields[3] = "ring_at"
		} else if _, ok := values[field]; !ok {
			fields = append(fields, field)
		}
		values[field] = value
		var b strings.Builder
		for i, f := range fields {
			if i > 0 {
				b.WriteByte(',')
			}
			b.WriteString(`"` + f + `":` + values[f])
		}
		return "{" + b.String() + "}"
	}

	const create, patch, batch = "/v1/clocks", "/v1/clocks/order/exists", "/v1/clocks/batch"
	tests := []struct {
		name   string
		method string
		path   string
		body   string
		status int
		field  string // the message must contain it
	}{
		// framing
		{"malformed JSON", "POST", create, `{"application":"order",`, 400, "body"},
		{"not JSON", "POST", create, `hello`, 400, "body"},
		{"empty body", "POST", create, ``, 400, "body"},
		{"array", "POST", create, `[` + ok + `]`, 400, "body"},
		{"string", "POST", create, `"order"`, 400, "body"},
		{"trailing data", "POST", create, ok + ` {}`, 400, "body"},
		{"trailing garbage", "POST", create, ok + `}`, 400, "body"},
		{"two objects", "POST", create, ok + ok, 400, "body"},
		{"unknown field", "POST", create, c("colour", "red"), 400, "colour"},
		{"unknown field in another case", "POST", create, c("Colour", "red"), 400, "Colour"},
		{"known field in another case", "POST", create,
			`{"application":"order","business_id":"new","Delay":"1h"}`, 400, "Delay"},
		{"known field in upper case", "POST", create,
			`{"APPLICATION":"order","business_id":"new","delay":"1h"}`, 400, "APPLICATION"},
		{"field given twice", "POST", create,
			`{"application":"order","business_id":"new","delay":"1h","delay":"2h"}`, 400, "delay"},
		{"field given twice, differing in case", "POST", create,
			`{"application":"order","business_id":"new","ring_at":"` + future + `","RING_AT":"` + past + `"}`, 400, "RING_AT"},

		// application
		{"missing application", "POST", create, c("application", nil), 400, "application"},
		{"empty application", "POST", create, c("application", ""), 400, "application"},
		{"null application", "POST", create, c("application", null{}), 400, "application"},
		{"application of 65", "POST", create, c("application", strings.Repeat("a", 65)), 400, "application"},
		{"application with a space", "POST", create, c("application", "my app"), 400, "application"},
		{"application with a slash", "POST", create, c("application", "a/b"), 400, "application"},
		{"application non-ASCII", "POST", create, c("application", "ordér"), 400, "application"},
		{"application with NUL", "POST", create, c("application", "a\x00"), 400, "application"},
		{"application a number", "POST", create, c("application", 5), 400, "application"},

		// business_id
		{"missing business_id", "POST", create, js(body{"application": "order", "delay": "1h"}), 400, "business_id"},
		{"null business_id", "POST", create, c("business_id", null{}), 400, "business_id"},
		{"business_id of 129 runes", "POST", create, c("business_id", strings.Repeat("é", 129)), 400, "business_id"},
		{"business_id with a slash", "POST", create, c("business_id", "o/1"), 400, "business_id"},
		{"business_id with a control char", "POST", create, c("business_id", "o\x01"), 400, "business_id"},
		{"business_id with DEL", "POST", create, c("business_id", "o\x7f"), 400, "business_id"},
		{"business_id with a newline", "POST", create, c("business_id", "o\n1"), 400, "business_id"},
		{"business_id with a trailing space", "POST", create, c("business_id", "exists "), 400, "business_id"},
		{"business_id an object", "POST", create, c("business_id", body{}), 400, "business_id"},

		// ring time
		{"both ring_at and delay", "POST", create, c("ring_at", future), 400, "ring_at"},
		{"neither ring_at nor delay", "POST", create, c("delay", nil), 400, "ring_at"},
		{"ring_at unparsable", "POST", create, c("delay", nil, "ring_at", "tomorrow"), 400, "ring_at"},
		{"ring_at without zone", "POST", create, c("delay", nil, "ring_at", "2030-01-01T10:00:00"), 400, "ring_at"},
		{"ring_at date only", "POST", create, c("delay", nil, "ring_at", "2030-01-01"), 400, "ring_at"},
		{"ring_at a number", "POST", create, c("delay", nil, "ring_at", 1893456000000), 400, "ring_at"},
		{"ring_at null", "POST", create, c("delay", nil, "ring_at", null{}), 400, "ring_at"},
		{"ring_at before 1970", "POST", create, c("delay", nil, "ring_at", "1969-12-31T23:59:59Z"), 400, "ring_at"},
		{"delay unparsable", "POST", create, c("delay", "soon"), 400, "delay"},
		{"delay without unit", "POST", create, c("delay", "30"), 400, "delay"},
		{"delay negative", "POST", create, c("delay", "-5m"), 400, "delay"},
		{"delay negative milliseconds", "POST", create, c("delay", -1000), 400, "delay"},
		{"delay fractional milliseconds", "POST", create, c("delay", 1.5), 400, "delay"},
		{"delay exponent", "POST", create, c("delay", 1e20), 400, "delay"},
		{"delay huge milliseconds", "POST", create, `{"application":"order","business_id":"new","delay":99999999999999999999}`, 400, "delay"},
		{"delay a boolean", "POST", create, c("delay", true), 400, "delay"},
		{"delay null", "POST", create, c("delay", null{}), 400, "delay"},

		// latest_ring_at, max_attempts, content_type, payload
		{"latest_ring_at before ring_at", "POST", create,
			c("delay", nil, "ring_at", future, "latest_ring_at", fmtTime(time.Now().Add(30*time.Minute))), 400, "latest_ring_at"},
		{"latest_ring_at before the delay", "POST", create, c("delay", "2h", "latest_ring_at", future), 400, "latest_ring_at"},
		{"latest_ring_at already past", "POST", create,
			c("delay", nil, "ring_at", fmtTime(time.Now().Add(-2*time.Hour)), "latest_ring_at", past), 400, "latest_ring_at"},
		{"latest_ring_at unparsable", "POST", create, c("latest_ring_at", "never"), 400, "latest_ring_at"},
		{"max_attempts negative", "POST", create, c("max_attempts", -1), 400, "max_attempts"},
		{"max_attempts a string", "POST", create, c("max_attempts", "3"), 400, "max_attempts"},
		{"max_attempts fractional", "POST", create, c("max_attempts", 1.5), 400, "max_attempts"},
		{"max_attempts too large", "POST", create, c("max_attempts", int64(1)<<31), 400, "max_attempts"},
		{"content_type empty", "POST", create, c("content_type", ""), 400, "content_type"},
		{"content_type non-ASCII", "POST", create, c("content_type", "text/plain; charset=é"), 400, "content_type"},
		{"payload an object", "POST", create, `{"application":"order","business_id":"new","delay":"1h","payload":{"a":1}}`, 400, "payload"},
		{"payload over the limit", "POST", create, c("payload", strings.Repeat("p", testMaxPayload+1)), 413, "payload"},
		{"body over the limit", "POST", create, c("payload", strings.Repeat("p", testMaxBody)), 413, "body"},

		// strings that are not valid UTF-8: refused, never "repaired" to U+FFFD
		{"business_id with an invalid byte", "POST", create, raw("business_id", "\"exists\xff\""), 400, "business_id"},
		{"business_id with another invalid byte", "POST", create, raw("business_id", "\"exists\xfe\""), 400, "business_id"},
		{"business_id of a lone low surrogate escape", "POST", create, raw("business_id", `"exists\udcff"`), 400, "business_id"},
		{"business_id of a lone high surrogate escape", "POST", create, raw("business_id", `"\ud800x"`), 400, "business_id"},
		{"business_id of surrogate escapes in the wrong order", "POST", create, raw("business_id", `"\udc00\ud800"`), 400, "business_id"},
		{"business_id of a high surrogate escape at the end", "POST", create, raw("business_id", `"o-\uD83D"`), 400, "business_id"},
		{"business_id of an escaped surrogate then a backslash", "POST", create, raw("business_id", `"o\ud83d\\ude00"`), 400, "business_id"},
		{"business_id of a UTF-8-encoded surrogate", "POST", create, raw("business_id", "\"o\xed\xa0\x80\""), 400, "business_id"},
		{"business_id of an overlong encoding", "POST", create, raw("business_id", "\"o\xc0\xaf\""), 400, "business_id"},
		{"business_id beyond U+10FFFF", "POST", create, raw("business_id", "\"o\xf4\x90\x80\x80\""), 400, "business_id"},
		{"application with an invalid byte", "POST", create, raw("application", "\"order\xff\""), 400, "application"},
		{"application of a lone surrogate escape", "POST", create, raw("application", `"order\udcff"`), 400, "application"},
		{"payload with an invalid byte", "POST", create, raw("payload", "\"x\xc3\x28y\""), 400, "payload"},
		{"payload truncated in a rune", "POST", create, raw("payload", "\"\xe2\x82\""), 400, "payload"},
		{"payload of a lone surrogate escape", "POST", create, raw("payload", `"{\"a\":\"\udcff\"}"`), 400, "payload"},
		{"content_type with an invalid byte", "POST", create, raw("content_type", "\"text/plain\xff\""), 400, "content_type"},
		{"content_type of a lone surrogate escape", "POST", create, raw("content_type", `"text/\ud800"`), 400, "content_type"},
		{"delay with an invalid byte", "POST", create, raw("delay", "\"1h\xff\""), 400, "delay"},
		{"ring_at with an invalid byte", "POST", create, raw("ring_at", "\"2030-01-01T10:00:00Z\xff\""), 400, "ring_at"},
		{"latest_ring_at of a lone surrogate escape", "POST", create, raw("latest_ring_at", `"2030-01-01T10:00:00Z\udcff"`), 400, "latest_ring_at"},

		// batch framing
		{"batch malformed", "POST", batch, `{"clocks":[`, 400, "body"},
		{"batch without clocks", "POST", batch, `{}`, 400, "clocks"},
		{"batch null clocks", "POST", batch, `{"clocks":null}`, 400, "clocks"},
		{"batch empty", "POST", batch, `{"clocks":[]}`, 400, "clocks"},
		{"batch clocks not an array", "POST", batch, `{"clocks":{}}`, 400, "clocks"},
		{"batch unknown field", "POST", batch, `{"clocks":[` + ok + `],"atomic":true}`, 400, "atomic"},
		{"batch over the body limit", "POST", batch, `{"clocks":[` + c("payload", strings.Repeat("p", testMaxBody)) + `]}`, 413, "body"},

		// reschedule
		{"patch malformed", "PATCH", patch, `{"payload":`, 400, "body"},
		{"patch empty body", "PATCH", patch, ``, 400, "body"},
		{"patch nothing to change", "PATCH", patch, `{}`, 400, "body"},
		{"patch unknown field", "PATCH", patch, `{"payload":"x","colour":"red"}`, 400, "colour"},
		{"patch of the key", "PATCH", patch, `{"business_id":"other"}`, 400, "business_id"},
		{"patch of content_type", "PATCH", patch, `{"content_type":"text/plain"}`, 400, "content_type"},
		{"patch both ring_at and delay", "PATCH", patch, js(body{"ring_at": future, "delay": "1h"}), 400, "ring_at"},
		{"patch ring_at unparsable", "PATCH", patch, `{"ring_at":"later"}`, 400, "ring_at"},
		{"patch ring_at null", "PATCH", patch, `{"ring_at":null}`, 400, "ring_at"},
		{"patch delay negative", "PATCH", patch, `{"delay":"-1s"}`, 400, "delay"},
		{"patch latest_ring_at before ring_at", "PATCH", patch, js(body{"latest_ring_at": fmtTime(time.Now().Add(time.Minute))}), 400, "latest_ring_at"},
		{"patch latest_ring_at already past", "PATCH", patch,
			js(body{"ring_at": fmtTime(time.Now().Add(-2 * time.Hour)), "latest_ring_at": past}), 400, "latest_ring_at"},
		{"patch max_attempts negative", "PATCH", patch, `{"max_attempts":-1}`, 400, "max_attempts"},
		{"patch payload over the limit", "PATCH", patch, js(body{"payload": strings.Repeat("p", testMaxPayload+1)}), 413, "payload"},
		{"patch body over the limit", "PATCH", patch, js(body{"payload": strings.Repeat("p", testMaxBody)}), 413, "body"},
		{"patch payload with an invalid byte", "PATCH", patch, "{\"payload\":\"x\xc3\x28y\"}", 400, "payload"},
		{"patch payload of a lone surrogate escape", "PATCH", patch, `{"payload":"\udcff"}`, 400, "payload"},
		{"patch ring_at with an invalid byte", "PATCH", patch, "{\"ring_at\":\"2030-01-01T10:00:00Z\xff\"}", 400, "ring_at"},
		{"patch delay of a lone surrogate escape", "PATCH", patch, `{"delay":"1h\ud800"}`, 400, "delay"},
		{"patch latest_ring_at with an invalid byte", "PATCH", patch, "{\"latest_ring_at\":\"2030-01-01T10:00:00Z\xff\"}", 400, "latest_ring_at"},
		{"patch business_id not UTF-8 in the path", "PATCH", "/v1/clocks/order/exists%FF", `{"payload":"x"}`, 400, "business_id"},
		{"patch application not UTF-8 in the path", "PATCH", "/v1/clocks/order%FF/exists", `{"payload":"x"}`, 400, "application"},
		{"patch bad application in the path", "PATCH", "/v1/clocks/bad%20app/exists", `{"payload":"x"}`, 400, "application"},
		{"patch bad business_id in the path", "PATCH", "/v1/clocks/order/a%2Fb", `{"payload":"x"}`, 400, "business_id"},

		// keys in paths of the other calls
		{"cancel bad application", "DELETE", "/v1/clocks/bad%20app/exists", ``, 400, "application"},
		{"cancel too long business_id", "DELETE", "/v1/clocks/order/" + strings.Repeat("x", 129), ``, 400, "business_id"},
		{"replay bad application", "POST", "/v1/clocks/" + strings.Repeat("a", 65) + "/exists/replay", ``, 400, "application"},
		{"replay control char", "POST", "/v1/clocks/order/a%01/replay", ``, 400, "business_id"},
		{"cancel business_id not UTF-8", "DELETE", "/v1/clocks/order/exists%FE", ``, 400, "business_id"},
		{"cancel business_id a UTF-8-encoded surrogate", "DELETE", "/v1/clocks/order/exists%ED%B3%BF", ``, 400, "business_id"},
		{"replay application not UTF-8", "POST", "/v1/clocks/%FForder/exists/replay", ``, 400, "application"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := e.with(t)
			before := e.tableState()
			var b any
			if tt.body != "" {
				b = tt.body
			}
			msg := e.mustError(tt.status, tt.method, tt.path, b)
			if !strings.Contains(msg, tt.field) {
				t.Errorf("message %q does not name %q", msg, tt.field)
			}
			if after := e.tableState(); after != before {
				t.Errorf("the request wrote to the table: %s -> %s", before, after)
			}
		})
	}
	// The same bad items inside a batch get the same answers and write nothing.
	t.Run("batch items", func(t *testing.T) {
		e := e.with(t)
		var items []string
		var want []int
		for _, tt := range tests {
			if tt.path != create || tt.method != "POST" || !json.Valid([]byte(tt.body)) || len(tt.body) > testMaxBody {
				continue
			}
			items = append(items, tt.body)
			want = append(want, tt.status)
		}
		before := e.tableState()
		code, data := e.do("POST", batch, `{"clocks":[`+strings.Join(items, ",")+`]}`)
		if code != 200 {
			t.Fatalf("status %d: %.500s", code, data)
		}
		var ans batchAnswer
		if err := json.Unmarshal(data, &ans); err != nil {
			t.Fatal(err)
		}
		if len(ans.Results) != len(want) {
			t.Fatalf("%d results for %d items", len(ans.Results), len(want))
		}
		for i, r := range ans.Results {
			if r.Status != want[i] || r.Error == nil {
				t.Errorf("item %d (%.80s): status %d error %v, want %d", i, items[i], r.Status, r.Error, want[i])
			}
		}
		if after := e.tableState(); after != before {
			t.Errorf("the batch wrote to the table: %s -> %s", before, after)
		}
	})
	if t.Failed() {
		return
	}
	// Sanity: the valid body the cases are built from is accepted.
	e.mustClock(201, "POST", create, ok)
}

// TestBadInputMessages checks the wording of refusals whose first wording
// misled: a truncated body is not an empty one, a delay of 6e4 is a whole
// number written the wrong way, and a batch item that is not an object is
// named.
func TestBadInputMessages(t *testing.T) {
	t.Parallel()
	e := newAPI(t)
	e.mustClock(201, "POST", "/v1/clocks", createBody("order", "exists"))
	const create, patch = "/v1/clocks", "/v1/clocks/order/exists"
	delay := func(n string) string { return `{"application":"order","business_id":"new","delay":` + n + `}` }
	for _, tt := range []struct {
		method, path, body string
		want               string // the message, exactly
	}{
		{"POST", create, ``, "body: is empty; a JSON object is required"},
		{"POST", create, " \n", "body: is empty; a JSON object is required"},
		{"POST", create, `{`, "body: is truncated: unexpected end of JSON input"},
		{"POST", create, `{"application":"a1"`, "body: is truncated: unexpected end of JSON input"},
		{"POST", create, `{"application":"a1",`, "body: is truncated: unexpected end of JSON input"},
		{"POST", create, `{"application":`, "body: is truncated: unexpected end of JSON input"},
		{"POST", create, `{"application":"a`, "body: is truncated: unexpected end of JSON input"},
		{"PATCH", patch, `{"payload":"x"`, "body: is truncated: unexpected end of JSON input"},
		{"POST", "/v1/clocks/batch", `{"clocks":[{}`, "body: is truncated: unexpected end of JSON input"},
		{"POST", create, delay("1e30"), "delay: 1e30 milliseconds is out of range"},
		{"POST", create, delay("99999999999999999999"), "delay: 99999999999999999999 milliseconds is out of range"},
		{"POST", create, delay("-99999999999999999999"), "delay: -99999999999999999999 milliseconds is out of range"},
		{"POST", create, delay("60000.0"), "delay: 60000.0 must be written as a whole number of milliseconds, without a fraction or exponent"},
		{"POST", create, delay("6e4"), "delay: 6e4 must be written as a whole number of milliseconds, without a fraction or exponent"},
		{"POST", create, delay("1.5"), "delay: 1.5 is not a whole number of milliseconds"},
		{"PATCH", patch, `{"delay":6E+4}`, "delay: 6E+4 must be written as a whole number of milliseconds, without a fraction or exponent"},
	} {
		before := e.tableState()
		if msg := e.mustError(400, tt.method, tt.path, tt.body); msg != tt.want {
			t.Errorf("%s %s %q: message %q, want %q", tt.method, tt.path, tt.body, msg, tt.want)
		}
		if after := e.tableState(); after != before {
			t.Errorf("%s %q wrote: %s -> %s", tt.method, tt.body, before, after)
		}
	}

	// A batch item that is not an object is named by its place, as its
	// result is; the other items are answered as usual.
	code, data := e.do("POST", "/v1/clocks/batch", `{"clocks":[`+js(createBody("order", "b-0"))+`, 7, null, "x", [], {"colour":1}]}`)
	var ans batchAnswer
	if err := json.Unmarshal(data, &ans); code != 200 || err != nil || len(ans.Results) != 6 {
		t.Fatalf("batch: %d %s", code, data)
	}
	want := []string{"", "clocks[1]: must be a JSON object", "clocks[2]: must be a JSON object",
		"clocks[3]: must be a JSON object", "clocks[4]: must be a JSON object", "colour: is not a known field"}
	for i, r := range ans.Results {
		switch {
		case i == 0 && r.Status != 201:
			t.Errorf("item 0: status %d", r.Status)
		case i > 0 && (r.Status != 400 || r.Error == nil || r.Error.Code != "invalid_argument" || r.Error.Message != want[i]):
			t.Errorf("item %d: %d %+v, want 400 %q", i, r.Status, r.Error, want[i])
		}
	}
}

// TestErrorMessagesNameWhatIsWrong: a 400's message names the field the
// caller got wrong, and what is wrong with it, in the caller's terms.
func TestErrorMessagesNameWhatIsWrong(t *testing.T) {
	t.Parallel()
	e := newAPI(t)
	e.mustClock(201, "POST", "/v1/clocks", createBody("order", "every", "delay", nil, "schedule", body{"every": "1h"}))
	for _, tt := range []struct {
		name, method, path string
		body               any
		prefix, says       string
	}{
		{"a character outside the set, whole", "POST", "/v1/clocks", createBody("ordér", "x"), "application: ", `'é'`},
		{"a ring time past the last one", "POST", "/v1/clocks", createBody("order", "x", "delay", nil, "ring_at", "9999-12-31T23:59:59.998Z"),
			"ring_at: ", "9999-12-31T23:59:59Z"},
		{"ring_at null beside a delay", "POST", "/v1/clocks", createBody("order", "x", "ring_at", null{}), "ring_at: ", "not null"},
		{"delay null beside a ring_at", "POST", "/v1/clocks", createBody("order", "x", "delay", null{}, "ring_at", "2030-01-01T00:00:00Z"),
			"delay: ", "not null"},
		{"payload null", "POST", "/v1/clocks", createBody("order", "x", "payload", null{}), "payload: ", "not null"},
		{"content_type null", "POST", "/v1/clocks", createBody("order", "x", "content_type", null{}), "content_type: ", "not null"},
		{"patch payload null", "PATCH", "/v1/clocks/order/every", body{"payload": nil}, "payload: ", "not null"},
		{"a delay for a recurring clock", "PATCH", "/v1/clocks/order/every", body{"delay": "5m"}, "delay: ", "schedule"},
		{"a ring_at for a recurring clock", "PATCH", "/v1/clocks/order/every", body{"ring_at": "2030-01-01T00:00:00Z"}, "ring_at: ", "schedule"},
		{"an offset of a whole day", "POST", "/v1/clocks", createBody("order", "x", "delay", nil, "ring_at", "2030-01-02T10:00:00+24:00"),
			"ring_at: ", "not an RFC 3339 time"},
		{"a latest_ring_at with a one-digit hour", "POST", "/v1/clocks", createBody("order", "x", "latest_ring_at", "2030-01-02T1:00:00Z"),
			"latest_ring_at: ", "not an RFC 3339 time"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			msg := e.with(t).mustError(400, tt.method, tt.path, tt.body)
			if !strings.HasPrefix(msg, tt.prefix) || !strings.Contains(msg, tt.says) {
				t.Errorf("message %q, want it to start %q and say %q", msg, tt.prefix, tt.says)
			}
		})
	}
	if n := e.count("business_id = 'x'"); n != 0 {
		t.Errorf("%d clocks written by refused creates", n)
	}
	// The last ring time there is is accepted.
	e.mustClock(201, "POST", "/v1/clocks", createBody("order", "last", "delay", nil, "ring_at", "9999-12-31T23:59:59Z"))
}

// An error names a bad value, but does not echo a megabyte back (found by
// review: a 1 MB delay made a 1 MB answer); a limit of too many digits is
// told its bounds, not that it is not a number.
func TestBadValuesQuotedShort(t *testing.T) {
	t.Parallel()
	e := newAPI(t)
	huge := strings.Repeat("9", 100_000)
	for _, c := range []struct{ method, path, body, want string }{
		{"POST", "/v1/clocks", js(createBody("order", "big", "delay", huge+"m")), "is not a duration"},
		{"POST", "/v1/clocks", js(createBody("order", "big", "ring_at", huge)), "is not an RFC 3339 time"},
		{"POST", "/v1/clocks", js(map[string]any{"application": "order", "business_id": "big",
			"schedule": map[string]any{"every": huge + "s"}}), "is not a duration"},
		{"GET", "/v1/clocks?application=order&after=" + huge[:4000] + "x", "", "is not a cursor"},
		{"GET", "/v1/clocks?application=order&limit=99999999999999999999999", "", "between 1 and 1000"},
	} {
		var body any
		if c.body != "" {
			body = json.RawMessage(c.body)
		}
		msg := e.mustError(400, c.method, c.path, body)
		if !strings.Contains(msg, c.want) || len(msg) > 1000 {
			t.Errorf("%s %.60s: message of %d bytes %.200q, want one that says %q in under 1,000 bytes", c.method, c.path, len(msg), msg, c.want)
		}
	}
}
