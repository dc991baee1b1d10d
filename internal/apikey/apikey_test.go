package apikey

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cubby-dev/cubby/sdk"
)

func TestCheck(t *testing.T) {
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		switch r.Header.Get("X-API-KEY") {
		case "good":
			_, _ = w.Write([]byte(`[]`))
		case "broken":
			w.WriteHeader(http.StatusInternalServerError)
			_, _ = w.Write([]byte(`{"code":500,"message":"db down"}`))
		default:
			w.WriteHeader(http.StatusUnauthorized)
			_, _ = w.Write([]byte(`{"code":401,"message":"invalid API key"}`))
		}
	}))
	defer srv.Close()
	c := NewChecker(sdk.ConnectionOptions{APIURL: srv.URL}, time.Minute)
	now := time.Unix(0, 0)
	c.now = func() time.Time { return now }
	ctx := context.Background()
	if err := c.Check(ctx, "good"); err != nil {
		t.Fatal(err)
	}
	if err := c.Check(ctx, "good"); err != nil || calls.Load() != 1 {
		t.Fatalf("second check: %v after %d calls; want it remembered", err, calls.Load())
	}
	now = now.Add(2 * time.Minute)
	if err := c.Check(ctx, "good"); err != nil || calls.Load() != 2 {
		t.Fatalf("after the TTL: %v, %d calls", err, calls.Load())
	}
	for _, k := range []string{"bad", "", "has space", string(make([]byte, 300))} {
		if err := c.Check(ctx, k); !errors.Is(err, ErrInvalid) {
			t.Errorf("Check(%q) = %v, want ErrInvalid", k, err)
		}
	}
	if err := c.Check(ctx, "broken"); err == nil || errors.Is(err, ErrInvalid) {
		t.Fatalf("server failure: %v, want an error that is not ErrInvalid", err)
	}
}

func TestFromRequest(t *testing.T) {
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	if FromRequest(r) != "" {
		t.Fatal("key from an empty request")
	}
	r.Header.Set("Authorization", "Bearer abc")
	if FromRequest(r) != "abc" {
		t.Fatal("bearer")
	}
	r.Header.Set("X-API-KEY", "xyz")
	if FromRequest(r) != "xyz" {
		t.Fatal("X-API-KEY first")
	}
}
