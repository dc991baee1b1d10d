package controlplane

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package when a test leaks goroutines (timers, sampler).
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
