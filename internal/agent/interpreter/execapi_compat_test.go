package interpreter

import (
	"encoding/json"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"

	"github.com/cubby-dev/cubby/internal/agentapi/execapi"
)

// bundles are MIME bundles covering every lifted format, quotes stripped or
// not, non-string text, HTML-escaped characters, unknown types and none.
var bundles = []map[string]json.RawMessage{
	{"text/plain": json.RawMessage(`"'quoted'"`), "image/png": json.RawMessage(`"iVBORw0KGgo="`)},
	{"text/plain": json.RawMessage(`"\"dq\""`)},
	{"text/plain": json.RawMessage(`""`)},
	{"text/plain": json.RawMessage(`"'"`)},
	{"text/plain": json.RawMessage(`["not", "a string"]`)},
	{"text/html": json.RawMessage(`"<b>&amp;</b>"`), "application/json": json.RawMessage(`{"a": [1, 2], "b": "<x>"}`),
		"application/vnd.custom+json": json.RawMessage(`{"x": "<y>"}`), "text/x-other": json.RawMessage(`"z"`)},
	{},
	{"e2b/chart": json.RawMessage(`{"type": "line", "elements": []}`), "e2b/data": json.RawMessage(`{"a": [1, null]}`),
		"text/markdown": json.RawMessage(`"# t"`), "image/svg+xml": json.RawMessage(`"<svg/>"`),
		"image/jpeg": json.RawMessage(`"/9j/"`), "application/pdf": json.RawMessage(`"JVBE"`),
		"text/latex": json.RawMessage(`"$x$"`), "application/javascript": json.RawMessage(`"alert(1)"`)},
	{"text/plain": json.RawMessage(`null`), "e2b/chart": json.RawMessage(`null`)},
}

// TestExecAPIMatchesStreamBytes writes every line kind through the stream's
// map-based encoders and the same lines as execapi types, and requires the
// same bytes.
func TestExecAPIMatchesStreamBytes(t *testing.T) {
	rec := httptest.NewRecorder()
	s := newStream(rec, nil)
	var want strings.Builder
	enc := json.NewEncoder(&want)
	s.executions(7)
	enc.Encode(execapi.NewExecutions(7))
	for _, text := range []string{"hi\n", "<tag> & \"q\"\n", "\x1b[31mred\u2028"} {
		s.output(lineStdout, text, "2026-01-01T00:00:00.000000Z")
		enc.Encode(execapi.Output{Text: text, Timestamp: "2026-01-01T00:00:00.000000Z", Type: execapi.TypeStdout})
		s.output(lineStderr, text, "2026-01-01T00:00:00.000001Z")
		enc.Encode(execapi.Output{Text: text, Timestamp: "2026-01-01T00:00:00.000001Z", Type: execapi.TypeStderr})
	}
	for _, main := range []bool{true, false} {
		for _, b := range bundles {
			s.result(b, main)
			enc.Encode(execapi.NewResult(b, main))
		}
	}
	s.kernelError("NameError", "name 'x' is <not> defined", []string{"Traceback:\n", "  line 1\n"})
	enc.Encode(execapi.NewError("NameError", "name 'x' is <not> defined", "Traceback:\n  line 1\n"))
	s.keepalive(0)
	enc.Encode(execapi.Marker{Type: execapi.TypeKeepalive})
	s.end()
	enc.Encode(execapi.Marker{Type: execapi.TypeEnd})
	if got := rec.Body.String(); got != want.String() {
		t.Fatalf("stream bytes differ\nmaps:\n%s\nexecapi:\n%s", got, want.String())
	}

	rec = httptest.NewRecorder()
	s = newStream(rec, nil)
	s.serviceError(ErrNameTimeout, "Execution timed out after 1s")
	if got, want := rec.Body.String(), mustLine(t, execapi.NewError(ErrNameTimeout, "Execution timed out after 1s", "")); got != want {
		t.Fatalf("service error: %s, execapi %s", got, want)
	}
}

func mustLine(t *testing.T, v any) string {
	t.Helper()
	var b strings.Builder
	if err := json.NewEncoder(&b).Encode(v); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// TestExecAPIRequestsDecodeAlike decodes request bodies as the SDKs send them
// (absent, null and set fields) into the handler's types and execapi's.
func TestExecAPIRequestsDecodeAlike(t *testing.T) {
	for _, body := range []string{`{"code":"1"}`, `{"code":"1","context_id":null,"language":null,"env_vars":null}`,
		`{"code":"x","context_id":"c1","env_vars":{"A":"b"}}`, `{"code":"","language":" Python "}`} {
		var old executeRequest
		var typed execapi.ExecuteRequest
		if json.Unmarshal([]byte(body), &old) != nil || json.Unmarshal([]byte(body), &typed) != nil {
			t.Fatalf("decode %s", body)
		}
		if old.Code != typed.Code || !reflect.DeepEqual(old.ContextID, typed.ContextID) ||
			!reflect.DeepEqual(old.Language, typed.Language) || !reflect.DeepEqual(old.EnvVars, typed.EnvVars) {
			t.Errorf("%s: %+v vs %+v", body, old, typed)
		}
	}
	for _, body := range []string{`{}`, `{"language":"js","cwd":"/tmp","user":"root"}`, `{"language":null,"cwd":null}`} {
		var old createContextRequest
		var typed execapi.CreateContextRequest
		if json.Unmarshal([]byte(body), &old) != nil || json.Unmarshal([]byte(body), &typed) != nil {
			t.Fatalf("decode %s", body)
		}
		if !reflect.DeepEqual(old.Language, typed.Language) || !reflect.DeepEqual(old.Cwd, typed.Cwd) || !reflect.DeepEqual(old.User, typed.User) {
			t.Errorf("%s: %+v vs %+v", body, old, typed)
		}
	}
	c := Context{ID: "id<1>", Language: "python", Cwd: "/home/user"}
	if got, want := mustLine(t, c), mustLine(t, execapi.Context(c)); got != want {
		t.Errorf("context: %s vs %s", got, want)
	}
}
