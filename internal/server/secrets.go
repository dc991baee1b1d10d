package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"

	"golang.org/x/term"

	"github.com/cubby-dev/cubby/internal/controlplane"
)

// firstKeyFile is where the first API key goes, in the data dir, when the
// server's output is not a terminal (a log file or the journal must never
// hold a key).
const firstKeyFile = "first-api-key"

// firstKey creates an API key on a first start without CUBBY_API_KEY (with it
// the operator has a key already) and hands it over once: printed when
// cfg.Progress is a terminal, else written to <data-dir>/first-api-key (0600)
// and only that path logged.
func firstKey(ctx context.Context, cfg Config, cp *controlplane.Service, log *slog.Logger) error {
	if cfg.EnvAPIKey != "" {
		return nil
	}
	key, created, err := cp.EnsureAPIKey(ctx)
	if err != nil {
		return fmt.Errorf("ensure API key: %w", err)
	}
	if !created {
		return nil
	}
	if f, ok := cfg.Progress.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		fmt.Fprintf(cfg.Progress, "\nCreated the first API key (shown once, store it now):\n\n    E2B_API_KEY=%s\n\n", key)
		return nil
	}
	path := filepath.Join(cfg.DataDir, firstKeyFile)
	if err := os.WriteFile(path, []byte(key+"\n"), 0o600); err != nil {
		return fmt.Errorf("save the first API key: %w", err)
	}
	log.Warn("created the first API key; it is in a file readable by root only: store it and delete the file", "file", path)
	return nil
}

// RestrictLogFiles makes each of files that is a regular file (the server's
// stdout or stderr redirected to a log such as quickstart's cubby.log) 0600,
// whatever mode it was created with. Terminals, pipes and /dev/null are left
// alone. Errors: a regular file that cannot be changed.
func RestrictLogFiles(files ...*os.File) error {
	var errs []error
	for _, f := range files {
		st, err := f.Stat()
		if err != nil || !st.Mode().IsRegular() || st.Mode().Perm() == 0o600 {
			continue
		}
		if err := f.Chmod(0o600); err != nil {
			errs = append(errs, fmt.Errorf("restrict log %s: %w", f.Name(), err))
		}
	}
	return errors.Join(errs...)
}
