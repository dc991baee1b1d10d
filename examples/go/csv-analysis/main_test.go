package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestCSVAnalysis runs the example against the server the environment names
// (E2B_API_KEY, E2B_API_URL, E2B_SANDBOX_URL) with the template in
// EXAMPLE_CI_TEMPLATE (default code-interpreter); it skips without a key.
func TestCSVAnalysis(t *testing.T) {
	if os.Getenv("E2B_API_KEY") == "" {
		t.Skip("set E2B_API_KEY (and E2B_API_URL / E2B_SANDBOX_URL for Cubby) to run the example")
	}
	template := os.Getenv("EXAMPLE_CI_TEMPLATE")
	if template == "" {
		template = "code-interpreter"
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	out := filepath.Join(t.TempDir(), "chart.png")
	if err := run(ctx, template, out); err != nil {
		t.Fatal(err)
	}
	png, err := os.ReadFile(out)
	if err != nil || !bytes.HasPrefix(png, []byte("\x89PNG\r\n\x1a\n")) {
		t.Fatalf("chart file: %d bytes, %v", len(png), err)
	}
}
