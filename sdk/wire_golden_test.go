package sdk

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestCodeInterpreterRequestBytes records the bodies RunCode and
// CreateCodeContext send and compares them with the bytes the SDK has always
// sent: absent options are absent keys, never nulls.
func TestCodeInterpreterRequestBytes(t *testing.T) {
	var mu sync.Mutex
	var bodies []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		bodies = append(bodies, r.Method+" "+r.URL.Path+" "+string(b))
		mu.Unlock()
		if r.URL.Path == "/execute" {
			io.WriteString(w, `{"type":"end_of_execution"}`+"\n")
			return
		}
		io.WriteString(w, `{"id":"c1","language":"r","cwd":"/tmp"}`)
	}))
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sbx, err := Connect(ctx, "local", &ConnectOptions{ConnectionOptions: ConnectionOptions{Debug: true, SandboxURL: srv.URL}})
	if err != nil {
		t.Fatal(err)
	}
	defer sbx.Close()
	for _, o := range []*RunCodeOptions{nil, {Language: "js"}, {Context: &CodeContext{ID: "c<1>"}, Envs: map[string]string{"A": "b&c"}},
		{Envs: map[string]string{}}} {
		if _, err := sbx.RunCode(ctx, "print('<x>')", o); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := sbx.RunCode(ctx, "", nil); err != nil {
		t.Fatal(err)
	}
	for _, o := range []*CodeContextOptions{nil, {}, {Language: "r", Cwd: "/tmp"}} {
		if c, err := sbx.CreateCodeContext(ctx, o); err != nil || *c != (CodeContext{ID: "c1", Language: "r", Cwd: "/tmp"}) {
			t.Fatalf("create context: %+v %v", c, err)
		}
	}
	want := []string{
		`POST /execute {"code":"print('\u003cx\u003e')"}`,
		`POST /execute {"code":"print('\u003cx\u003e')","language":"js"}`,
		`POST /execute {"code":"print('\u003cx\u003e')","context_id":"c\u003c1\u003e","env_vars":{"A":"b\u0026c"}}`,
		`POST /execute {"code":"print('\u003cx\u003e')"}`,
		`POST /execute {"code":""}`,
		`POST /contexts {}`,
		`POST /contexts {}`,
		`POST /contexts {"cwd":"/tmp","language":"r"}`,
	}
	if !reflect.DeepEqual(bodies, want) {
		t.Fatalf("bodies:\n%s\nwant:\n%s", strings.Join(bodies, "\n"), strings.Join(want, "\n"))
	}
}

// TestReadExecutionOddLines decodes lines a server may send beyond Cubby's
// own: formats at the top level of a result, null values, a mistyped flag,
// unknown fields and types.
func TestReadExecutionOddLines(t *testing.T) {
	stream := strings.Join([]string{
		`{"type":"result","text":null,"is_main_result":"yes","extra":null,"application/x-top":{"k":[1]},"png":null}`,
		`{"type":"result","text":"'q'","html":"<p>","markdown":"m","svg":"<svg/>","jpeg":"j","pdf":"p","latex":"l","javascript":"js","json":{"a":1},"data":{"c":[1]},"is_main_result":true,"extra":{"x/y":null,"a/b":"v"},"z":null}`,
		`{"type":"stdout","text":"o","timestamp":"bad","extra_field":1}`,
		`{"type":"stderr","text":"e","timestamp":"2026-08-22T10:00:00Z"}`,
		`{"type":"number_of_executions","execution_count":3}`,
		`not json`,
		`{"type":"error","name":"E","value":"v","traceback":"t"}`,
	}, "\n")
	exec := &Execution{}
	if err := readExecution(strings.NewReader(stream), exec, &RunCodeOptions{}); err != nil {
		t.Fatal(err)
	}
	want := &Execution{
		Results: []Result{
			{Extra: map[string]any{"application/x-top": map[string]any{"k": []any{1.0}}}},
			{Text: "'q'", HTML: "<p>", Markdown: "m", SVG: "<svg/>", JPEG: "j", PDF: "p", LaTeX: "l", JavaScript: "js",
				JSON: map[string]any{"a": 1.0}, Data: map[string]any{"c": []any{1.0}}, IsMainResult: true,
				Extra: map[string]any{"x/y": nil, "a/b": "v"}},
		},
		Logs:           Logs{Stdout: []string{"o"}, Stderr: []string{"e"}},
		Error:          &ExecutionError{Name: "E", Value: "v", Traceback: "t"},
		ExecutionCount: 3,
	}
	if !reflect.DeepEqual(exec, want) {
		t.Fatalf("execution\n%#v\nwant\n%#v", exec, want)
	}
}
