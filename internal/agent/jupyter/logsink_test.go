package jupyter

import (
	"reflect"
	"strings"
	"testing"
)

func TestCopyLines(t *testing.T) {
	long := strings.Repeat("x", maxLogLine+10)
	in := "a\r\n\n  \nb\n" + long + "\nlast-without-newline"
	var got []string
	copyLines(strings.NewReader(in), func(l string) { got = append(got, l) })
	want := []string{"a", "b", long[:maxLogLine], long[maxLogLine:], "last-without-newline"}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("lines = %d %q..., want %d", len(got), got[0], len(want))
	}
}
