package mcpserver

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func TestClipKeepsHeadAndTail(t *testing.T) {
	c := newClip(100)
	for i := 0; i < 1000; i++ {
		c.Write("é") // two bytes: cuts must not split it
	}
	c.Write("END")
	out, cut := c.Take()
	if !cut || !strings.HasPrefix(out, "éé") || !strings.HasSuffix(out, "éEND") || !utf8.ValidString(out) {
		t.Fatalf("clip = %q, %v", out, cut)
	}
	if !strings.Contains(out, "bytes truncated]") {
		t.Fatalf("no marker in %q", out)
	}
	if head, _, _ := strings.Cut(out, "\n…["); len(head) > 50 {
		t.Fatalf("head of %d bytes, want at most 50", len(head))
	}
	if again, cut := c.Take(); again != "" || cut {
		t.Fatalf("Take after Take = %q, %v", again, cut)
	}
	if s, cut := clipText("short", 100); s != "short" || cut {
		t.Fatalf("short text: %q %v", s, cut)
	}
}
