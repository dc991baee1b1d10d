package jupyter

import (
	"context"
	"errors"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// TestDenoMessageInterrupt drives Deno's kernel (host: `npm i -g deno`), whose
// spec needs interrupt_mode "message" (SIGINT would kill it) and tcp (no ipc support).
func TestDenoMessageInterrupt(t *testing.T) {
	bin, err := exec.LookPath("deno")
	if err != nil {
		t.Skip("deno not installed (npm i -g deno)")
	}
	t.Parallel()
	spec := &KernelSpec{Name: "deno", Argv: []string{bin, "jupyter", "--kernel", "--conn", "{connection_file}"},
		Language: "typescript", InterruptMode: "message"}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	k, err := Start(ctx, spec, Options{Transport: TCP, SettleDelay: 25 * time.Millisecond, RuntimeDir: t.TempDir(), Env: []string{"NO_COLOR=1", "PATH=/usr/bin:/bin", "HOME=" + t.TempDir()}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { k.Close() })
	if r, c := run(t, k, "let n: number = 41; n + 1"); r.Status != "ok" || !resultContains(c, "42") {
		t.Fatalf("reply %+v msgs %v", r, c.types())
	}
	ictx, icancel := context.WithCancel(context.Background())
	on := func(m *Message) {
		if m.Type() == "stream" {
			icancel()
		}
	}
	_, err = k.Execute(ictx, ExecuteRequest{Code: "console.log('spin'); while (true) {}"}, on)
	if !errors.Is(err, context.Canceled) || errors.Is(err, ErrInterruptTimeout) {
		t.Fatalf("interrupt err = %v", err)
	}
	if r, c := run(t, k, "n"); r.Status != "ok" || !resultContains(c, "41") {
		t.Fatalf("after interrupt %+v %v", r, c.types())
	}
}

func resultContains(c *collector, s string) bool {
	m := c.first("execute_result")
	return m != nil && strings.Contains(string(m.Content), s)
}
