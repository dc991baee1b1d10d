package agent

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"sync"

	"github.com/cubby-dev/cubby/internal/agent/settings"
	"github.com/cubby-dev/cubby/internal/agentapi"
)

// initPath keeps the last /init request (root-only) so that an agent restarted by
// the sandbox's init after a crash keeps its env vars and, above all, its access
// token: a secured sandbox never becomes reachable without one.
const initPath = agentapi.StateDir + "/init.json"

func saveInit(req agentapi.InitRequest) error {
	data, err := json.Marshal(req)
	if err != nil {
		return fmt.Errorf("encode init: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(initPath), 0o700); err != nil {
		return fmt.Errorf("create %s: %w", filepath.Dir(initPath), err)
	}
	tmp := initPath + ".tmp"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		return fmt.Errorf("write %s: %w", tmp, err)
	}
	return os.Rename(tmp, initPath)
}

func loadInit(s *settings.Settings) error {
	data, err := os.ReadFile(initPath)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("read %s: %w", initPath, err)
	}
	var req agentapi.InitRequest
	if err := json.Unmarshal(data, &req); err != nil {
		return fmt.Errorf("decode %s: %w", initPath, err)
	}
	s.Apply(req)
	return nil
}

// PrewarmThreads makes the Go runtime create n OS threads now and keep them idle
// for reuse. A fork bomb inside the sandbox can exhaust the cgroup's PID limit, and
// a Go program that then needs a new thread dies ("failed to create new OS thread");
// threads created in advance let the agent keep serving (and kill the bomb).
func PrewarmThreads(n int) {
	var ready, done sync.WaitGroup
	release := make(chan struct{})
	for range n {
		ready.Add(1)
		done.Add(1)
		go func() {
			defer done.Done()
			runtime.LockOSThread()
			ready.Done()
			<-release // parks this goroutine with its thread: the next one needs another
			runtime.UnlockOSThread()
		}()
	}
	ready.Wait()
	close(release)
	done.Wait()
}
