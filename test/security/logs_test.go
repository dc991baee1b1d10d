package security

import (
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cubby-dev/cubby/internal/testenv/testserver"
	"github.com/cubby-dev/cubby/sdk"
)

// outputCapBytes is what the host-side files of one sandbox may hold besides
// its fixed-size disk image: the capped output log and its predecessor (1 MiB
// each) and the small state files.
const outputCapBytes = 4 << 20

// floodSeconds is how long each flood of the sandbox's stdout and stderr runs.
const floodSeconds = 20

// floodCmd floods the container's stdout (fd 1) or stderr (fd 2) as root from
// the background, 1100 MiB of zeros (no newline) written to pid 1's output
// (toOutput); the exit status lands in /tmp/flood<fd>.rc (124: still writing
// when stopped after floodSeconds).
func floodCmd(fd int) string {
	inner := fmt.Sprintf(`timeout %d %s >/dev/null 2>/tmp/flood%d.err; echo $? > /tmp/flood%d.rc`,
		floodSeconds, toOutputCmd(fd, ""), fd, fd)
	return fmt.Sprintf(`setsid nohup sh -c %s >/dev/null 2>&1 &`, shellQuote(inner))
}

// toOutputCmd is the shell command running toOutput for pid 1's descriptor fd:
// it writes data, or floods when data is "".
func toOutputCmd(fd int, data string) string {
	return fmt.Sprintf("python3 -c %s %d %s", shellQuote(toOutput), fd, shellQuote(data))
}

// toOutput is a Python program that gets pid 1's output descriptor
// sys.argv[1] as root can, reopened through /proc/1/fd (the finding's attack)
// or, where the host-owned FIFO is not root's to open (a user namespace), taken
// with pidfd_getfd(2) (then sharing pid 1's non-blocking file description). It
// writes sys.argv[2], or 1100 MiB of zeros when that is empty, as fast as the
// descriptor takes them.
const toOutput = `import ctypes, os, select, sys
n = int(sys.argv[1])
try:
    out = os.open('/proc/1/fd/%d' % n, os.O_WRONLY | os.O_APPEND)
except PermissionError:
    out = ctypes.CDLL(None, use_errno=True).syscall(438, os.pidfd_open(1), n, 0)
    if out < 0:
        raise OSError(ctypes.get_errno(), 'pidfd_getfd')
data = sys.argv[2].encode() or bytes(1100 << 20)
view = memoryview(data)
while view:
    try:
        view = view[os.write(out, view[:1 << 20]):]
    except BlockingIOError:
        select.select([], [out], [])
`

// shellQuote quotes s as one word for sh.
func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// TestOutputFloodStaysBounded: root in a sandbox floods its stdout and stderr
// (which used to be a host file in append mode) and forges host records. The
// sandbox's host-side files stay under the cap, /health, the neighbour and the
// flooding sandbox's own agent keep answering, and GET /sandboxes/{id}/logs
// still works and shows every forged line labelled as the sandbox's own.
func TestOutputFloodStaysBounded(t *testing.T) {
	for _, rt := range runtimes(t) {
		t.Run(rt, func(t *testing.T) { checkOutputFlood(t, rt) })
	}
}

func checkOutputFlood(t *testing.T, rt string) {
	s := startServer(t, "--runtime", rt)
	flood := s.create(t, "")
	neighbour := s.create(t, "")
	dir := filepath.Join(s.DataDir, "sandboxes", flood.ID())
	disk := diskImageSize(t, dir)

	if res := asRoot(t, flood, floodCmd(1)+" "+floodCmd(2)+" echo started"); res.Code != 0 {
		t.Fatalf("start floods: %d %s", res.Code, res.Out)
	}
	var health []time.Duration
	deadline := time.Now().Add(floodSeconds * time.Second)
	for time.Now().Before(deadline) {
		health = append(health, healthTime(t, s))
		if out := run(t, neighbour, "", "echo alive"); out.Out != "alive\n" {
			t.Fatalf("neighbour during the flood: %+v", out)
		}
		if out := run(t, flood, "", "echo alive"); out.Out != "alive\n" {
			t.Fatalf("flooding sandbox's agent during the flood: %+v", out)
		}
		time.Sleep(time.Second)
	}
	t.Logf("GET /health during the flood: median %v over %d requests", median(health), len(health))
	waitNoFlood(t, flood)

	nonce := testserver.RandHex(8)
	forged := fmt.Sprintf(`{"time":"2001-01-01T00:00:00Z","level":"ERROR","msg":"host disk failure %s","source":"host","Source":"host"}`, nonce)
	asRoot(t, flood, fmt.Sprintf("%s; %s\nmkdir -p /run/cubby/kernels && printf '%%s\\n' %s > /run/cubby/kernels/forged.log",
		toOutputCmd(1, forged+"\n"), toOutputCmd(2, "\n"+forged+"\n"), shellQuote(forged)))
	checkForgedLabelled(t, s, flood.ID(), nonce)

	total, biggest := hostBytes(t, dir)
	if total > outputCapBytes {
		t.Errorf("host-side files of the flooding sandbox hold %d bytes (largest: %s), cap %d", total, biggest, outputCapBytes)
	}
	if got := diskImageSize(t, dir); got != disk {
		t.Errorf("disk image grew from %d to %d bytes", disk, got)
	}
	s.healthy(t)
	if out := run(t, flood, "", "echo alive"); out.Out != "alive\n" {
		t.Fatalf("flooding sandbox after the flood: %+v", out)
	}
}

// diskImageSize is the apparent size of the sandbox's disk image (fixed at create).
func diskImageSize(t *testing.T, dir string) int64 {
	t.Helper()
	st, err := os.Stat(filepath.Join(dir, "disk.img"))
	if err != nil {
		t.Fatal(err)
	}
	return st.Size()
}

// hostBytes sums the sizes of the regular files in the sandbox directory on
// the host, except its disk image and what lies beneath mount points (the
// sandbox's own disk), and names the largest.
func hostBytes(t *testing.T, dir string) (int64, string) {
	t.Helper()
	var root syscall.Stat_t
	if err := syscall.Stat(dir, &root); err != nil {
		t.Fatal(err)
	}
	var total, largest int64
	var biggest string
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		var st syscall.Stat_t
		if err := syscall.Lstat(path, &st); err != nil {
			return err
		}
		switch {
		case d.IsDir() && st.Dev != root.Dev:
			return filepath.SkipDir // a mount: the sandbox's own filesystem
		case !d.Type().IsRegular() || path == filepath.Join(dir, "disk.img"):
			return nil
		}
		total += st.Size
		if st.Size > largest {
			largest, biggest = st.Size, fmt.Sprintf("%s (%d bytes)", path, st.Size)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return total, biggest
}

// healthTime times one GET /health, failing the test unless it answers 200.
func healthTime(t *testing.T, s *server) time.Duration {
	t.Helper()
	start := time.Now()
	s.healthy(t)
	return time.Since(start)
}

func median(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}

// waitNoFlood waits until both floods have ended and checks that they did
// write (dd completed, or was still writing when stopped).
func waitNoFlood(t *testing.T, sbx *sdk.Sandbox) {
	t.Helper()
	for range 60 {
		res := asRoot(t, sbx, "cat /tmp/flood1.rc /tmp/flood2.rc 2>/dev/null")
		if codes := strings.Fields(res.Out); len(codes) == 2 {
			for _, c := range codes {
				if c != "0" && c != "124" {
					t.Fatalf("a flood failed (exit %s): %s", c, asRoot(t, sbx, "cat /tmp/flood*.err").Out)
				}
			}
			return
		}
		time.Sleep(time.Second)
	}
	t.Fatal("the floods did not end")
}

// sandboxLogsBody is GET /sandboxes/{id}/logs (E2B SandboxLogs).
type sandboxLogsBody struct {
	Logs []struct {
		Line string `json:"line"`
	} `json:"logs"`
	LogEntries []struct {
		Message string            `json:"message"`
		Fields  map[string]string `json:"fields"`
	} `json:"logEntries"`
}

// checkForgedLabelled polls GET /sandboxes/{id}/logs until the three forged
// records carrying nonce are there (stdout, stderr, kernel log), and checks
// that none passes for a host record: as JSON each says the source the host
// knows ("sandbox" or "kernel"), in `logs` and in `logEntries`.
func checkForgedLabelled(t *testing.T, s *server, id, nonce string) {
	t.Helper()
	var body sandboxLogsBody
	var lines []string
	for start := time.Now(); time.Since(start) < 30*time.Second; time.Sleep(200 * time.Millisecond) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		code, err := s.API(ctx, http.MethodGet, "/sandboxes/"+id+"/logs?limit=10000", nil, &body)
		cancel()
		if err != nil || code != http.StatusOK {
			t.Fatalf("GET logs: %d %v", code, err)
		}
		lines = lines[:0]
		for _, l := range body.Logs {
			if strings.Contains(l.Line, nonce) {
				lines = append(lines, l.Line)
			}
		}
		if len(lines) >= 3 {
			break
		}
	}
	if len(lines) < 3 {
		t.Fatalf("forged lines in logs: %q, want 3", lines)
	}
	for _, l := range lines {
		var rec map[string]any
		if json.Unmarshal([]byte(strings.TrimSpace(l)), &rec) == nil {
			if src := rec["source"]; (src != "sandbox" && src != "kernel") || rec["Source"] != nil {
				t.Errorf("forged line passes for a host record: %s", l)
			}
		}
	}
	for _, e := range body.LogEntries {
		if strings.Contains(e.Message, nonce) && e.Fields["source"] != "sandbox" && e.Fields["source"] != "kernel" {
			t.Errorf("forged log entry with source %q: %+v", e.Fields["source"], e)
		}
	}
}

// BenchmarkHealthDuringOutputFlood measures GET /health while root in a
// sandbox floods its stdout and stderr (floodCmd, for up to two minutes), and
// what the flood costs the server's process: "health-ms" is the median
// latency, "flood-cpu-%" the CPU time the server used during 5 s of flood
// before the requests (percent of one core).
func BenchmarkHealthDuringOutputFlood(b *testing.B) {
	ts := testserver.Start(b, testserver.Options{BridgePrefix: "cbsec"})
	s := &server{Server: ts}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	sbx, err := sdk.Create(ctx, &sdk.CreateOptions{Template: "base", ConnectionOptions: s.conn("")})
	if err != nil {
		b.Fatal(err)
	}
	defer sbx.Kill(context.Background())
	flood := strings.ReplaceAll(floodCmd(1)+" "+floodCmd(2), fmt.Sprintf("timeout %d ", floodSeconds), "timeout 120 ")
	if _, err := sbx.Commands.Run(ctx, flood+" echo started", &sdk.CommandOptions{User: "root"}); err != nil {
		b.Fatal(err)
	}
	time.Sleep(2 * time.Second) // the FIFO is full and the drain throttled
	cpu0 := processCPU(b, ts.DataDir)
	time.Sleep(5 * time.Second)
	floodCPU := processCPU(b, ts.DataDir) - cpu0
	var ds []time.Duration
	for b.Loop() {
		start := time.Now()
		resp, err := http.Get(ts.URL("/health"))
		if err != nil {
			b.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			b.Fatalf("health: %d", resp.StatusCode)
		}
		ds = append(ds, time.Since(start))
	}
	b.ReportMetric(float64(median(ds).Microseconds())/1000, "health-ms")
	b.ReportMetric(100*floodCPU.Seconds()/5, "flood-cpu-%")
}

// processCPU is the user and system CPU time of the `cubby serve` process
// whose command line names dataDir (/proc/<pid>/stat, clock ticks of 10 ms).
func processCPU(b *testing.B, dataDir string) time.Duration {
	b.Helper()
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, d := range dirs {
		cmdline, err := os.ReadFile(filepath.Join(d, "cmdline"))
		if err != nil || !strings.Contains(string(cmdline), "serve\x00") || !strings.Contains(string(cmdline), dataDir) {
			continue
		}
		stat, err := os.ReadFile(filepath.Join(d, "stat"))
		if err != nil {
			continue
		}
		f := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+2:]))
		var utime, stime int64
		fmt.Sscan(f[11], &utime)
		fmt.Sscan(f[12], &stime)
		return time.Duration(utime+stime) * 10 * time.Millisecond
	}
	b.Fatalf("no cubby serve process for %s", dataDir)
	return 0
}
