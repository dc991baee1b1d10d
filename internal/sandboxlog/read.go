package sandboxlog

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/cubby-dev/cubby/internal/logfile"
)

// Line is one labelled line of a sandbox's logs.
type Line struct {
	Time   time.Time // when the host received (or, for host records, wrote) it
	Source string    // SourceHost, SourceSandbox or SourceKernel
	Text   string    // the line, labelled by Label
}

// Read returns the lines of the last maxBytes of <dir>/output.log (and of its
// predecessor when the current file holds fewer), oldest first, each labelled
// with its source (see Label). A sandbox that never wrote has none; errors
// come from the filesystem.
func Read(dir string, maxBytes int64) ([]Line, error) {
	data, _, err := logfile.ReadTail(filepath.Join(dir, LogName), maxBytes)
	if errors.Is(err, os.ErrNotExist) {
		return []Line{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read output log: %w", err)
	}
	out := []Line{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 64<<10), len(data)+1)
	for sc.Scan() {
		var rec record
		if json.Unmarshal(sc.Bytes(), &rec) != nil || rec.Time.IsZero() {
			continue
		}
		out = append(out, Line{Time: rec.Time, Source: rec.Source, Text: Label(rec.Line, rec.Source)})
	}
	return out, nil
}

// Label returns text as it is shown for source. A JSON object gets a "source"
// member with that value as its first member, every member whose name is
// "source" in any letter case removed (so an object written inside a sandbox
// never says "host"); other members keep their order and values. Text that
// starts like an object but is not valid JSON is prefixed with "<source>: "
// (so no lenient parser reads an object out of it). Anything else is kept as
// it is: only JSON objects can be records.
func Label(text, source string) string {
	trimmed := strings.TrimSpace(text)
	if !strings.HasPrefix(trimmed, "{") {
		return text
	}
	if out, ok := relabel(trimmed, source); ok {
		return out
	}
	return source + ": " + text
}

// relabel rewrites the JSON object obj with "source" set to source; ok is
// false unless obj is exactly one valid JSON object.
func relabel(obj, source string) (string, bool) {
	dec := json.NewDecoder(strings.NewReader(obj))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return "", false
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	b.WriteString(`{"source":`)
	_ = enc.Encode(source)
	for dec.More() {
		tok, err := dec.Token()
		key, isKey := tok.(string)
		var val json.RawMessage
		if err != nil || !isKey || dec.Decode(&val) != nil {
			return "", false
		}
		if strings.EqualFold(key, "source") {
			continue
		}
		b.WriteByte(',')
		_ = enc.Encode(key)
		b.WriteByte(':')
		b.Write(val)
	}
	if tok, err := dec.Token(); err != nil || tok != json.Delim('}') {
		return "", false
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return "", false
	}
	b.WriteByte('}')
	return strings.ReplaceAll(b.String(), "\n", ""), true
}
