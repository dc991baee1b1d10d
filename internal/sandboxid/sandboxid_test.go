package sandboxid

import (
	"strings"
	"testing"
)

func TestNew(t *testing.T) {
	seen := map[string]bool{}
	for range 1000 {
		id := New()
		if len(id) != Len || !Valid(id) || seen[id] {
			t.Fatalf("New() = %q: want a fresh valid ID of %d characters", id, Len)
		}
		seen[id] = true
	}
}

func TestValid(t *testing.T) {
	for id, want := range map[string]bool{
		"abc123": true, strings.Repeat("a", MaxLen): true, "": false, strings.Repeat("a", MaxLen+1): false,
		"ABC": false, "a-b": false, "a.b": false, "a/b": false, "a b": false, "é": false, "..": false,
	} {
		if got := Valid(id); got != want {
			t.Errorf("Valid(%q) = %v, want %v", id, got, want)
		}
	}
}
