package interpreter

import (
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"testing"

	"github.com/cubby-dev/cubby/internal/agent/jupyter"
	"github.com/cubby-dev/cubby/internal/agentapi/execapi"
)

// TestReportOOM: a kernel killed by the OOM killer (jupyter.OOMError, as
// jupyter's real-cgroup test produces it) becomes an OutOfMemoryError line
// naming the limit, and the context restarts; other deaths stay KernelDied.
func TestReportOOM(t *testing.T) {
	s := &Service{}
	for _, tc := range []struct {
		err       error
		name, val string
	}{
		{&jupyter.OOMError{LimitBytes: 512 << 20}, ErrNameOutOfMemory,
			"The kernel was killed by the out-of-memory killer (memory limit 512 MiB); the context is restarting and its state is lost"},
		{&jupyter.OOMError{}, ErrNameOutOfMemory,
			"The kernel was killed by the out-of-memory killer; the context is restarting and its state is lost"},
		{fmt.Errorf("%w (signal: killed)", jupyter.ErrKernelDied), ErrNameKernelDied, ""},
	} {
		rec := httptest.NewRecorder()
		out := newStream(rec, nil)
		if restart := s.report(out, &codeContext{Context: execapi.Context{ID: "c"}}, kernelErr(tc.err)); !restart {
			t.Errorf("%v: context not restarted", tc.err)
		}
		var line map[string]string
		if err := json.Unmarshal(rec.Body.Bytes(), &line); err != nil {
			t.Fatalf("%v: line %q: %v", tc.err, rec.Body, err)
		}
		if line["type"] != "error" || line["name"] != tc.name || (tc.val != "" && line["value"] != tc.val) {
			t.Errorf("%v: line = %v", tc.err, line)
		}
	}
}
