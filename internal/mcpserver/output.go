package mcpserver

import (
	"fmt"
	"strings"
	"sync"
	"unicode/utf8"
)

// clip collects text up to a limit in bytes: the first half of what it is
// given and the latest half, with a marker saying how much was cut between
// them. Safe for concurrent use.
type clip struct {
	mu      sync.Mutex
	limit   int
	head    strings.Builder
	tail    []byte
	dropped int64
}

func newClip(limit int) *clip { return &clip{limit: max(limit, 64)} }

// Write appends s.
func (c *clip) Write(s string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	half := c.limit / 2
	if room := half - c.head.Len(); room > 0 {
		n := cutAt(s, room)
		c.head.WriteString(s[:n])
		s = s[n:]
	}
	if s == "" {
		return
	}
	c.tail = append(c.tail, s...)
	if over := len(c.tail) - (c.limit - half); over > 0 {
		over = runeStartAfter(c.tail, over)
		c.dropped += int64(over)
		c.tail = append(c.tail[:0], c.tail[over:]...)
	}
}

// Take returns what was collected (with the marker when text was cut) and
// whether it was cut, and empties the clip.
func (c *clip) Take() (string, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	cut := c.dropped > 0
	out := c.head.String()
	if cut {
		out += fmt.Sprintf("\n…[%d bytes truncated]…\n", c.dropped)
	}
	out += string(c.tail)
	c.head.Reset()
	c.tail, c.dropped = c.tail[:0], 0
	return out, cut
}

// clipText clips s to limit bytes the way clip does.
func clipText(s string, limit int) (string, bool) {
	c := newClip(limit)
	c.Write(s)
	return c.Take()
}

// cutAt returns the largest n <= max such that s[:n] ends on a rune boundary.
func cutAt(s string, max int) int {
	if max >= len(s) {
		return len(s)
	}
	for max > 0 && !utf8.RuneStart(s[max]) {
		max--
	}
	return max
}

// runeStartAfter returns the first index >= i that starts a rune in b.
func runeStartAfter(b []byte, i int) int {
	for i < len(b) && !utf8.RuneStart(b[i]) {
		i++
	}
	return i
}
