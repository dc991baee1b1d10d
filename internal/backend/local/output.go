package local

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strings"

	"github.com/cubby-dev/cubby/internal/runtime"
	"github.com/cubby-dev/cubby/internal/sandboxlog"
)

// errorTailBytes is how much of a sandbox's output an error message quotes.
const errorTailBytes = 2048

// openOutput opens the host end of s's stdout and stderr (a FIFO drained into
// a capped log in its directory, see package sandboxlog).
func (b *Backend) openOutput(s *sandbox) error {
	out, err := sandboxlog.Open(b.sandboxDir(s.ID), sandboxlog.Options{Log: b.log.With("sandbox", s.ID)})
	if err != nil {
		return fmt.Errorf("sandbox output: %w", err)
	}
	s.out = out
	s.outNow.Store(out)
	return nil
}

// closeOutput stops draining s's output; what the container still writes
// stays in the FIFO (or blocks its writer) until the next openOutput.
func (b *Backend) closeOutput(s *sandbox) {
	if s.out == nil {
		return
	}
	if err := s.out.Close(); err != nil {
		b.log.Warn("close sandbox output", "sandbox", s.ID, "err", err)
	}
	s.out = nil
	s.outNow.Store(nil)
}

// startContainer starts s's container from its bundle with its stdout and
// stderr on s's output FIFO.
func (b *Backend) startContainer(ctx context.Context, s *sandbox, rt runtime.Runtime) error {
	return b.withOutput(s, "container started", rt.Name(), func(w *os.File) error {
		if err := rt.Start(ctx, s.ID, b.bundleDir(s.ID), w); err != nil {
			return fmt.Errorf("start %s container: %w", rt.Name(), err)
		}
		return nil
	})
}

// restoreContainer restores s's container from the checkpoint image in
// imageDir (its own pause's, or a full snapshot's) with its stdout and stderr
// on s's output FIFO.
func (b *Backend) restoreContainer(ctx context.Context, s *sandbox, rt runtime.Runtime, cp runtime.Checkpointer, imageDir string) error {
	return b.withOutput(s, "container restored", rt.Name(), func(w *os.File) error {
		if err := cp.Restore(ctx, s.ID, b.bundleDir(s.ID), imageDir, w); err != nil {
			return fmt.Errorf("restore %s container: %w", rt.Name(), err)
		}
		return nil
	})
}

// withOutput calls launch with the write end of s's output FIFO (closed after
// it) and, when it succeeds, writes the host record event.
func (b *Backend) withOutput(s *sandbox, event, rtName string, launch func(w *os.File) error) error {
	w, err := s.out.WriteEnd()
	if err != nil {
		return err
	}
	defer w.Close()
	if err := launch(w); err != nil {
		return err
	}
	s.out.Note(slog.LevelInfo, event, "runtime", rtName)
	return nil
}

// outputTail returns the last lines of sandbox id's output for error messages.
func (b *Backend) outputTail(id string) string {
	lines, err := sandboxlog.Read(b.sandboxDir(id), errorTailBytes)
	if err != nil || len(lines) == 0 {
		return "unavailable"
	}
	texts := make([]string, 0, len(lines))
	for _, l := range lines {
		texts = append(texts, l.Text)
	}
	return strings.Join(texts, "\n")
}
