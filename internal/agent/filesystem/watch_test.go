package filesystem

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"connectrpc.com/connect"

	pb "github.com/cubby-dev/cubby/internal/envdpb/filesystem"
	"github.com/cubby-dev/cubby/internal/envdpb/filesystem/filesystemconnect"
)

type eventKey struct {
	name string
	typ  pb.EventType
}

// openWatch starts a WatchDir stream and checks that the first message is start.
func openWatch(t *testing.T, c filesystemconnect.FilesystemClient, req *pb.WatchDirRequest, keepalive string) *connect.ServerStreamForClient[pb.WatchDirResponse] {
	t.Helper()
	r := connect.NewRequest(req)
	if keepalive != "" {
		r.Header().Set("Keepalive-Ping-Interval", keepalive)
	}
	stream, err := c.WatchDir(ctxT(t), r)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stream.Close() })
	if !stream.Receive() {
		t.Fatalf("no first message: %v", stream.Err())
	}
	if stream.Msg().GetStart() == nil {
		t.Fatalf("first message = %v, want start", stream.Msg())
	}
	return stream
}

// awaitEvents receives until every wanted event was seen (others are ignored)
// and returns the events seen by key.
func awaitEvents(t *testing.T, stream *connect.ServerStreamForClient[pb.WatchDirResponse], want ...eventKey) map[eventKey]*pb.FilesystemEvent {
	t.Helper()
	seen := map[eventKey]*pb.FilesystemEvent{}
	missing := func() []eventKey {
		var m []eventKey
		for _, k := range want {
			if seen[k] == nil {
				m = append(m, k)
			}
		}
		return m
	}
	for len(missing()) > 0 {
		if !stream.Receive() {
			t.Fatalf("stream ended (%v), still missing %v", stream.Err(), missing())
		}
		if ev := stream.Msg().GetFilesystem(); ev != nil {
			seen[eventKey{ev.GetName(), ev.GetType()}] = ev
		}
	}
	return seen
}

func TestWatchDir(t *testing.T) {
	e := newEnv(t)
	for name, c := range e.clients() {
		t.Run(name, func(t *testing.T) {
			dir := filepath.Join(e.dir, name)
			f := filepath.Join(dir, "f.txt")
			mustWrite(t, f, "one")
			stream := openWatch(t, c, &pb.WatchDirRequest{Path: dir, Recursive: true, IncludeEntry: true}, "")

			mustWrite(t, f, "two!")
			ev := awaitEvents(t, stream, eventKey{"f.txt", pb.EventType_EVENT_TYPE_WRITE})
			en := ev[eventKey{"f.txt", pb.EventType_EVENT_TYPE_WRITE}].GetEntry()
			if en.GetPath() != f || en.GetName() != "f.txt" {
				t.Fatalf("write entry = %v", en)
			}

			if err := os.MkdirAll(filepath.Join(dir, "a", "b", "c"), 0o755); err != nil {
				t.Fatal(err)
			}
			awaitEvents(t, stream,
				eventKey{"a", pb.EventType_EVENT_TYPE_CREATE},
				eventKey{"a/b", pb.EventType_EVENT_TYPE_CREATE},
				eventKey{"a/b/c", pb.EventType_EVENT_TYPE_CREATE})

			// The directories created during the watch are watched too.
			mustWrite(t, filepath.Join(dir, "a", "b", "c", "new.txt"), "n")
			ev = awaitEvents(t, stream, eventKey{"a/b/c/new.txt", pb.EventType_EVENT_TYPE_CREATE})
			if en := ev[eventKey{"a/b/c/new.txt", pb.EventType_EVENT_TYPE_CREATE}].GetEntry(); en.GetPath() != filepath.Join(dir, "a/b/c/new.txt") {
				t.Fatalf("create entry = %v", en)
			}

			if err := os.Remove(f); err != nil {
				t.Fatal(err)
			}
			ev = awaitEvents(t, stream, eventKey{"f.txt", pb.EventType_EVENT_TYPE_REMOVE})
			if ev[eventKey{"f.txt", pb.EventType_EVENT_TYPE_REMOVE}].Entry != nil {
				t.Fatal("remove event carries an entry")
			}
		})
	}
}

func TestWatchDirNonRecursive(t *testing.T) {
	e := newEnv(t)
	stream := openWatch(t, e.json, &pb.WatchDirRequest{Path: e.dir}, "")
	if err := os.MkdirAll(filepath.Join(e.dir, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	awaitEvents(t, stream, eventKey{"sub", pb.EventType_EVENT_TYPE_CREATE})
	mustWrite(t, filepath.Join(e.dir, "sub", "inner.txt"), "x")
	mustWrite(t, filepath.Join(e.dir, "top.txt"), "x")
	// Events arrive in order: nothing about sub/inner.txt may precede top.txt.
	for {
		if !stream.Receive() {
			t.Fatalf("stream ended: %v", stream.Err())
		}
		ev := stream.Msg().GetFilesystem()
		if ev == nil {
			continue
		}
		if ev.GetName() == "sub/inner.txt" {
			t.Fatalf("non-recursive watch reported %v", ev)
		}
		if ev.GetName() == "top.txt" {
			if ev.Entry != nil {
				t.Fatal("entry without include_entry")
			}
			return
		}
	}
}

func TestWatchDirErrors(t *testing.T) {
	e := newEnv(t)
	f := filepath.Join(e.dir, "file")
	mustWrite(t, f, "x")
	for name, c := range e.clients() {
		for path, code := range map[string]connect.Code{
			filepath.Join(e.dir, "missing"): connect.CodeNotFound,
			f:                               connect.CodeInvalidArgument,
		} {
			stream, err := c.WatchDir(ctxT(t), connect.NewRequest(&pb.WatchDirRequest{Path: path}))
			if err == nil {
				if stream.Receive() {
					t.Fatalf("%s %s: got message %v", name, path, stream.Msg())
				}
				err = stream.Err()
				stream.Close()
			}
			wantCode(t, err, code)
		}
	}
}

func TestWatchDirKeepaliveAndClose(t *testing.T) {
	e := newEnv(t)
	stream := openWatch(t, e.json, &pb.WatchDirRequest{Path: e.dir}, "1")
	if !stream.Receive() {
		t.Fatalf("stream ended: %v", stream.Err())
	}
	if stream.Msg().GetKeepalive() == nil {
		t.Fatalf("message after an idle second = %v, want keepalive", stream.Msg())
	}
	if err := e.svc.Close(); err != nil {
		t.Fatal(err)
	}
	for stream.Receive() {
	}
	wantCode(t, stream.Err(), connect.CodeUnavailable)
	_, err := e.json.CreateWatcher(ctxT(t), connect.NewRequest(&pb.CreateWatcherRequest{Path: e.dir}))
	wantCode(t, err, connect.CodeUnavailable)
}

func TestPollingWatcher(t *testing.T) {
	e := newEnv(t)
	for name, c := range e.clients() {
		t.Run(name, func(t *testing.T) {
			dir := filepath.Join(e.dir, name)
			if err := os.Mkdir(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			res, err := c.CreateWatcher(ctxT(t), connect.NewRequest(&pb.CreateWatcherRequest{Path: dir, Recursive: true, IncludeEntry: true}))
			if err != nil {
				t.Fatal(err)
			}
			id := res.Msg.GetWatcherId()
			mustWrite(t, filepath.Join(dir, "p.txt"), "x")
			want := eventKey{"p.txt", pb.EventType_EVENT_TYPE_CREATE}
			got := pollUntil(t, c, id, want)
			if got.GetEntry().GetName() != "p.txt" {
				t.Fatalf("event = %v", got)
			}
			// The buffer was drained: a quiet directory yields no events.
			ev, err := c.GetWatcherEvents(ctxT(t), connect.NewRequest(&pb.GetWatcherEventsRequest{WatcherId: id}))
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range ev.Msg.GetEvents() {
				if (eventKey{e.GetName(), e.GetType()}) == want {
					t.Fatalf("event delivered twice: %v", e)
				}
			}
			if _, err := c.RemoveWatcher(ctxT(t), connect.NewRequest(&pb.RemoveWatcherRequest{WatcherId: id})); err != nil {
				t.Fatal(err)
			}
			_, err = c.GetWatcherEvents(ctxT(t), connect.NewRequest(&pb.GetWatcherEventsRequest{WatcherId: id}))
			wantCode(t, err, connect.CodeNotFound)
			_, err = c.RemoveWatcher(ctxT(t), connect.NewRequest(&pb.RemoveWatcherRequest{WatcherId: id}))
			wantCode(t, err, connect.CodeNotFound)
		})
	}
}

// pollUntil polls GetWatcherEvents until the wanted event shows up.
func pollUntil(t *testing.T, c filesystemconnect.FilesystemClient, id string, want eventKey) *pb.FilesystemEvent {
	t.Helper()
	ctx := ctxT(t)
	for ctx.Err() == nil {
		res, err := c.GetWatcherEvents(ctx, connect.NewRequest(&pb.GetWatcherEventsRequest{WatcherId: id}))
		if err != nil {
			t.Fatal(err)
		}
		for _, ev := range res.Msg.GetEvents() {
			if (eventKey{ev.GetName(), ev.GetType()}) == want {
				return ev
			}
		}
		time.Sleep(20 * time.Millisecond) // poll interval, as the Python SDK does
	}
	t.Fatalf("event %v never arrived", want)
	return nil
}
