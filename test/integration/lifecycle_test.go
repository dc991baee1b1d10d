package integration

import (
	"context"
	"fmt"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cubby-dev/cubby/internal/backend/local/leaks"
)

// pauseCycles is how many pause/resume cycles the lifecycle tests run per mode
// (CUBBY_PAUSE_CYCLES; default 3 so CI stays quick; the bar on gVisor is
// 100: CUBBY_PAUSE_CYCLES=100 -run GVisor).
func pauseCycles(t *testing.T) int {
	if v := os.Getenv("CUBBY_PAUSE_CYCLES"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("CUBBY_PAUSE_CYCLES=%q", v)
		}
		return n
	}
	return 3
}

// info is the part of GET /sandboxes/{id} the lifecycle tests read.
type info struct {
	State       string         `json:"state"`
	PauseMode   string         `json:"pauseMode"`        // E2B's: full or filesystem
	PauseMethod string         `json:"cubbyPauseMethod"` // freeze, checkpoint or filesystem
	EndAt       time.Time      `json:"endAt"`
	Lifecycle   map[string]any `json:"lifecycle"`
}

// mode names how the sandbox is paused as these tests do: "memory" (a runc
// freeze), "checkpoint" (gVisor), "filesystem", "" while running; a pauseMode
// that does not match the method (E2B's full for both memory-keeping methods)
// is "inconsistent".
func (in info) mode() string {
	want, mode := map[string]string{"freeze": "full", "checkpoint": "full", "filesystem": "filesystem", "": ""}, in.PauseMethod
	if mode == "freeze" {
		mode = "memory"
	}
	if w, ok := want[in.PauseMethod]; !ok || w != in.PauseMode {
		return "inconsistent"
	}
	return mode
}

func (sb *sandbox) info(t *testing.T) info {
	t.Helper()
	var in info
	if code := sb.s.api("GET", "/sandboxes/"+sb.ID, nil, &in); code != 200 {
		t.Fatalf("get %s: %d", sb.ID, code)
	}
	return in
}

// health probes the sandbox's envd /health through the gateway (the SDK's
// isRunning) and returns the status.
func (sb *sandbox) health(t *testing.T) int {
	t.Helper()
	req, _ := http.NewRequest("GET", sb.envdURL("/health"), nil)
	req.Header.Set("E2b-Sandbox-Id", sb.ID)
	req.Header.Set("E2b-Sandbox-Port", "49983")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("health of %s: %v", sb.ID, err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

func (sb *sandbox) pause(t *testing.T, body map[string]any) {
	t.Helper()
	if code := sb.s.api("POST", "/sandboxes/"+sb.ID+"/pause", body, nil); code != 204 {
		t.Fatalf("pause %s: %d\n%s", sb.ID, code, sb.s.log())
	}
}

func (sb *sandbox) connect(t *testing.T, timeout int) int {
	t.Helper()
	return sb.s.api("POST", "/v2/sandboxes/"+sb.ID+"/connect", map[string]any{"timeout": timeout}, nil)
}

// mustRun runs cmd and fails unless it exits 0 with output want (want "" = any).
func (sb *sandbox) mustRun(ctx context.Context, t *testing.T, cmd, want string) string {
	t.Helper()
	out, code := sb.run(ctx, t, cmd)
	if code != 0 || (want != "" && out != want) {
		t.Fatalf("%s: %q exited %d with %q, want %q", sb.ID, cmd, code, out, want)
	}
	return out
}

// leakOptions says where this server keeps host resources (server layout:
// <data>/sandboxes, --run-dir, <data>/runc, <data>/runsc; nft table cubby_<bridge>).
func (s *server) leakOptions() leaks.Options {
	return leaks.Options{
		SandboxesDir: filepath.Join(s.DataDir, "sandboxes"),
		RunDir:       s.RunDir,
		RuntimeRoots: []string{filepath.Join(s.DataDir, "runc"), filepath.Join(s.DataDir, "runsc")},
		NftTable:     "cubby_" + s.Bridge,
	}
}

// resources inventories what the host holds for sandbox id.
func (s *server) resources(t *testing.T, id string, addr netip.Addr) leaks.Resources {
	t.Helper()
	r, err := leaks.Scan(s.leakOptions(), id, addr)
	if err != nil {
		t.Fatalf("leak scan of %s: %v", id, err)
	}
	return r
}

// settle re-scans sandbox id until ok accepts its resources or 10 s passed (the
// kernel finishes killing a container's last processes asynchronously), and
// fails with what was found.
func (s *server) settle(t *testing.T, id, what string, ok func(leaks.Resources) bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		r := s.resources(t, id, netip.Addr{})
		if ok(r) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("sandbox %s %s: %s", id, what, r)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// wantGone fails unless nothing at all is left of sandbox id.
func (s *server) wantGone(t *testing.T, id string) {
	t.Helper()
	s.settle(t, id, "leaked", leaks.Resources.Empty)
}

// wantStopped fails unless sandbox id holds only what a pause to disk keeps: its
// directory (disk image), netns, user namespace, id range and veth; no
// container, cgroup, mount or process.
func (s *server) wantStopped(t *testing.T, id string) {
	t.Helper()
	s.settle(t, id, "paused to disk holds", func(r leaks.Resources) bool {
		return !r.Running() && r.Dir && len(r.Netns) == 1 && len(r.Veths) == 1 && len(r.Userns) == 1 && r.Lease != ""
	})
}

// wantRunning fails unless sandbox id has its container resources.
func (s *server) wantRunning(t *testing.T, id string) {
	t.Helper()
	r := s.resources(t, id, netip.Addr{})
	if len(r.Mounts) == 0 || len(r.Cgroups) == 0 || len(r.States) == 0 || len(r.Processes) == 0 ||
		len(r.Netns) != 1 || len(r.Veths) != 1 || len(r.Userns) != 1 || r.Lease == "" {
		t.Fatalf("running sandbox %s lacks resources: %s", id, r)
	}
}

// startTicker starts a detached background process that appends a line to
// ~/ticks every 100 ms and returns its PID.
func (sb *sandbox) startTicker(ctx context.Context, t *testing.T) string {
	t.Helper()
	pid := sb.mustRun(ctx, t, `setsid sh -c 'while :; do echo t >> /home/user/ticks; sleep 0.1; done' >/dev/null 2>&1 < /dev/null & echo $!`, "")
	return strings.TrimSpace(pid)
}

// tickerAlive reports whether the ticker PID still runs and ~/ticks still grows.
func (sb *sandbox) tickerAlive(ctx context.Context, t *testing.T, pid string) bool {
	t.Helper()
	out, _ := sb.run(ctx, t, fmt.Sprintf(`grep -q ticks /proc/%s/cmdline 2>/dev/null || { echo dead; exit 0; }
a=$(wc -l < /home/user/ticks); for i in $(seq 100); do sleep 0.05; b=$(wc -l < /home/user/ticks); [ "$b" -gt "$a" ] && { echo alive; exit 0; }; done; echo stuck`, pid))
	return strings.TrimSpace(out) == "alive"
}

// checkPaused asserts what the wire shows for a paused sandbox: getInfo state and
// mode, 502 on the sandbox side, listed as paused, 409 on a second pause.
func (sb *sandbox) checkPaused(t *testing.T, mode string) {
	t.Helper()
	if in := sb.info(t); in.State != "paused" || in.mode() != mode {
		t.Fatalf("paused info = %+v, want mode %s", in, mode)
	}
	if code := sb.health(t); code != 502 {
		t.Fatalf("health while paused = %d, want 502", code)
	}
	var list []map[string]any
	sb.s.api("GET", "/v2/sandboxes?state=paused", nil, &list)
	found := false
	for _, l := range list {
		found = found || l["sandboxID"] == sb.ID
	}
	if !found {
		t.Fatalf("%s missing from the paused list %v", sb.ID, list)
	}
	if code := sb.s.api("POST", "/sandboxes/"+sb.ID+"/pause", map[string]any{}, nil); code != 409 {
		t.Fatalf("second pause = %d, want 409", code)
	}
}

// TestPauseResumeCycles: pause/resume cycles on runc in both modes with files
// written every cycle and a background process: frozen (memory) keeps the process
// running through every cycle; filesystem pause frees the container (no cgroup,
// mount or process left) and keeps every file, and the sandbox starts again.
func TestPauseResumeCycles(t *testing.T) {
	s := startServer(t)
	cycles := pauseCycles(t)
	for _, tc := range []struct {
		mode string
		body map[string]any
	}{
		{"memory", map[string]any{}},
		{"filesystem", map[string]any{"memory": false}},
	} {
		t.Run(tc.mode, func(t *testing.T) {
			sb := s.create(t, map[string]any{"timeout": 600})
			ctx := ctxT(t, 10*time.Minute)
			pid := sb.startTicker(ctx, t)
			sb.mustRun(ctx, t, `echo v0 > /home/user/f0 && python3 -c 'x=42' && echo ok`, "ok\n")
			for i := 1; i <= cycles; i++ {
				sb.pause(t, tc.body)
				sb.checkPaused(t, tc.mode)
				if tc.mode == "filesystem" {
					s.wantStopped(t, sb.ID)
				}
				if code := sb.connect(t, 600); code != 201 {
					t.Fatalf("cycle %d: connect = %d, want 201\n%s", i, code, s.log())
				}
				if code := sb.connect(t, 600); code != 200 {
					t.Fatalf("cycle %d: connect running = %d, want 200", i, code)
				}
				want := ""
				for j := 0; j < i; j++ {
					want += fmt.Sprintf("v%d\n", j)
				}
				sb.mustRun(ctx, t, fmt.Sprintf(`echo v%d > /home/user/f%d; cat $(ls -v /home/user/f*)`, i, i), want+fmt.Sprintf("v%d\n", i))
				if alive := sb.tickerAlive(ctx, t, pid); alive != (tc.mode == "memory") {
					t.Fatalf("cycle %d: background process alive=%v in mode %s", i, alive, tc.mode)
				}
			}
			s.wantRunning(t, sb.ID)
			sb.pause(t, tc.body)
			if code := s.api("DELETE", "/sandboxes/"+sb.ID, nil, nil); code != 204 {
				t.Fatalf("kill paused: %d", code)
			}
			s.wantGone(t, sb.ID)
			if code := sb.connect(t, 60); code != 404 {
				t.Fatalf("connect killed = %d, want 404", code)
			}
		})
	}
}

// TestAutoPauseAutoResume: a sandbox created with autoPause and autoResume is
// paused (not killed) at its deadline, stays paused past it, and the next request
// through the gateway resumes it and is answered; its files survive.
func TestAutoPauseAutoResume(t *testing.T) {
	s := startServer(t)
	for _, tc := range []struct {
		mode string
		body map[string]any
	}{
		{"memory", map[string]any{}},
		{"filesystem", map[string]any{"autoPauseMemory": false}},
	} {
		t.Run(tc.mode, func(t *testing.T) {
			body := map[string]any{"timeout": 2, "autoPause": true, "autoResume": map[string]bool{"enabled": true}}
			for k, v := range tc.body {
				body[k] = v
			}
			sb := s.create(t, body)
			ctx := ctxT(t, 2*time.Minute)
			sb.mustRun(ctx, t, `echo kept > /home/user/kept && echo ok`, "ok\n")
			if in := sb.info(t); in.Lifecycle["onTimeout"] != "pause" || in.Lifecycle["autoResume"] != true {
				t.Fatalf("lifecycle = %v", in.Lifecycle)
			}
			deadline := time.Now().Add(time.Minute)
			for sb.info(t).State != "paused" {
				if time.Now().After(deadline) {
					t.Fatalf("not paused after its deadline: %+v", sb.info(t))
				}
				time.Sleep(100 * time.Millisecond)
			}
			if in := sb.info(t); in.mode() != tc.mode {
				t.Fatalf("auto-paused mode = %+v, want %q", in, tc.mode)
			}
			if tc.mode == "filesystem" {
				s.wantStopped(t, sb.ID)
			}
			// Traffic wakes it: the request waits for the resume and is proxied.
			if code := sb.health(t); code/100 != 2 {
				t.Fatalf("health through the gateway of an autoResume sandbox = %d\n%s", code, s.log())
			}
			if in := sb.info(t); in.State != "running" || time.Until(in.EndAt) < 200*time.Second {
				t.Fatalf("after auto-resume: %+v", in)
			}
			sb.mustRun(ctx, t, `cat /home/user/kept`, "kept\n")
		})
	}
}

// TestPausedSurviveServerKill: SIGKILL of the server with 10 sandboxes, some
// running, some frozen (memory) and some paused to disk (filesystem); after a
// restart every one is listed with its true state and mode, answers 502 while
// paused, resumes, has its files, and background processes survive everywhere
// except in the filesystem-paused ones; each keeps its user namespace id range.
// A second crash with more pauses follows; killing them all after the restart
// leaves nothing behind.
func TestPausedSurviveServerKill(t *testing.T) {
	s := startServer(t)
	ctx := ctxT(t, 10*time.Minute)
	type entry struct {
		sb     *sandbox
		mode   string // "" = running
		ticker string // PID of its background process
		ids    string // first line of its uid_map
	}
	const uidMap = `head -1 /proc/self/uid_map`
	modes := []string{"", "memory", "filesystem", "", "filesystem", "memory", "", "memory", "filesystem", ""}
	var all []entry
	for i, mode := range modes {
		sb := s.create(t, map[string]any{"timeout": 600})
		sb.mustRun(ctx, t, fmt.Sprintf(`echo file%d > /home/user/mine && echo ok`, i), "ok\n")
		all = append(all, entry{sb, mode, sb.startTicker(ctx, t), sb.mustRun(ctx, t, uidMap, "")})
	}
	for _, e := range all {
		switch e.mode {
		case "memory":
			e.sb.pause(t, map[string]any{})
		case "filesystem":
			e.sb.pause(t, map[string]any{"memory": false})
		}
	}
	s.kill9()
	s.restart()
	checkListed(t, s, len(all), func(i int) (*sandbox, string) { return all[i].sb, all[i].mode })
	for i, e := range all {
		code := e.sb.connect(t, 600)
		if (e.mode == "" && code != 200) || (e.mode != "" && code != 201) {
			t.Fatalf("sandbox %d (%q) connect after restart = %d\n%s", i, e.mode, code, s.log())
		}
		e.sb.mustRun(ctx, t, `cat /home/user/mine`, fmt.Sprintf("file%d\n", i))
		e.sb.mustRun(ctx, t, uidMap, e.ids)
		if alive := e.sb.tickerAlive(ctx, t, e.ticker); alive != (e.mode != "filesystem") {
			t.Fatalf("sandbox %d (%q): background process alive=%v after restart and resume", i, e.mode, alive)
		}
		s.wantRunning(t, e.sb.ID)
	}
	// Pause some again (both modes), crash again, and check once more.
	for i := range all {
		switch i % 3 {
		case 0:
			all[i].mode = "filesystem"
			all[i].sb.pause(t, map[string]any{"memory": false})
		case 1:
			all[i].mode = "memory"
			all[i].sb.pause(t, map[string]any{})
		default:
			all[i].mode = ""
		}
	}
	s.kill9()
	s.restart()
	checkListed(t, s, len(all), func(i int) (*sandbox, string) { return all[i].sb, all[i].mode })
	for i, e := range all {
		if e.mode != "" {
			if code := e.sb.connect(t, 600); code != 201 {
				t.Fatalf("sandbox %d (%q) second resume = %d\n%s", i, e.mode, code, s.log())
			}
		}
		e.sb.mustRun(ctx, t, `cat /home/user/mine`, fmt.Sprintf("file%d\n", i))
	}
	for _, e := range all {
		if code := s.api("DELETE", "/sandboxes/"+e.sb.ID, nil, nil); code != 204 {
			t.Fatalf("kill %s after restart: %d", e.sb.ID, code)
		}
	}
	for _, e := range all {
		s.wantGone(t, e.sb.ID)
	}
}

// checkListed asserts, after a restart, that each of the n sandboxes at(i) is
// listed with its true state, reports its pause mode, answers 502 while paused
// and, when paused to disk, holds no container.
func checkListed(t *testing.T, s *server, n int, at func(int) (*sandbox, string)) {
	t.Helper()
	var list []map[string]any
	s.api("GET", "/v2/sandboxes?state=running,paused", nil, &list)
	states := map[string]string{}
	for _, l := range list {
		states[l["sandboxID"].(string)] = l["state"].(string)
	}
	for i := 0; i < n; i++ {
		sb, mode := at(i)
		want := "running"
		if mode != "" {
			want = "paused"
		}
		if states[sb.ID] != want {
			t.Fatalf("sandbox %d (%s) listed %q after restart, want %q; list %v\n%s", i, mode, states[sb.ID], want, list, s.log())
		}
		if in := sb.info(t); in.mode() != mode || in.State != want {
			t.Fatalf("sandbox %d after restart: %+v, want state %s mode %q", i, in, want, mode)
		}
		if code := sb.health(t); (mode != "" && code != 502) || (mode == "" && code/100 != 2) {
			t.Fatalf("sandbox %d (%q) health after restart = %d", i, mode, code)
		}
		if mode == "filesystem" {
			s.wantStopped(t, sb.ID)
		}
	}
}

// TestKilledWhileServerDown: sandboxes whose records are killed or unknown while
// the server is down are cleaned up on restart, paused-to-disk ones included.
func TestKilledWhileServerDown(t *testing.T) {
	s := startServer(t)
	a := s.create(t, map[string]any{"timeout": 600})
	b := s.create(t, map[string]any{"timeout": 600})
	b.pause(t, map[string]any{"memory": false})
	s.kill9()
	// The store forgets both: remove the database so neither is known.
	for _, f := range []string{"cubby.db", "cubby.db-wal", "cubby.db-shm"} {
		_ = os.Remove(filepath.Join(s.DataDir, f))
	}
	s.restart()
	s.wantGone(t, a.ID)
	s.wantGone(t, b.ID)
}

// TestPausedNetworkRebuilt: a sandbox paused to disk whose network namespace and
// veth vanished (swept by another process, or a host reboot) gets a new network
// when it resumes, keeps blocking the internet when created without it, and
// releases its no-internet set membership when killed.
func TestPausedNetworkRebuilt(t *testing.T) {
	s := startServer(t)
	sb := s.create(t, map[string]any{"timeout": 600, "allow_internet_access": false})
	ctx := ctxT(t, 2*time.Minute)
	sb.mustRun(ctx, t, `echo kept > /home/user/kept && echo ok`, "ok\n")
	addr := func() netip.Addr {
		out := sb.mustRun(ctx, t, `hostname -I | cut -d' ' -f1`, "")
		a, err := netip.ParseAddr(strings.TrimSpace(out))
		if err != nil {
			t.Fatalf("sandbox address %q: %v", out, err)
		}
		return a
	}
	before := addr()
	if r := s.resources(t, sb.ID, before); !r.NoInternet {
		t.Fatalf("no-internet sandbox not in the set: %s", r)
	}
	sb.pause(t, map[string]any{"memory": false})
	s.wantStopped(t, sb.ID)
	r := s.resources(t, sb.ID, before)
	for _, ns := range r.Netns {
		if err := exec.Command("umount", ns).Run(); err != nil {
			t.Fatalf("umount %s: %v", ns, err)
		}
		_ = os.Remove(ns)
	}
	for _, v := range r.Veths {
		_ = exec.Command("ip", "link", "del", v).Run() // gone with its netns already, usually
	}
	if code := sb.connect(t, 600); code != 201 {
		t.Fatalf("resume without its network = %d\n%s", code, s.log())
	}
	sb.mustRun(ctx, t, `cat /home/user/kept`, "kept\n")
	after := addr()
	if r := s.resources(t, sb.ID, after); !r.NoInternet || len(r.Netns) != 1 || len(r.Veths) != 1 {
		t.Fatalf("rebuilt network: %s", r)
	}
	if code := s.api("DELETE", "/sandboxes/"+sb.ID, nil, nil); code != 204 {
		t.Fatalf("kill: %d", code)
	}
	s.wantGone(t, sb.ID)
	if r := s.resources(t, sb.ID, after); r.NoInternet {
		t.Fatalf("killed sandbox still in the no-internet set: %s", r)
	}
}
