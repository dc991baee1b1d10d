package jupyter

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestFreePortsDistinct(t *testing.T) {
	for range 200 {
		ports, err := freePorts(5)
		if err != nil {
			t.Fatal(err)
		}
		seen := map[int]bool{}
		for _, p := range ports {
			if seen[p] || p <= 0 {
				t.Fatalf("ports = %v", ports)
			}
			seen[p] = true
		}
	}
}

// flakySpec wraps the host's ipykernel in a script that exits 1 (as Deno does
// when one of its picked ports was taken) on its first `fail` runs, counting
// runs in a file; it returns the spec and the counter path.
func flakySpec(t *testing.T, fail int) (*KernelSpec, string) {
	t.Helper()
	py := pythonSpec(t)
	dir := t.TempDir()
	runs := filepath.Join(dir, "runs")
	script := filepath.Join(dir, "kernel.sh")
	body := "#!/bin/sh\necho run >> " + runs + "\n" +
		"[ \"$(wc -l < " + runs + ")\" -le " + strconv.Itoa(fail) + " ] && { echo 'AddrInUse: Address already in use' >&2; exit 1; }\n" +
		"exec \"$@\"\n"
	if err := os.WriteFile(script, []byte(body), 0o755); err != nil {
		t.Fatal(err)
	}
	spec := *py
	spec.Argv = append([]string{script}, py.Argv...)
	return &spec, runs
}

func countRuns(t *testing.T, path string) int {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return strings.Count(string(b), "run\n")
}

func TestTCPStartRetriesFailedLaunch(t *testing.T) {
	spec, runs := flakySpec(t, 2)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	k, err := Start(ctx, spec, Options{Transport: TCP, ExtraArgs: pythonArgs, RuntimeDir: t.TempDir()})
	if err != nil {
		t.Fatalf("Start after two failed launches: %v", err)
	}
	defer k.Close()
	if n := countRuns(t, runs); n != 3 {
		t.Fatalf("launches = %d, want 3", n)
	}
	if r, c := run(t, k, "print(6 * 7)"); r.Status != "ok" || c.stream("stdout") != "42\n" {
		t.Fatalf("reply %+v, stdout %q", r, c.stream("stdout"))
	}
}

func TestTCPStartGivesUp(t *testing.T) {
	spec, runs := flakySpec(t, 9)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	_, err := Start(ctx, spec, Options{Transport: TCP, ExtraArgs: pythonArgs, RuntimeDir: t.TempDir()})
	if err == nil || !strings.Contains(err.Error(), "kernel died") {
		t.Fatalf("Start of a kernel that always exits: err = %v", err)
	}
	if n := countRuns(t, runs); n != tcpStartAttempts {
		t.Fatalf("launches = %d, want %d", n, tcpStartAttempts)
	}
}

func TestIPCStartDoesNotRetry(t *testing.T) {
	spec, runs := flakySpec(t, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	if _, err := Start(ctx, spec, Options{ExtraArgs: pythonArgs, RuntimeDir: t.TempDir()}); err == nil {
		t.Fatal("Start of an ipc kernel whose first launch exits succeeded")
	}
	if n := countRuns(t, runs); n != 1 {
		t.Fatalf("launches = %d, want 1", n)
	}
}
