package main

import (
	"bytes"
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/clockd/clockd/internal/config"
)

// `clockd env` lists every variable once, sorted by name, the same way on
// every run (it used to follow Go's random map order).
func TestEnvCommandIsSortedAndStable(t *testing.T) {
	t.Parallel()
	envOf := func() string {
		var stdout bytes.Buffer
		if err := run(context.Background(), []string{"env"}, runEnvOf(nil), &stdout, &bytes.Buffer{}); err != nil {
			t.Fatal(err)
		}
		return stdout.String()
	}
	first := envOf()
	lines := strings.Split(strings.TrimSuffix(first, "\n"), "\n")
	names := make([]string, len(lines))
	// Every variable of a key, and CLOCKD_CONFIG, which names the file.
	want := config.EnvNames()
	want["CLOCKD_CONFIG"] = "-config"
	for i, l := range lines {
		name, key, ok := strings.Cut(l, "\t")
		if !ok || !strings.HasPrefix(name, "CLOCKD_") || key == "" {
			t.Fatalf("line %q is not NAME<TAB>key", l)
		}
		if key != want[name] {
			t.Errorf("%s: key %q, want %q", name, key, want[name])
		}
		names[i] = name
	}
	if len(names) != len(want) {
		t.Errorf("%d lines for %d variables", len(names), len(want))
	}
	if !slices.IsSorted(names) {
		t.Errorf("not sorted by name:\n%s", first)
	}
	for range 20 { // map order would differ between runs
		if again := envOf(); again != first {
			t.Fatalf("output changed between runs:\n%s\n---\n%s", first, again)
		}
	}
}
