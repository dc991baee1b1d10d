package jupyter

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

func writeSpec(t *testing.T, dir, name, body string) {
	t.Helper()
	d := filepath.Join(dir, name)
	if err := os.MkdirAll(d, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(d, "kernel.json"), []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestKernelSpecDiscovery(t *testing.T) {
	a, b := t.TempDir(), t.TempDir()
	writeSpec(t, a, "Py", `{"argv":["a","-f","{connection_file}","{resource_dir}"],"language":"python","interrupt_mode":"message","env":{"K":"v"}}`)
	writeSpec(t, b, "py", `{"argv":["b"],"language":"python"}`)
	writeSpec(t, b, "r", `{"argv":["R"],"language":"R"}`)
	writeSpec(t, b, "broken", `{"argv":[]}`)
	writeSpec(t, b, "garbage", `not json`)
	dirs := []string{a, filepath.Join(t.TempDir(), "missing"), b}
	specs := FindKernelSpecs(dirs)
	var names []string
	for _, s := range specs {
		names = append(names, s.Name)
	}
	if !reflect.DeepEqual(names, []string{"py", "r"}) {
		t.Fatalf("names = %v", names)
	}
	ks, err := LookupKernelSpec(dirs, "PY")
	if err != nil {
		t.Fatal(err)
	}
	if ks.Dir != filepath.Join(a, "Py") || ks.InterruptMode != "message" || ks.Env["K"] != "v" {
		t.Fatalf("spec = %+v", ks)
	}
	got := ks.argv("/x/conn.json")
	if !reflect.DeepEqual(got, []string{"a", "-f", "/x/conn.json", ks.Dir}) {
		t.Fatalf("argv = %v", got)
	}
	if _, err := LookupKernelSpec(dirs, "nope"); !errors.Is(err, ErrNoKernelSpec) {
		t.Fatalf("err = %v", err)
	}
}

func TestKernelSpecDirs(t *testing.T) {
	got := KernelSpecDirs("/home/u", "/j1:/j2")
	want := []string{"/j1/kernels", "/j2/kernels", "/home/u/.local/share/jupyter/kernels",
		"/usr/local/share/jupyter/kernels", "/usr/share/jupyter/kernels"}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("dirs = %v", got)
	}
}

func TestSignAndVerify(t *testing.T) {
	s := signer{key: []byte("secret")}
	h := Header{MsgID: "m1", MsgType: "execute_request", Version: ProtocolVersion}
	frames, err := s.encode(h, nil, map[string]string{"code": "1"})
	if err != nil {
		t.Fatal(err)
	}
	// A ROUTER-side routing prefix or SUB topic before the delimiter is skipped.
	in := append([][]byte{[]byte("topic")}, frames...)
	m, err := s.decode("iopub", in)
	if err != nil || m.Header.MsgID != "m1" || string(m.Content) != `{"code":"1"}` {
		t.Fatalf("decode = %+v, %v", m, err)
	}
	in[len(in)-1] = []byte(`{"code":"2"}`)
	if _, err := s.decode("iopub", in); !errors.Is(err, ErrBadSignature) {
		t.Fatalf("tampered content: err = %v", err)
	}
	if _, err := (signer{key: []byte("other")}).decode("shell", frames); !errors.Is(err, ErrBadSignature) {
		t.Fatalf("wrong key: err = %v", err)
	}
	if _, err := s.decode("shell", frames[:3]); err == nil {
		t.Fatal("short message accepted")
	}
	// Empty key: no signature, anything verifies.
	frames, _ = signer{}.encode(h, &h, struct{}{})
	if len(frames[1]) != 0 {
		t.Fatal("empty key produced a signature")
	}
	if m, err := (signer{}).decode("shell", frames); err != nil || m.ParentHeader.MsgID != "m1" {
		t.Fatalf("unsigned decode = %+v, %v", m, err)
	}
}

func TestCappedLog(t *testing.T) {
	p := filepath.Join(t.TempDir(), "log")
	l, err := openCappedLog(p, 100)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 50; i++ {
		if n, err := l.Write([]byte("0123456789")); n != 10 || err != nil {
			t.Fatalf("write = %d, %v", n, err)
		}
	}
	l.Close()
	st, _ := os.Stat(p)
	if st.Size() > 100 {
		t.Fatalf("log size %d > cap", st.Size())
	}
}
