package filesystem

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sync"

	"github.com/fsnotify/fsnotify"

	"github.com/cubby-dev/cubby/internal/agent/entry"
	pb "github.com/cubby-dev/cubby/internal/envdpb/filesystem"
)

// watchOptions configure a dirWatcher.
type watchOptions struct {
	root         string // real (symlink-free) directory to watch
	display      string // path entries are reported under (the requested path)
	recursive    bool   // also watch subdirectories, including ones created later
	includeEntry bool   // attach an EntryInfo to CREATE, WRITE and CHMOD events
}

// opOrder lists the fsnotify ops in the order their events are emitted when one
// OS event carries several (docs/wire/envd.md, WatchDir: one message per op).
var opOrder = []struct {
	op fsnotify.Op
	ev pb.EventType
}{
	{fsnotify.Create, pb.EventType_EVENT_TYPE_CREATE},
	{fsnotify.Write, pb.EventType_EVENT_TYPE_WRITE},
	{fsnotify.Remove, pb.EventType_EVENT_TYPE_REMOVE},
	{fsnotify.Rename, pb.EventType_EVENT_TYPE_RENAME},
	{fsnotify.Chmod, pb.EventType_EVENT_TYPE_CHMOD},
}

// dirWatcher turns the fsnotify events under one directory into envd
// FilesystemEvents, named relative to the watched directory ("sub/file.txt").
type dirWatcher struct {
	opts    watchOptions
	log     *slog.Logger
	fsw     *fsnotify.Watcher
	builder *entry.Builder // used by the run goroutine only
	out     chan *pb.FilesystemEvent
	stop    chan struct{}
	once    sync.Once
	pending *renamedUpload // set between an upload temp's rename and its arrival
}

// renamedUpload is an upload temporary file (entry.UploadTemp) that was just
// renamed away; the next CREATE in the same directory is its destination.
type renamedUpload struct {
	dir       string
	replacing bool
}

// newDirWatcher establishes the watch (the root and, when recursive, every
// subdirectory) before returning, then delivers events on Events until Close.
func newDirWatcher(opts watchOptions, log *slog.Logger) (*dirWatcher, error) {
	fsw, err := fsnotify.NewWatcher()
	if err != nil {
		return nil, fmt.Errorf("create inotify watcher: %w", err)
	}
	w := &dirWatcher{
		opts:    opts,
		log:     log,
		fsw:     fsw,
		builder: entry.NewBuilder(),
		out:     make(chan *pb.FilesystemEvent, 256),
		stop:    make(chan struct{}),
	}
	if err := fsw.Add(opts.root); err != nil {
		fsw.Close()
		return nil, fmt.Errorf("watch %s: %w", opts.root, err)
	}
	if opts.recursive {
		if err := w.addTree(opts.root, false); err != nil {
			fsw.Close()
			return nil, err
		}
	}
	go w.run()
	return w, nil
}

// Events delivers the watcher's events; it is closed once the watcher stops.
func (w *dirWatcher) Events() <-chan *pb.FilesystemEvent { return w.out }

// Close stops the watcher and releases its inotify instance. Idempotent.
func (w *dirWatcher) Close() error {
	var err error
	w.once.Do(func() {
		close(w.stop)
		err = w.fsw.Close()
	})
	return err
}

// run forwards fsnotify events until the watcher is closed.
func (w *dirWatcher) run() {
	defer close(w.out)
	for {
		select {
		case ev, ok := <-w.fsw.Events:
			if !ok || !w.handle(ev) {
				return
			}
		case err, ok := <-w.fsw.Errors:
			if !ok {
				return
			}
			w.log.Warn("filesystem watcher error", "path", w.opts.display, "err", err)
		case <-w.stop:
			return
		}
	}
}

// handle emits one message per op of ev and, for a recursive watch, starts
// watching a directory that was just created. It reports false once stopped.
//
// /files uploads write a temporary file and rename it over the destination. The
// temporary file's events are hidden and its arrival is reported as E2B's envd
// reports an upload, which creates the file, sets its owner and writes it:
// CREATE, CHMOD, WRITE for a new file; CHMOD, WRITE when replacing one.
func (w *dirWatcher) handle(ev fsnotify.Event) bool {
	if temp, replacing := entry.UploadTemp(filepath.Base(ev.Name)); temp {
		if ev.Has(fsnotify.Rename) {
			w.pending = &renamedUpload{dir: filepath.Dir(ev.Name), replacing: replacing}
		}
		return true
	}
	if up := w.pending; up != nil {
		w.pending = nil
		if ev.Has(fsnotify.Create) && filepath.Dir(ev.Name) == up.dir {
			return (up.replacing || w.emit(ev.Name, pb.EventType_EVENT_TYPE_CREATE)) &&
				w.emit(ev.Name, pb.EventType_EVENT_TYPE_CHMOD) &&
				w.emit(ev.Name, pb.EventType_EVENT_TYPE_WRITE)
		}
	}
	for _, o := range opOrder {
		if ev.Has(o.op) && !w.emit(ev.Name, o.ev) {
			return false
		}
	}
	if w.opts.recursive && ev.Has(fsnotify.Create) {
		if fi, err := os.Lstat(ev.Name); err == nil && fi.IsDir() {
			if err := w.addTree(ev.Name, true); err != nil {
				w.log.Warn("watch new directory", "path", ev.Name, "err", err)
			}
		}
	}
	return true
}

// addTree watches every directory below dir (dir itself too when it is new).
// For a directory created during the watch (announce), entries that appeared in it
// before its watch was in place are reported as if seen live, so that
// `mkdir -p a/b/c` or a file written right after its directory show up completely.
func (w *dirWatcher) addTree(dir string, announce bool) error {
	return filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return fmt.Errorf("walk %s: %w", p, err)
		}
		if announce && p != dir && !w.announce(p, d) {
			return filepath.SkipAll
		}
		if !d.IsDir() || (p == dir && !announce) { // the root is already watched
			return nil
		}
		if err := w.fsw.Add(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("watch %s: %w", p, err)
		}
		return nil
	})
}

// announce reports an entry found in a new directory: CREATE, plus WRITE for a
// non-empty regular file (what inotify shows for a file created and written).
func (w *dirWatcher) announce(p string, d fs.DirEntry) bool {
	if !w.emit(p, pb.EventType_EVENT_TYPE_CREATE) {
		return false
	}
	if !d.Type().IsRegular() {
		return true
	}
	if fi, err := d.Info(); err != nil || fi.Size() == 0 {
		return true
	}
	return w.emit(p, pb.EventType_EVENT_TYPE_WRITE)
}

// emit builds the event for path and hands it to the consumer. It reports false
// once the watcher is stopped.
func (w *dirWatcher) emit(path string, typ pb.EventType) bool {
	if temp, _ := entry.UploadTemp(filepath.Base(path)); temp {
		return true // upload temporaries are never reported
	}
	rel, err := filepath.Rel(w.opts.root, path)
	if err != nil {
		rel = path
	}
	ev := &pb.FilesystemEvent{Name: rel, Type: typ}
	if w.opts.includeEntry && typ != pb.EventType_EVENT_TYPE_REMOVE && typ != pb.EventType_EVENT_TYPE_RENAME {
		if e, err := w.builder.Build(path, filepath.Join(w.opts.display, rel)); err == nil {
			ev.Entry = e
		}
	}
	select {
	case w.out <- ev:
		return true
	case <-w.stop:
		return false
	}
}
