// Command benchmem prints, as one JSON object on stdout, the memory of the Cubby
// sandboxes named on the command line, read from the host (see package
// bench/memstat): {"host": {memTotalBytes, memAvailableBytes}, "sandboxes":
// {"<id>": {cgroupsPath, memcg: {...}, procs: {...}} | {"error": "..."}}}.
// The bench driver (bench/sdk/bench.mjs) runs it as root next to the server.
//
// Usage: benchmem [-cgroup-parent /cubby] SANDBOX_ID...
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path"

	"github.com/cubby-dev/cubby/bench/memstat"
)

// result is one sandbox's entry: its memory, or why it could not be read.
type result struct {
	*memstat.Sandbox
	Error string `json:"error,omitempty"`
}

func main() {
	parent := flag.String("cgroup-parent", "/cubby", "cgroup under which the server puts sandbox cgroups (local backend: /cubby/<id>)")
	flag.Parse()
	if err := run(*parent, flag.Args()); err != nil {
		fmt.Fprintln(os.Stderr, "benchmem:", err)
		os.Exit(1)
	}
}

func run(parent string, ids []string) error {
	host, err := memstat.ReadHost()
	if err != nil {
		return err
	}
	out := struct {
		Host      memstat.Host      `json:"host"`
		Sandboxes map[string]result `json:"sandboxes"`
	}{Host: host, Sandboxes: map[string]result{}}
	for _, id := range ids {
		s, err := memstat.Measure(path.Join(parent, id))
		if err != nil {
			out.Sandboxes[id] = result{Error: err.Error()}
			continue
		}
		out.Sandboxes[id] = result{Sandbox: &s}
	}
	enc := json.NewEncoder(os.Stdout)
	return enc.Encode(out)
}
