package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/cubby-dev/cubby/sdk"
)

// sandboxJSON is the --json form of a sandbox, named like the fields of E2B's
// SandboxDetail (docs/wire/e2b-api.md §2.2). Times are RFC 3339, sizes MiB.
type sandboxJSON struct {
	SandboxID   string            `json:"sandboxID"`
	TemplateID  string            `json:"templateID"`
	Alias       string            `json:"alias,omitempty"`
	State       string            `json:"state"`
	Metadata    map[string]string `json:"metadata"`
	StartedAt   time.Time         `json:"startedAt"`
	EndAt       time.Time         `json:"endAt"`
	CPUCount    int               `json:"cpuCount"`
	MemoryMB    int               `json:"memoryMB"`
	DiskSizeMB  int               `json:"diskSizeMB"`
	EnvdVersion string            `json:"envdVersion"`
	PauseMode   string            `json:"pauseMode,omitempty"`
}

func toSandboxJSON(i *sdk.SandboxInfo) sandboxJSON {
	md := i.Metadata
	if md == nil {
		md = map[string]string{}
	}
	return sandboxJSON{
		SandboxID: i.SandboxID, TemplateID: i.TemplateID, Alias: i.Name, State: string(i.State),
		Metadata: md, StartedAt: i.StartedAt, EndAt: i.EndAt, CPUCount: i.CPUCount,
		MemoryMB: i.MemoryMB, DiskSizeMB: i.DiskSizeMB, EnvdVersion: i.EnvdVersion, PauseMode: i.PauseMode,
	}
}

// writeJSON writes v as indented JSON followed by a newline.
func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return fmt.Errorf("write json: %w", err)
	}
	return nil
}

// formatMetadata renders metadata as sorted k=v pairs separated by commas.
func formatMetadata(md map[string]string) string {
	keys := slices.Sorted(maps.Keys(md))
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = k + "=" + md[k]
	}
	return strings.Join(parts, ",")
}

// templateName is the alias of a sandbox's template, else its ID.
func templateName(i *sdk.SandboxInfo) string {
	if i.Name != "" {
		return i.Name
	}
	return i.TemplateID
}

// shortTime formats t in local time for tables ("-" for the zero time).
func shortTime(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.Local().Format("2006-01-02 15:04:05")
}

// humanBytes formats n bytes with a binary unit (B, KiB, MiB, GiB).
func humanBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	v, suffix := float64(n), ""
	for _, s := range []string{"KiB", "MiB", "GiB", "TiB"} {
		v /= unit
		suffix = s
		if v < unit {
			break
		}
	}
	return fmt.Sprintf("%.1f %s", v, suffix)
}
