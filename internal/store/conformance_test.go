package store_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/cubby-dev/cubby/internal/store"
	"github.com/cubby-dev/cubby/internal/store/storetest"
)

// TestConformance runs the store contract's suite against SQLite.
func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) storetest.Store {
		s, err := store.Open(context.Background(), filepath.Join(t.TempDir(), "cubby.db"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		return s
	})
}
