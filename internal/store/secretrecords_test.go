package store_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/cubby-dev/cubby/internal/store"
	"github.com/cubby-dev/cubby/internal/store/storetest"
)

// TestSecretsLeaveTheFile runs the conformance tests that delete a secret and
// kill a sandbox with network credentials, then checks the database files
// (and their WAL) no longer hold the sealed values.
func TestSecretsLeaveTheFile(t *testing.T) {
	for _, tc := range []struct{ test, value string }{
		{"SecretRecords", storetest.SealedSecret},
		{"SetNetworkAndKillDropsCredentials", storetest.SealedNetwork},
	} {
		t.Run(tc.test, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "cubby.db")
			storetest.RunOne(t, tc.test, func(t *testing.T) storetest.Store {
				s, err := store.Open(context.Background(), path)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = s.Close() })
				return s
			})
			if f := store.FileHolds(t, path, tc.value); f != "" {
				t.Fatalf("%q is still in %s", tc.value, f)
			}
		})
	}
}
