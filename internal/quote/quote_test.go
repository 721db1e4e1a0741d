package quote

import (
	"strconv"
	"strings"
	"testing"
)

func TestShort(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"30m", `"30m"`},
		{"a\x00b", `"a\x00b"`},
		{strings.Repeat("x", Most), `"` + strings.Repeat("x", Most) + `"`},
		{strings.Repeat("x", 1<<20), `"` + strings.Repeat("x", Most) + `"… (1048576 bytes)`},
		// a cut never splits a character: é is 2 bytes, byte 64 is its second
		{strings.Repeat("x", Most-1) + "é" + "yy", `"` + strings.Repeat("x", Most-1) + `"… (67 bytes)`},
		// not UTF-8 at all: cut where it is, escaped (found by review: it
		// showed "" for a value that was not empty)
		{strings.Repeat("\x80", 100), strconv.Quote(strings.Repeat("\x80", Most)) + "… (100 bytes)"},
	} {
		if got := Short(c.in); got != c.want {
			t.Errorf("Short(%.20q…) = %.90s, want %.90s", c.in, got, c.want)
		}
	}
}
