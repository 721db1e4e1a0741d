package httpapi

import (
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf16"
	"unicode/utf8"
)

func TestJSONString(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		raw       string
		want      string
		ok, valid bool
	}{
		{"plain", `"o-123"`, "o-123", true, true},
		{"empty", `""`, "", true, true},
		{"spaces around", " \t\"x\" \n", "x", true, true},
		{"multibyte", `"订单 é"`, "订单 é", true, true},
		{"four-byte rune", `"😀"`, "😀", true, true},
		{"a real U+FFFD", "\"a\uFFFDb\"", "a\uFFFDb", true, true},
		{"an escaped U+FFFD", `"a\ufffdb"`, "a\uFFFDb", true, true},
		{"every short escape", `"\"\\\/\b\f\n\r\t"`, "\"\\/\b\f\n\r\t", true, true},
		{"unicode escapes", `"\u0041\u00e9\u4E2D"`, "Aé中", true, true},
		{"escaped NUL", `"a\u0000b"`, "a\x00b", true, true},
		{"surrogate pair escape", `"\ud83d\ude00"`, "😀", true, true},
		{"surrogate pair escape in upper case", `"x\uD83D\uDE00y"`, "x😀y", true, true},
		{"escapes around text", `"\n-é-\t"`, "\n-é-\t", true, true},
		{"escaped backslash then u", `"\\ud800"`, `\ud800`, true, true},

		{"invalid byte", "\"col\xff\"", "", true, false},
		{"other invalid byte", "\"col\xfe\"", "", true, false},
		{"invalid byte after an escape", "\"\\n\xff\"", "", true, false},
		{"broken two-byte sequence", "\"x\xc3\x28y\"", "", true, false},
		{"truncated three-byte sequence", "\"\xe2\x82\"", "", true, false},
		{"overlong encoding", "\"\xc0\xaf\"", "", true, false},
		{"UTF-8-encoded surrogate", "\"\xed\xa0\x80\"", "", true, false},
		{"beyond U+10FFFF", "\"\xf4\x90\x80\x80\"", "", true, false},
		{"lone low surrogate escape", `"col\udcff"`, "", true, false},
		{"lone high surrogate escape", `"\ud800"`, "", true, false},
		{"high surrogate then text", `"\ud800x"`, "", true, false},
		{"high surrogate then a non-surrogate escape", `"\ud800\u0041"`, "", true, false},
		{"two high surrogates", `"\ud800\ud800"`, "", true, false},
		{"halves in the wrong order", `"\udc00\ud800"`, "", true, false},
		{"high surrogate then an escaped backslash", `"\ud83d\\ude00"`, "", true, false},
		{"high surrogate then another escape", `"\ud83d\n"`, "", true, false},

		{"a number", `12`, "", false, false},
		{"null", `null`, "", false, false},
		{"an object", `{"a":"b"}`, "", false, false},
		{"nothing", ``, "", false, false},
		{"one quote", `"`, "", false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, ok, valid := jsonString(json.RawMessage(tt.raw))
			if s != tt.want || ok != tt.ok || valid != tt.valid {
				t.Errorf("jsonString(%q) = %q, %v, %v; want %q, %v, %v", tt.raw, s, ok, valid, tt.want, tt.ok, tt.valid)
			}
			if tt.ok && tt.valid {
				var js string
				if err := json.Unmarshal([]byte(tt.raw), &js); err != nil || js != s {
					t.Errorf("encoding/json reads %q (%v), jsonString %q", js, err, s)
				}
			}
		})
	}
}

// ValidJSONText is validText for the tests of package httpapi_test.
var ValidJSONText = validText

// validText is an independent oracle for jsonString's "valid": the bytes
// are UTF-8, and every \u escape of a surrogate is the high half of a pair
// whose low half follows as the next escape.
func validText(raw string) bool {
	if !utf8.ValidString(raw) {
		return false
	}
	var units []rune // the escapes, with -1 for anything between them
	for i := 0; i < len(raw); i++ {
		if raw[i] != '\\' {
			units = append(units, -1)
			continue
		}
		i++
		if i < len(raw) && raw[i] == 'u' && i+4 < len(raw) {
			var r rune
			for _, c := range raw[i+1 : i+5] {
				r = r<<4 | rune(strings.IndexRune("0123456789abcdef", c|0x20))
			}
			units = append(units, r)
			i += 4
			continue
		}
		units = append(units, -1)
	}
	for k := 0; k < len(units); k++ {
		if !utf16.IsSurrogate(units[k]) {
			continue
		}
		if k+1 == len(units) || utf16.DecodeRune(units[k], units[k+1]) == utf8.RuneError {
			return false
		}
		k++
	}
	return true
}

// The strict decoder reads what encoding/json reads from valid text, and
// refuses exactly the strings that encoding/json would "repair".
func FuzzJSONString(f *testing.F) {
	for _, s := range []string{`"o-123"`, `""`, `"\ud83d\ude00"`, `"\udcff"`, `"\ud800x"`, "\"col\xff\"",
		`"\\ud800"`, `"a\ufffdb"`, "\"\uFFFD\"", `"\n\t\u0041"`, `"\ud83d\\ude00"`, `12`, `null`, `"\u00"`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var want string
		if json.Unmarshal(data, &want) != nil || !strings.HasPrefix(strings.TrimSpace(string(data)), `"`) {
			return // not a JSON string (jsonString is only given valid JSON)
		}
		s, ok, valid := jsonString(data)
		if !ok {
			t.Fatalf("jsonString(%q) says it is not a string", data)
		}
		if valid != validText(string(data)) {
			t.Fatalf("jsonString(%q): valid = %v, the oracle says %v", data, valid, !valid)
		}
		if valid && s != want {
			t.Fatalf("jsonString(%q) = %q, encoding/json reads %q", data, s, want)
		}
		if !valid && !strings.ContainsRune(want, utf8.RuneError) {
			t.Fatalf("jsonString(%q) refuses it, yet encoding/json replaced nothing: %q", data, want)
		}
	})
}
