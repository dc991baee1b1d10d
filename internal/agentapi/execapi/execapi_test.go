package execapi

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestLineBytes pins the bytes of every line kind as the interpreter has
// always streamed them (json.Encoder: sorted keys, HTML characters escaped,
// a newline after each line).
func TestLineBytes(t *testing.T) {
	for _, c := range []struct {
		line any
		want string
	}{
		{NewExecutions(7), `{"execution_count":7,"type":"number_of_executions"}`},
		{Output{Text: "<tag> & \"q\"\n", Timestamp: "2026-01-01T00:00:00.000000Z", Type: TypeStdout},
			`{"text":"\u003ctag\u003e \u0026 \"q\"\n","timestamp":"2026-01-01T00:00:00.000000Z","type":"stdout"}`},
		{Output{Text: "e", Timestamp: "2026-01-01T00:00:00.000001Z", Type: TypeStderr},
			`{"text":"e","timestamp":"2026-01-01T00:00:00.000001Z","type":"stderr"}`},
		{NewError("NameError", "name 'x' is not defined", "Traceback:\n  line 1\n"),
			`{"name":"NameError","traceback":"Traceback:\n  line 1\n","type":"error","value":"name 'x' is not defined"}`},
		{NewError("TimeoutError", "Execution timed out after 1s", ""),
			`{"name":"TimeoutError","traceback":"","type":"error","value":"Execution timed out after 1s"}`},
		{Marker{Type: TypeKeepalive}, `{"type":"keepalive"}`},
		{Marker{Type: TypeEnd}, `{"type":"end_of_execution"}`},
		{NewResult(nil, false), `{"extra":{},"is_main_result":false,"type":"result"}`},
		{NewResult(map[string]json.RawMessage{"text/plain": json.RawMessage(`"'quoted'"`), "image/png": json.RawMessage(`"iVBORw0KGgo="`)}, true),
			`{"extra":{},"is_main_result":true,"png":"iVBORw0KGgo=","text":"quoted","type":"result"}`},
		{NewResult(map[string]json.RawMessage{"text/plain": json.RawMessage(`""`)}, true),
			`{"extra":{},"is_main_result":true,"text":"","type":"result"}`},
		{NewResult(map[string]json.RawMessage{"text/plain": json.RawMessage(`["not", "a string"]`)}, false),
			`{"extra":{},"is_main_result":false,"text":["not","a string"],"type":"result"}`},
		{NewResult(map[string]json.RawMessage{"text/html": json.RawMessage(`"<b>&amp;</b>"`),
			"application/json": json.RawMessage(`{"a": [1, 2], "b": "<x>"}`), "application/vnd.custom+json": json.RawMessage(`{"x": "<y>"}`)}, false),
			`{"extra":{"application/vnd.custom+json":{"x":"\u003cy\u003e"}},"html":"\u003cb\u003e\u0026amp;\u003c/b\u003e","is_main_result":false,"json":{"a":[1,2],"b":"\u003cx\u003e"},"type":"result"}`},
		{NewResult(map[string]json.RawMessage{"e2b/chart": json.RawMessage(`{"type": "line"}`), "e2b/data": json.RawMessage(`{"a": [1]}`),
			"text/markdown": json.RawMessage(`"# t"`), "image/svg+xml": json.RawMessage(`"<svg/>"`), "image/jpeg": json.RawMessage(`"/9j/"`),
			"application/pdf": json.RawMessage(`"JVBE"`), "text/latex": json.RawMessage(`"$x$"`), "application/javascript": json.RawMessage(`"f()"`)}, false),
			`{"chart":{"type":"line"},"data":{"a":[1]},"extra":{},"is_main_result":false,"javascript":"f()","jpeg":"/9j/","latex":"$x$","markdown":"# t","pdf":"JVBE","svg":"\u003csvg/\u003e","type":"result"}`},
		{Context{ID: "c1", Language: "python", Cwd: "/home/user"}, `{"id":"c1","language":"python","cwd":"/home/user"}`},
	} {
		var b strings.Builder
		if err := json.NewEncoder(&b).Encode(c.line); err != nil {
			t.Fatal(err)
		}
		if got := b.String(); got != c.want+"\n" {
			t.Errorf("%T:\n got %s\nwant %s", c.line, got, c.want)
		}
	}
}

// TestResultFields: every lifted format has its field, and IsField knows
// exactly the Result's JSON names.
func TestResultFields(t *testing.T) {
	r := NewResult(nil, false)
	for mime, key := range mimeKeys {
		if r.Format(key) == nil || !IsField(key) {
			t.Errorf("%s → %s has no field", mime, key)
		}
	}
	for _, k := range []string{"type", "is_main_result", "extra"} {
		if !IsField(k) {
			t.Errorf("IsField(%q) = false", k)
		}
	}
	for _, k := range []string{"text/plain", "application/x-top", ""} {
		if IsField(k) {
			t.Errorf("IsField(%q) = true", k)
		}
	}
}

func TestContextPath(t *testing.T) {
	if got := ContextPath("a/b c"); got != "/contexts/a%2Fb%20c" {
		t.Fatalf("ContextPath = %q", got)
	}
}

func TestResultLineMapping(t *testing.T) {
	line := NewResult(map[string]json.RawMessage{}, true)
	if line.Extra == nil || !line.IsMainResult || line.Type != "result" {
		t.Fatalf("empty bundle = %v", line)
	}
	for in, want := range map[string]string{`'a'`: "a", `"b"`: "b", `'c"`: `'c"`, `'`: `'`, `x`: "x"} {
		if got := stripQuotes(in); got != want {
			t.Errorf("stripQuotes(%q) = %q, want %q", in, got, want)
		}
	}
}
