package sdk

import (
	"context"
	"fmt"
	"sync"
	"time"

	"connectrpc.com/connect"

	"github.com/cubby-dev/cubby/internal/envdpb/filesystem"
)

// FilesystemEventType is the kind of a filesystem event.
type FilesystemEventType string

// Filesystem event types (docs/wire/envd.md §3.2 EventType).
const (
	EventCreate FilesystemEventType = "create"
	EventWrite  FilesystemEventType = "write"
	EventRemove FilesystemEventType = "remove"
	EventRename FilesystemEventType = "rename"
	EventChmod  FilesystemEventType = "chmod"
)

// FilesystemEvent is one change in a watched directory.
type FilesystemEvent struct {
	// Name is the path relative to the watched directory ("sub/file.txt").
	Name string
	Type FilesystemEventType
	// Entry describes the entry when the watch has IncludeEntry (best effort;
	// nil for removals and renames away).
	Entry *EntryInfo
}

// WatchOptions configure WatchDir.
type WatchOptions struct {
	// User watches as this sandbox user (see FileOptions.User).
	User string
	// Recursive also watches subdirectories, including ones created later.
	Recursive bool
	// IncludeEntry attaches an EntryInfo to create, write and chmod events
	// (envd 0.6.3+).
	IncludeEntry bool
	// Timeout is the watch's lifetime: 0 means DefaultStreamTimeout (60 s),
	// NoTimeout watches until Stop.
	Timeout time.Duration
}

// WatchHandle is a running directory watch. Read events from Events until it
// is closed; then Err tells why the watch ended.
type WatchHandle struct {
	events chan FilesystemEvent
	cancel context.CancelFunc
	done   chan struct{}
	mu     sync.Mutex
	err    error
}

// watchEventBuffer is how many events are buffered for a slow reader.
const watchEventBuffer = 256

// WatchDir watches a directory (the WatchDir stream, docs/wire/envd.md §3.3). ctx
// bounds establishing the watch only; the watch then lasts until Stop or its
// Timeout. Errors: *NotFoundError for a missing directory,
// *InvalidArgumentError for a non-directory, and the envd errors of Read.
func (f *Filesystem) WatchDir(ctx context.Context, path string, opts *WatchOptions) (*WatchHandle, error) {
	var o WatchOptions
	if opts != nil {
		o = *opts
	}
	if o.Recursive && !versionAtLeast(f.s.envdVersion, "0.1.4") {
		return nil, &APIError{Message: "recursive watch needs envd 0.1.4 or newer; rebuild the template"}
	}
	if o.IncludeEntry && !versionAtLeast(f.s.envdVersion, "0.6.3") {
		return nil, &APIError{Message: "IncludeEntry needs envd 0.6.3 or newer; rebuild the template"}
	}
	op := "watch " + path
	sctx, cancel, handshakeDone := f.s.streamContext(ctx, o.Timeout)
	req := connect.NewRequest(&filesystem.WatchDirRequest{Path: path, Recursive: o.Recursive, IncludeEntry: o.IncludeEntry})
	f.s.setStreamHeaders(req.Header(), o.User)
	stream, err := f.s.fsys.WatchDir(sctx, req)
	if err == nil && stream.Receive() && stream.Msg().GetStart() != nil {
		handshakeDone()
		h := &WatchHandle{events: make(chan FilesystemEvent, watchEventBuffer), cancel: cancel, done: make(chan struct{})}
		go h.run(f.s, sctx, op, path, stream)
		return h, nil
	}
	handshakeDone()
	if err == nil {
		err = stream.Err()
		stream.Close()
	}
	cancel()
	if err == nil {
		return nil, &APIError{Message: op + ": the sandbox did not start the watch (expected a start event)"}
	}
	return nil, f.s.rpcError(ctx, sctx, op, target{ResourceFile, path}, err)
}

func (h *WatchHandle) run(s *Sandbox, sctx context.Context, op, path string, stream *connect.ServerStreamForClient[filesystem.WatchDirResponse]) {
	defer close(h.done)
	defer close(h.events)
	defer h.cancel()
	defer stream.Close()
	for stream.Receive() {
		fe := stream.Msg().GetFilesystem()
		if fe == nil {
			continue
		}
		ev := FilesystemEvent{Name: fe.GetName(), Type: eventType(fe.GetType())}
		if fe.Entry != nil {
			e := entryFromProto(fe.GetEntry())
			ev.Entry = &e
		}
		select {
		case h.events <- ev:
		case <-sctx.Done():
			return
		}
	}
	if err := stream.Err(); err != nil && sctx.Err() != context.Canceled {
		h.mu.Lock()
		h.err = s.rpcError(context.Background(), sctx, op, target{ResourceFile, path}, err)
		h.mu.Unlock()
	}
}

// Events returns the channel of events; it is closed when the watch ends.
func (h *WatchHandle) Events() <-chan FilesystemEvent { return h.events }

// Stop ends the watch and waits until the channel is closed. Events not yet
// received are dropped.
func (h *WatchHandle) Stop() {
	h.cancel()
	<-h.done
}

// Err returns why the watch ended once Events is closed: nil after Stop, a
// *TimeoutError when its Timeout elapsed (wrapping ErrSandboxKilled when the
// sandbox went away), or another envd error.
func (h *WatchHandle) Err() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.err
}

func eventType(t filesystem.EventType) FilesystemEventType {
	switch t {
	case filesystem.EventType_EVENT_TYPE_CREATE:
		return EventCreate
	case filesystem.EventType_EVENT_TYPE_WRITE:
		return EventWrite
	case filesystem.EventType_EVENT_TYPE_REMOVE:
		return EventRemove
	case filesystem.EventType_EVENT_TYPE_RENAME:
		return EventRename
	case filesystem.EventType_EVENT_TYPE_CHMOD:
		return EventChmod
	}
	return FilesystemEventType(fmt.Sprint(t))
}
