// Command internet runs the egress tests' stand-in for the internet (package
// testinternet) until it gets SIGINT or SIGTERM, for the SDK compatibility
// suites (test/compat/run.sh): it prints one JSON line with where things are,
// then serves.
//
//	go run ./test/compat/internet -dir DIR
//
// {"dns":"198.18.x.53:53","caFile":"DIR/test-internet-ca.pem","socks":"198.18.x.6:1080",
//
//	"names":{"allowed.test":"198.18.x.2",...}}
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/cubby-dev/cubby/internal/testenv/testinternet"
)

func main() {
	dir := flag.String("dir", os.TempDir(), "directory for the test CA certificate")
	flag.Parse()
	n, err := testinternet.NewInternet(*dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, "internet:", err)
		os.Exit(1)
	}
	defer n.Close()
	out := map[string]any{"dns": n.DNS.String(), "caFile": n.CAFile, "socks": n.SOCKS.String(), "names": n.Names, "netns": n.Name}
	if err := json.NewEncoder(os.Stdout).Encode(out); err != nil {
		fmt.Fprintln(os.Stderr, "internet:", err)
		return
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	<-sig
}
