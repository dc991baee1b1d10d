package runsc

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/cubby-dev/cubby/internal/runtime"
	"github.com/cubby-dev/cubby/internal/runtime/oci"
	"github.com/cubby-dev/cubby/internal/runtime/runtimetest"
)

// TestCheckpointRunning: the container's memory image is written and, while
// hold runs, nothing in it runs (its counter file stays as it was after the
// image); then it runs on, the same processes.
func TestCheckpointRunning(t *testing.T) {
	ctx := context.Background()
	e := setup(t)
	sb := e.start(t, oci.Options{Args: runtimetest.Shell(counterScript), CPUCount: 1})
	tok0, _ := waitCounter(t, sb, 3)
	img := filepath.Join(e.Base, "image")
	var during []int
	held, err := e.RT.CheckpointRunning(ctx, sb.ID, img, func() error {
		for range 3 {
			_, n, _ := readCounter(sb)
			during = append(during, n)
			time.Sleep(300 * time.Millisecond)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if during[0] != during[2] || held < 600*time.Millisecond {
		t.Fatalf("counter moved while held (%v, held %v)", during, held)
	}
	if _, err := os.Stat(filepath.Join(img, "pages.img")); err != nil {
		t.Fatalf("no image: %v", err)
	}
	if st, err := e.RT.State(ctx, sb.ID); err != nil || st.Status != runtime.StatusRunning {
		t.Fatalf("state after: %+v %v", st, err)
	}
	if tok, _ := waitCounter(t, sb, during[2]); tok != tok0 {
		t.Fatalf("token %q after, want %q: the process restarted", tok, tok0)
	}
}
