// Package quote quotes what a client sent for an error message, cut short:
// an answer must not echo a megabyte back.
package quote

import (
	"strconv"
	"unicode/utf8"
)

// Most is how many bytes of a value Short keeps.
const Most = 64

// Short is s quoted as %q quotes it, cut to its first Most bytes (at a
// character boundary) and followed by its length when longer.
func Short(s string) string {
	if len(s) <= Most {
		return strconv.Quote(s)
	}
	// back to the start of the character at the cut: at most 3 bytes (a
	// value that is not UTF-8 is cut where it is, strconv.Quote escapes it)
	cut := Most
	for back := 0; back < utf8.UTFMax-1 && !utf8.RuneStart(s[cut]); back++ {
		cut--
	}
	if !utf8.RuneStart(s[cut]) {
		cut = Most
	}
	return strconv.Quote(s[:cut]) + "… (" + strconv.Itoa(len(s)) + " bytes)"
}
