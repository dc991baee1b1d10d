// Command testregistry starts the OCI registries the compatibility suites
// pull template base images from (test/compat/run.sh): one anonymous, one
// behind htpasswd authentication, both on loopback, each holding a minimal
// Debian image (no sudo, no user) as cubby-test/debian:bookworm; the
// anonymous one also as library/debian:bookworm, so that a server using it
// as its Docker Hub mirror resolves "debian:bookworm". It prints the
// images, credentials and mirror as shell variable assignments on stdout,
// then serves until SIGTERM or SIGINT.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/cubby-dev/cubby/internal/testenv/testregistry"
	"github.com/cubby-dev/cubby/internal/testenv/testserver"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "testregistry:", err)
		os.Exit(1)
	}
}

func run() error {
	repo, err := testserver.RepoRoot()
	if err != nil {
		return err
	}
	tree, err := testregistry.DebianTree(repo)
	if err != nil {
		return err
	}
	anon, err := testregistry.Start(repo, testregistry.Options{})
	if err != nil {
		return err
	}
	defer anon.Stop()
	auth, err := testregistry.Start(repo, testregistry.Options{Username: "cubby", Password: "s3cret-" + testserver.RandHex(4)})
	if err != nil {
		return err
	}
	defer auth.Stop()
	ctx := context.Background()
	cfg := v1.Config{Env: []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "IMAGE_VAR=from-image"}}
	var refs [2]string
	for i, r := range []*testregistry.Registry{anon, auth} {
		if refs[i], err = r.PushTree(ctx, "cubby-test/debian:bookworm", tree, cfg); err != nil {
			return err
		}
	}
	if _, err := anon.PushTree(ctx, "library/debian:bookworm", tree, cfg); err != nil {
		return err
	}
	fmt.Printf("CUBBY_TEST_IMAGE=%s\nCUBBY_TEST_AUTH_IMAGE=%s\nCUBBY_TEST_REGISTRY_USER=%s\nCUBBY_TEST_REGISTRY_PASSWORD=%s\nCUBBY_TEST_MIRROR=http://%s\n",
		refs[0], refs[1], auth.Username, auth.Password, anon.Addr)
	os.Stdout.Sync()
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	<-sig
	return nil
}
