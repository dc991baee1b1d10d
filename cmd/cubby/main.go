// Command cubby is the Cubby server (`cubby serve`), the in-sandbox agent
// (`cubby agent`) and the command-line client, in one binary.
package main

import (
	"os"

	"github.com/cubby-dev/cubby/internal/cli"
)

func main() {
	os.Exit(cli.Main(os.Args[1:]))
}
