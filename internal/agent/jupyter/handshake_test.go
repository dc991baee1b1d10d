package jupyter

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestHandshakeTimeoutRetries starts a TCP kernel whose first start binds its
// five ports but never speaks (as a wedged kernel does) and whose second start
// is ipykernel: the first attempt times out, is killed, and the kernel starts
// on the second with new ports.
func TestHandshakeTimeoutRetries(t *testing.T) {
	py := pythonSpec(t)
	dir := t.TempDir()
	marker := filepath.Join(dir, "started-once")
	wedge := filepath.Join(dir, "wedge.py")
	if err := os.WriteFile(wedge, []byte(`import json, socket, sys, time
c = json.load(open(sys.argv[1]))
socks = []
for k in ("shell_port", "iopub_port", "stdin_port", "control_port", "hb_port"):
    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((c["ip"], c[k])); s.listen(); socks.append(s)
time.sleep(600)
`), 0o644); err != nil {
		t.Fatal(err)
	}
	script := filepath.Join(dir, "kernel.sh")
	body := "#!/bin/sh\nif [ ! -e " + marker + " ]; then touch " + marker + "; exec " + py.Argv[0] + " " + wedge + " \"$1\"; fi\n" +
		"exec " + strings.Join(quoteAll(py.Argv[:len(py.Argv)-1]), " ") + " \"$1\"\n"
	if err := os.WriteFile(script, []byte(body), 0o755); err != nil {
		t.Fatal(err)
	}
	spec := &KernelSpec{Name: "flaky", Argv: []string{script, "{connection_file}"}, Language: "python"}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	t0 := time.Now()
	k, err := Start(ctx, spec, Options{Transport: TCP, RuntimeDir: t.TempDir(), HandshakeTimeout: 5 * time.Second})
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	defer k.Close()
	if _, err := os.Stat(marker); err != nil {
		t.Fatal("the wedged first start did not run")
	}
	if took := time.Since(t0); took < 5*time.Second {
		t.Fatalf("started in %v: the first attempt was not the wedged one", took)
	}
	r, err := k.Execute(ctx, ExecuteRequest{Code: "6 * 7"}, nil)
	if err != nil || r.Status != "ok" {
		t.Fatalf("execute after the retry: %+v, %v", r, err)
	}
}

func quoteAll(args []string) []string {
	out := make([]string, len(args))
	for i, a := range args {
		out[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
	}
	return out
}
