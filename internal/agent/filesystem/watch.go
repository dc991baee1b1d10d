package filesystem

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect"
	"golang.org/x/sys/unix"

	pb "github.com/cubby-dev/cubby/internal/envdpb/filesystem"
)

// DefaultKeepalive is the keepalive period of a WatchDir stream when the request
// has no Keepalive-Ping-Interval header (docs/wire/envd.md: envd's default, 90 s).
const DefaultKeepalive = 90 * time.Second

// maxBufferedEvents bounds a polling watcher's buffer between two
// GetWatcherEvents calls; later events are dropped (and logged) until the next poll.
const maxBufferedEvents = 1 << 16

// networkFS lists statfs magic numbers of network filesystems, which WatchDir
// refuses unless allow_network_mounts is set (inotify misses remote changes).
var networkFS = map[int64]string{
	unix.NFS_SUPER_MAGIC:  "nfs",
	unix.SMB_SUPER_MAGIC:  "smb",
	unix.SMB2_SUPER_MAGIC: "smb2",
	unix.CIFS_SUPER_MAGIC: "cifs",
	unix.AFS_SUPER_MAGIC:  "afs",
	unix.CEPH_SUPER_MAGIC: "ceph",
	unix.CODA_SUPER_MAGIC: "coda",
	unix.NCP_SUPER_MAGIC:  "ncp",
}

// WatchDir streams the changes under a directory (docs/wire/envd.md, WatchDir): an
// empty start event as soon as the watch is established, then one filesystem
// event per fsnotify op, and a keepalive after Keepalive-Ping-Interval seconds
// (header; default 90 s) without events. It ends when the client goes away,
// with deadline_exceeded at the Connect-Timeout-Ms deadline, and with
// unavailable when the service closes. Missing → not_found; not a directory or
// an unallowed network mount → invalid_argument.
func (s *Service) WatchDir(ctx context.Context, req *connect.Request[pb.WatchDirRequest], stream *connect.ServerStream[pb.WatchDirResponse]) error {
	m := req.Msg
	w, err := s.startWatch(req.Header(), m.GetPath(), m.GetRecursive(), m.GetIncludeEntry(), m.GetAllowNetworkMounts())
	if err != nil {
		return err
	}
	defer s.stopWatch(w)
	start := &pb.WatchDirResponse{Event: &pb.WatchDirResponse_Start{Start: &pb.WatchDirResponse_StartEvent{}}}
	if err := stream.Send(start); err != nil {
		return err
	}
	return streamEvents(ctx, w, stream, keepaliveInterval(req.Header()))
}

// streamEvents forwards w's events to stream with keepalives until the end.
func streamEvents(ctx context.Context, w *dirWatcher, stream *connect.ServerStream[pb.WatchDirResponse], every time.Duration) error {
	keepalive := &pb.WatchDirResponse{Event: &pb.WatchDirResponse_Keepalive{Keepalive: &pb.WatchDirResponse_KeepAlive{}}}
	timer := time.NewTimer(every)
	defer timer.Stop()
	for {
		var msg *pb.WatchDirResponse
		select {
		case <-ctx.Done():
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return connect.NewError(connect.CodeDeadlineExceeded, errors.New("watch deadline reached"))
			}
			return nil
		case ev, ok := <-w.Events():
			if !ok {
				return connect.NewError(connect.CodeUnavailable, errors.New("watcher stopped"))
			}
			msg = &pb.WatchDirResponse{Event: &pb.WatchDirResponse_Filesystem{Filesystem: ev}}
		case <-timer.C:
			msg = keepalive
		}
		if err := stream.Send(msg); err != nil {
			return err
		}
		timer.Reset(every)
	}
}

// keepaliveInterval reads the Keepalive-Ping-Interval header (seconds).
func keepaliveInterval(h http.Header) time.Duration {
	secs, err := strconv.Atoi(strings.TrimSpace(h.Get("Keepalive-Ping-Interval")))
	if err != nil || secs <= 0 {
		return DefaultKeepalive
	}
	return time.Duration(secs) * time.Second
}

// CreateWatcher starts a polling watcher (the Python sync SDK's WatchDir) and
// returns its id; errors as for WatchDir.
func (s *Service) CreateWatcher(ctx context.Context, req *connect.Request[pb.CreateWatcherRequest]) (*connect.Response[pb.CreateWatcherResponse], error) {
	m := req.Msg
	w, err := s.startWatch(req.Header(), m.GetPath(), m.GetRecursive(), m.GetIncludeEntry(), m.GetAllowNetworkMounts())
	if err != nil {
		return nil, err
	}
	id, err := newWatcherID()
	if err != nil {
		s.stopWatch(w)
		return nil, connect.NewError(connect.CodeInternal, err)
	}
	p := newPoller(w, s.log)
	s.mu.Lock()
	s.pollers[id] = p
	s.mu.Unlock()
	return connect.NewResponse(&pb.CreateWatcherResponse{WatcherId: id}), nil
}

// GetWatcherEvents returns the events buffered since the previous call and
// clears the buffer. Unknown id → not_found.
func (s *Service) GetWatcherEvents(ctx context.Context, req *connect.Request[pb.GetWatcherEventsRequest]) (*connect.Response[pb.GetWatcherEventsResponse], error) {
	s.mu.Lock()
	p, ok := s.pollers[req.Msg.GetWatcherId()]
	s.mu.Unlock()
	if !ok {
		return nil, watcherNotFound(req.Msg.GetWatcherId())
	}
	return connect.NewResponse(&pb.GetWatcherEventsResponse{Events: p.drain()}), nil
}

// RemoveWatcher stops a polling watcher. Unknown id → not_found.
func (s *Service) RemoveWatcher(ctx context.Context, req *connect.Request[pb.RemoveWatcherRequest]) (*connect.Response[pb.RemoveWatcherResponse], error) {
	id := req.Msg.GetWatcherId()
	s.mu.Lock()
	p, ok := s.pollers[id]
	delete(s.pollers, id)
	s.mu.Unlock()
	if !ok {
		return nil, watcherNotFound(id)
	}
	s.stopWatch(p.w)
	return connect.NewResponse(&pb.RemoveWatcherResponse{}), nil
}

func watcherNotFound(id string) error {
	return connect.NewError(connect.CodeNotFound, fmt.Errorf("watcher with id '%s' not found", id))
}

// startWatch validates the directory and registers a new watcher on it.
func (s *Service) startWatch(h http.Header, path string, recursive, includeEntry, allowNetwork bool) (*dirWatcher, error) {
	_, p, err := s.resolve(h, path)
	if err != nil {
		return nil, err
	}
	root, err := dirRoot(p)
	if err != nil {
		return nil, err
	}
	if err := checkNetworkMount(root, allowNetwork); err != nil {
		return nil, err
	}
	opts := watchOptions{root: root, display: p, recursive: recursive, includeEntry: includeEntry}
	w, err := newDirWatcher(opts, s.log)
	if err != nil {
		return nil, fsError("watch", p, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		w.Close()
		return nil, connect.NewError(connect.CodeUnavailable, errors.New("filesystem service is closed"))
	}
	s.watchers[w] = struct{}{}
	return w, nil
}

// stopWatch closes w and forgets it.
func (s *Service) stopWatch(w *dirWatcher) {
	s.mu.Lock()
	delete(s.watchers, w)
	s.mu.Unlock()
	if err := w.Close(); err != nil {
		s.log.Warn("close filesystem watcher", "path", w.opts.display, "err", err)
	}
}

// checkNetworkMount refuses a directory on a network filesystem unless allowed.
func checkNetworkMount(dir string, allow bool) error {
	if allow {
		return nil
	}
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return fsError("statfs", dir, err)
	}
	if name, ok := networkFS[int64(st.Type)]; ok {
		return connect.NewError(connect.CodeInvalidArgument,
			fmt.Errorf("path '%s' is on a network mount (%s); set allow_network_mounts to watch it", dir, name))
	}
	return nil
}

// newWatcherID returns a random 128-bit hex id.
func newWatcherID() (string, error) {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("watcher id: %w", err)
	}
	return hex.EncodeToString(b), nil
}

// poller buffers a watcher's events between GetWatcherEvents calls.
type poller struct {
	w       *dirWatcher
	log     *slog.Logger
	mu      sync.Mutex
	events  []*pb.FilesystemEvent
	dropped int
}

// newPoller starts buffering w's events.
func newPoller(w *dirWatcher, log *slog.Logger) *poller {
	p := &poller{w: w, log: log}
	go p.collect()
	return p
}

func (p *poller) collect() {
	for ev := range p.w.Events() {
		p.mu.Lock()
		if len(p.events) < maxBufferedEvents {
			p.events = append(p.events, ev)
		} else {
			p.dropped++
		}
		p.mu.Unlock()
	}
}

// drain returns and clears the buffered events (never nil).
func (p *poller) drain() []*pb.FilesystemEvent {
	p.mu.Lock()
	evs, dropped := p.events, p.dropped
	p.events, p.dropped = nil, 0
	p.mu.Unlock()
	if dropped > 0 {
		p.log.Warn("watcher buffer full, events dropped", "path", p.w.opts.display, "dropped", dropped)
	}
	if evs == nil {
		evs = []*pb.FilesystemEvent{}
	}
	return evs
}
