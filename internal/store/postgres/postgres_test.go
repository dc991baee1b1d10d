package postgres_test

import (
	"context"
	"fmt"
	"os"
	"testing"

	"github.com/cubby-dev/cubby/internal/store/postgres"
	"github.com/cubby-dev/cubby/internal/store/storetest"
	"github.com/cubby-dev/cubby/internal/testenv/testpostgres"
)

// server is the PostgreSQL server of this package's tests; nil when it cannot start here.
var server *testpostgres.Server

func TestMain(m *testing.M) {
	if reason := testpostgres.SkipReason(); reason == "" {
		s, err := testpostgres.Start("")
		if err != nil {
			fmt.Fprintln(os.Stderr, "postgres:", err)
			os.Exit(1)
		}
		server = s
	}
	code := m.Run()
	if server != nil {
		server.Remove()
	}
	os.Exit(code)
}

// open returns a migrated store on a fresh database.
func open(t *testing.T) *postgres.Store {
	t.Helper()
	if server == nil {
		t.Skip(testpostgres.SkipReason())
	}
	dsn, err := server.CreateDB(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	s, err := postgres.Open(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// TestConformance runs the store contract's suite against PostgreSQL.
func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) storetest.Store { return open(t) })
}

// TestConcurrentOpen: replicas starting together on one new database migrate
// it once (under the advisory lock) and all open.
func TestConcurrentOpen(t *testing.T) {
	if server == nil {
		t.Skip(testpostgres.SkipReason())
	}
	dsn, err := server.CreateDB(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	errs := make(chan error, 4)
	for range 4 {
		go func() {
			s, err := postgres.Open(context.Background(), dsn)
			if err == nil {
				err = s.Close()
			}
			errs <- err
		}()
	}
	for range 4 {
		if err := <-errs; err != nil {
			t.Fatalf("concurrent open: %v", err)
		}
	}
}
