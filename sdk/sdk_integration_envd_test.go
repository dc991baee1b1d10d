package sdk_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"io"
	"mime/multipart"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cubby-dev/cubby/sdk"
)

// TestFiles covers reading, writing (bytes, stream, many), listing, stat,
// rename, mkdir, remove, metadata and the file errors.
func TestFiles(t *testing.T) {
	ctx := ctxT(t, 2*time.Minute)
	sbx := newSandbox(t, nil)
	fs := sbx.Files

	wi, err := fs.Write(ctx, "docs/a.txt", []byte("alpha"), nil)
	if err != nil || wi.Path != "/home/user/docs/a.txt" || wi.Name != "a.txt" || wi.Type != sdk.FileTypeFile {
		t.Fatalf("Write = %+v, %v", wi, err)
	}
	if b, err := fs.Read(ctx, "docs/a.txt", nil); err != nil || string(b) != "alpha" {
		t.Fatalf("Read = %q, %v", b, err)
	}
	if s, err := fs.ReadString(ctx, "/home/user/docs/a.txt", nil); err != nil || s != "alpha" {
		t.Fatalf("ReadString = %q, %v", s, err)
	}
	if _, err := fs.Write(ctx, "empty.txt", nil, nil); err != nil {
		t.Fatal(err)
	}
	if b, err := fs.Read(ctx, "empty.txt", nil); err != nil || len(b) != 0 {
		t.Fatalf("empty file = %q, %v", b, err)
	}

	big := make([]byte, 6<<20+123)
	_, _ = rand.Read(big)
	if wi, err := fs.WriteReader(ctx, "big.bin", bytes.NewReader(big), nil); err != nil || wi.Path != "/home/user/big.bin" {
		t.Fatalf("WriteReader = %+v, %v", wi, err)
	}
	rc, err := fs.ReadStream(ctx, "big.bin", nil)
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(rc)
	rc.Close()
	if err != nil || !bytes.Equal(got, big) {
		t.Fatalf("ReadStream: %d bytes (want %d), %v", len(got), len(big), err)
	}

	infos, err := fs.WriteFiles(ctx, []sdk.WriteEntry{
		{Path: "multi/one.txt", Data: []byte("1")},
		{Path: "/home/user/multi/deep/two.txt", Reader: strings.NewReader("22")},
		{Path: "multi/three.txt", Data: []byte("333")},
	}, nil)
	if err != nil || len(infos) != 3 || infos[1].Path != "/home/user/multi/deep/two.txt" {
		t.Fatalf("WriteFiles = %+v, %v", infos, err)
	}
	if s, _ := fs.ReadString(ctx, "multi/deep/two.txt", nil); s != "22" {
		t.Fatalf("multi-file content %q", s)
	}

	entries, err := fs.List(ctx, "multi", nil)
	if err != nil {
		t.Fatal(err)
	}
	if names := entryNames(entries); !slices.Equal(names, []string{"deep", "one.txt", "three.txt"}) {
		t.Fatalf("List depth 1 = %v", names)
	}
	entries, err = fs.List(ctx, "multi", &sdk.ListDirOptions{Depth: 2})
	if err != nil || len(entries) != 4 || entries[1].Path != "/home/user/multi/deep/two.txt" || entries[0].Type != sdk.FileTypeDir {
		t.Fatalf("List depth 2 = %+v, %v", entries, err)
	}

	st, err := fs.GetInfo(ctx, "multi/three.txt", nil)
	if err != nil || st.Size != 3 || st.Permissions != "-rw-r--r--" || st.Owner != "user" || st.ModifiedTime.IsZero() {
		t.Fatalf("GetInfo = %+v, %v", st, err)
	}
	if ok, err := fs.Exists(ctx, "multi/one.txt", nil); err != nil || !ok {
		t.Fatalf("Exists(existing) = %v, %v", ok, err)
	}
	if ok, err := fs.Exists(ctx, "multi/nope.txt", nil); err != nil || ok {
		t.Fatalf("Exists(missing) = %v, %v", ok, err)
	}
	if e, err := fs.Rename(ctx, "multi/one.txt", "multi/uno.txt", nil); err != nil || e.Path != "/home/user/multi/uno.txt" {
		t.Fatalf("Rename = %+v, %v", e, err)
	}
	if created, err := fs.MakeDir(ctx, "newdir/sub", nil); err != nil || !created {
		t.Fatalf("MakeDir = %v, %v", created, err)
	}
	if created, err := fs.MakeDir(ctx, "newdir/sub", nil); err != nil || created {
		t.Fatalf("MakeDir(existing) = %v, %v", created, err)
	}
	if err := fs.Remove(ctx, "multi", nil); err != nil {
		t.Fatal(err)
	}
	if err := fs.Remove(ctx, "multi", nil); err != nil {
		t.Fatalf("Remove of a missing path: %v", err)
	}

	// Another user; metadata.
	if wi, err := fs.Write(ctx, "root.txt", []byte("r"), &sdk.WriteOptions{User: "root", Metadata: map[string]string{"Origin": "sdk-test"}}); err != nil || wi.Path != "/root/root.txt" {
		t.Fatalf("Write as root = %+v, %v", wi, err)
	}
	if st, err := fs.GetInfo(ctx, "/root/root.txt", &sdk.FileOptions{User: "root"}); err != nil || st.Owner != "root" || st.Metadata["origin"] != "sdk-test" {
		t.Fatalf("root file = %+v, %v", st, err)
	}

	// Errors.
	_, err = fs.Read(ctx, "missing.txt", nil)
	assertNotFound(t, "Read(missing)", err, sdk.ResourceFile)
	_, err = fs.GetInfo(ctx, "missing.txt", nil)
	assertNotFound(t, "GetInfo(missing)", err, sdk.ResourceFile)
	_, err = fs.List(ctx, "missing-dir", nil)
	assertNotFound(t, "List(missing)", err, sdk.ResourceFile)
	_, err = fs.Rename(ctx, "missing.txt", "x.txt", nil)
	assertNotFound(t, "Rename(missing)", err, sdk.ResourceFile)
	var ia *sdk.InvalidArgumentError
	if _, err := fs.List(ctx, "big.bin", nil); !errors.As(err, &ia) {
		t.Fatalf("List(file): want *InvalidArgumentError, got %T %v", err, err)
	}
	if _, err := fs.Read(ctx, "newdir", nil); !errors.As(err, &ia) {
		t.Fatalf("Read(dir): want *InvalidArgumentError, got %T %v", err, err)
	}
	var auth *sdk.AuthenticationError
	if _, err := fs.Read(ctx, "x", &sdk.FileOptions{User: "nosuchuser"}); !errors.As(err, &auth) {
		t.Fatalf("Read as an unknown user: want *AuthenticationError, got %T %v", err, err)
	}
	if _, err := fs.GetInfo(ctx, "x", &sdk.FileOptions{User: "nosuchuser"}); !errors.As(err, &auth) {
		t.Fatalf("Stat as an unknown user: want *AuthenticationError, got %T %v", err, err)
	}
}

func entryNames(es []sdk.EntryInfo) []string {
	var out []string
	for _, e := range es {
		out = append(out, e.Name)
	}
	return out
}

// TestFileURLs uses signed URLs with a plain HTTP client (no headers).
func TestFileURLs(t *testing.T) {
	sbx := newSandbox(t, nil)
	if sbx.AccessToken() == "" {
		t.Fatal("a v2 sandbox should be secured")
	}
	hc := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}

	up, err := sbx.UploadURL("uploads/u.txt", &sdk.FileURLOptions{Expiration: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	var body bytes.Buffer
	mw := multipart.NewWriter(&body)
	part, _ := mw.CreateFormFile("file", "u.txt")
	part.Write([]byte("uploaded by URL"))
	mw.Close()
	resp, err := hc.Post(up, mw.FormDataContentType(), &body)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("upload via signed URL: %s", resp.Status)
	}

	down, err := sbx.DownloadURL("uploads/u.txt", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err = hc.Get(down)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || string(b) != "uploaded by URL" {
		t.Fatalf("download via signed URL: %s %q", resp.Status, b)
	}

	// A signature for another path is rejected.
	u, _ := url.Parse(down)
	q := u.Query()
	q.Set("path", "/etc/shadow")
	u.RawQuery = q.Encode()
	resp, err = hc.Get(u.String())
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("tampered signed URL: %s, want 401", resp.Status)
	}
}

// TestWatchDir watches recursively, then checks Stop and the watch timeout.
func TestWatchDir(t *testing.T) {
	ctx := ctxT(t, time.Minute)
	sbx := newSandbox(t, nil)
	if _, err := sbx.Files.MakeDir(ctx, "watched", nil); err != nil {
		t.Fatal(err)
	}
	w, err := sbx.Files.WatchDir(ctx, "watched", &sdk.WatchOptions{Recursive: true, IncludeEntry: true, Timeout: sdk.NoTimeout})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sbx.Files.Write(ctx, "watched/a.txt", []byte("x"), nil); err != nil {
		t.Fatal(err)
	}
	waitEvent(t, w, func(e sdk.FilesystemEvent) bool {
		return e.Name == "a.txt" && (e.Type == sdk.EventWrite || e.Type == sdk.EventCreate)
	})
	if _, err := sbx.Files.MakeDir(ctx, "watched/sub", nil); err != nil {
		t.Fatal(err)
	}
	waitEvent(t, w, func(e sdk.FilesystemEvent) bool {
		return e.Name == "sub" && e.Type == sdk.EventCreate && e.Entry != nil && e.Entry.Type == sdk.FileTypeDir
	})
	if _, err := sbx.Files.Write(ctx, "watched/sub/deep.txt", []byte("y"), nil); err != nil {
		t.Fatal(err)
	}
	waitEvent(t, w, func(e sdk.FilesystemEvent) bool { return e.Name == "sub/deep.txt" })
	w.Stop()
	for range w.Events() {
	}
	if w.Err() != nil {
		t.Fatalf("Err after Stop = %v", w.Err())
	}

	short, err := sbx.Files.WatchDir(ctx, "watched", &sdk.WatchOptions{Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	for range short.Events() {
	}
	var te *sdk.TimeoutError
	if !errors.As(short.Err(), &te) {
		t.Fatalf("watch past its Timeout: want *TimeoutError, got %T %v", short.Err(), short.Err())
	}

	_, err = sbx.Files.WatchDir(ctx, "not-there", nil)
	assertNotFound(t, "WatchDir(missing)", err, sdk.ResourceFile)
}

func waitEvent(t *testing.T, w *sdk.WatchHandle, match func(sdk.FilesystemEvent) bool) {
	t.Helper()
	timeout := time.After(20 * time.Second)
	for {
		select {
		case e, ok := <-w.Events():
			if !ok {
				t.Fatalf("watch ended early: %v", w.Err())
			}
			if match(e) {
				return
			}
		case <-timeout:
			t.Fatal("no matching watch event")
		}
	}
}

// TestCommands covers Run with options and callbacks, exit errors, Start with
// stdin, List, Connect, Disconnect, Kill and the command errors.
func TestCommands(t *testing.T) {
	ctx := ctxT(t, 2*time.Minute)
	sbx := newSandbox(t, &sdk.CreateOptions{Envs: map[string]string{"BASE": "b"}})
	cmds := sbx.Commands

	var mu sync.Mutex
	var chunks []string
	res, err := cmds.Run(ctx, `echo "$BASE $FOO $(pwd) $(whoami)"; printf 'h\xc3'; printf '\xa9llo\n'; echo oops >&2`, &sdk.CommandOptions{
		Envs: map[string]string{"FOO": "f"}, Cwd: "/tmp", User: "root",
		OnStdout: func(s string) { mu.Lock(); chunks = append(chunks, s); mu.Unlock() },
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.ExitCode != 0 || res.Stdout != "b f /tmp root\nhéllo\n" || res.Stderr != "oops\n" {
		t.Fatalf("Run = %+v", res)
	}
	mu.Lock()
	if strings.Join(chunks, "") != res.Stdout {
		t.Fatalf("callbacks saw %q, result %q", chunks, res.Stdout)
	}
	mu.Unlock()
	if res, _ := cmds.Run(ctx, `echo "[$FOO]"`, nil); res.Stdout != "[]\n" {
		t.Fatalf("per-command env leaked: %q", res.Stdout)
	}

	res, err = cmds.Run(ctx, "echo out; echo bad >&2; exit 3", nil)
	var ee *sdk.CommandExitError
	if !errors.As(err, &ee) || ee.ExitCode != 3 || ee.Stdout != "out\n" || ee.Stderr != "bad\n" || res == nil || res.ExitCode != 3 {
		t.Fatalf("exit 3: %+v, %T %v", res, err, err)
	}

	var ia *sdk.InvalidArgumentError
	if _, err := cmds.Run(ctx, "true", &sdk.CommandOptions{Cwd: "/no/such/dir"}); !errors.As(err, &ia) {
		t.Fatalf("missing cwd: want *InvalidArgumentError, got %T %v", err, err)
	}
	var auth *sdk.AuthenticationError
	if _, err := cmds.Run(ctx, "true", &sdk.CommandOptions{User: "nosuchuser"}); !errors.As(err, &auth) {
		t.Fatalf("unknown user: want *AuthenticationError, got %T %v", err, err)
	}
	_, err = cmds.Run(ctx, "sleep 30", &sdk.CommandOptions{Timeout: time.Second})
	var te *sdk.TimeoutError
	if !errors.As(err, &te) && !(errors.As(err, &ee) && ee.ExitCode == -1) {
		t.Fatalf("command past its Timeout: want *TimeoutError (or a kill), got %T %v", err, err)
	}

	// stdin
	h, err := cmds.Start(ctx, "cat", &sdk.CommandOptions{Stdin: true, Tag: "cat-test"})
	if err != nil {
		t.Fatal(err)
	}
	if h.PID() == 0 {
		t.Fatal("no pid")
	}
	procs, err := cmds.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(procs, func(p sdk.ProcessInfo) bool { return p.PID == h.PID() && p.Tag == "cat-test" }) {
		t.Fatalf("List misses pid %d: %+v", h.PID(), procs)
	}
	if err := h.SendStdin(ctx, []byte("piped\n")); err != nil {
		t.Fatal(err)
	}
	if err := h.CloseStdin(ctx); err != nil {
		t.Fatal(err)
	}
	if res, err := h.Wait(ctx); err != nil || res.Stdout != "piped\n" {
		t.Fatalf("cat = %+v, %v", res, err)
	}

	// Disconnect, reconnect, kill.
	h, err = cmds.Start(ctx, "for i in $(seq 1 300); do echo tick $i; sleep 0.1; done", nil)
	if err != nil {
		t.Fatal(err)
	}
	h.Disconnect()
	if _, err := h.Wait(ctx); !errors.Is(err, sdk.ErrDisconnected) {
		t.Fatalf("Wait after Disconnect = %v", err)
	}
	ticks := make(chan string, 100)
	h2, err := cmds.Connect(ctx, h.PID(), &sdk.CommandConnectOptions{OnStdout: func(s string) {
		select {
		case ticks <- s:
		default:
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
	if h2.PID() != h.PID() {
		t.Fatalf("Connect pid %d, want %d", h2.PID(), h.PID())
	}
	if s := <-ticks; !strings.HasPrefix(s, "tick") {
		t.Fatalf("reconnected output %q", s)
	}
	if err := h2.Kill(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := h2.Wait(ctx); !errors.As(err, &ee) || ee.ExitCode != -1 {
		t.Fatalf("Wait after Kill: want exit -1, got %T %v", err, err)
	}
	assertNotFound(t, "Kill(exited)", cmds.Kill(ctx, h.PID()), sdk.ResourceProcess)
	assertNotFound(t, "Kill(999999)", cmds.Kill(ctx, 999999), sdk.ResourceProcess)
	_, err = cmds.Connect(ctx, 999999, nil)
	assertNotFound(t, "Connect(999999)", err, sdk.ResourceProcess)
	assertNotFound(t, "SendStdin(999999)", cmds.SendStdin(ctx, 999999, []byte("x")), sdk.ResourceProcess)
}

// TestRunCancelKills: cancelling Run's context kills the command.
func TestRunCancelKills(t *testing.T) {
	ctx := ctxT(t, time.Minute)
	sbx := newSandbox(t, nil)
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		_, err := sbx.Commands.Run(rctx, "sleep 45", &sdk.CommandOptions{Tag: "to-cancel"})
		done <- err
	}()
	eventually(t, 20*time.Second, "the command to start", func() bool {
		ps, err := sbx.Commands.List(ctx)
		return err == nil && slices.ContainsFunc(ps, func(p sdk.ProcessInfo) bool { return p.Tag == "to-cancel" })
	})
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Run after cancel = %v", err)
	}
	eventually(t, 10*time.Second, "the cancelled command to be killed", func() bool {
		ps, err := sbx.Commands.List(ctx)
		return err == nil && !slices.ContainsFunc(ps, func(p sdk.ProcessInfo) bool { return p.Tag == "to-cancel" })
	})
}

// TestPty drives a terminal: input, resize, output, kill.
func TestPty(t *testing.T) {
	ctx := ctxT(t, time.Minute)
	sbx := newSandbox(t, nil)
	var mu sync.Mutex
	var out bytes.Buffer
	h, err := sbx.Pty.Create(ctx, sdk.PtySize{Cols: 80, Rows: 24}, func(b []byte) {
		mu.Lock()
		out.Write(b)
		mu.Unlock()
	}, &sdk.PtyOptions{Envs: map[string]string{"MARK": "pty-ok"}, Timeout: sdk.NoTimeout})
	if err != nil {
		t.Fatal(err)
	}
	output := func() string { mu.Lock(); defer mu.Unlock(); return out.String() }
	if err := sbx.Pty.SendInput(ctx, h.PID(), []byte("echo $MARK $TERM; tput cols\n")); err != nil {
		t.Fatal(err)
	}
	eventually(t, 15*time.Second, "pty output", func() bool {
		return strings.Contains(output(), "pty-ok xterm-256color") && strings.Contains(output(), "\n80\r\n")
	})
	if err := sbx.Pty.Resize(ctx, h.PID(), sdk.PtySize{Cols: 123, Rows: 40}); err != nil {
		t.Fatal(err)
	}
	if err := sbx.Pty.SendInput(ctx, h.PID(), []byte("tput cols\n")); err != nil {
		t.Fatal(err)
	}
	eventually(t, 15*time.Second, "the resized width", func() bool { return strings.Contains(output(), "\r123\r\n") })

	// Detach and reattach to the same terminal.
	h.Disconnect()
	var again bytes.Buffer
	h2, err := sbx.Pty.Connect(ctx, h.PID(), func(b []byte) { mu.Lock(); again.Write(b); mu.Unlock() }, sdk.NoTimeout)
	if err != nil {
		t.Fatal(err)
	}
	if err := sbx.Pty.SendInput(ctx, h.PID(), []byte("echo re$((1+1))attached\n")); err != nil {
		t.Fatal(err)
	}
	eventually(t, 15*time.Second, "output after reattaching", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return strings.Contains(again.String(), "re2attached")
	})
	h = h2
	if err := sbx.Pty.Kill(ctx, h.PID()); err != nil {
		t.Fatal(err)
	}
	if _, err := h.Wait(ctx); err == nil {
		t.Fatal("killed pty reported success")
	}
	assertNotFound(t, "Resize(999999)", sbx.Pty.Resize(ctx, 999999, sdk.PtySize{Cols: 1, Rows: 1}), sdk.ResourceProcess)
}
