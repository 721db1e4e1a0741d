package mysql

import (
	"reflect"
	"strings"
	"testing"
)

// The claim scans ringCols into ringDests by position: each destination
// must be the field whose db tag names the column at its place.
func TestRingDestsFollowRingCols(t *testing.T) {
	var cols []string
	for c := range strings.SplitSeq(ringCols, ",") {
		cols = append(cols, strings.TrimSpace(c))
	}
	var r row
	dests := r.ringDests()
	if len(dests) != len(cols) {
		t.Fatalf("%d destinations for %d columns", len(dests), len(cols))
	}
	byTag := map[string]uintptr{}
	var walk func(v reflect.Value)
	walk = func(v reflect.Value) {
		for i := range v.NumField() {
			f := v.Type().Field(i)
			if f.Anonymous {
				walk(v.Field(i))
				continue
			}
			if tag := f.Tag.Get("db"); tag != "" {
				byTag[tag] = v.Field(i).Addr().Pointer()
			}
		}
	}
	walk(reflect.ValueOf(&r).Elem())
	for i, c := range cols {
		want, ok := byTag[c]
		if !ok {
			t.Errorf("column %q: no field of row has that db tag", c)
			continue
		}
		if got := reflect.ValueOf(dests[i]).Pointer(); got != want {
			t.Errorf("destination %d is not the field of column %q", i, c)
		}
	}
}
