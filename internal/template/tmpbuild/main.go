// Temporary manual build driver (removed before hand-off).
package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"

	"github.com/cubby-dev/cubby/internal/template"
)

func main() {
	dir, what := os.Args[1], os.Args[2]
	def, ok := template.Builtin(what)
	if !ok {
		var err error
		def, err = template.LoadDefinition(what)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	m := template.NewManager(dir, slog.New(slog.NewTextHandler(os.Stderr, nil)))
	info, err := m.Build(ctx, def, os.Stdout, len(os.Args) > 3)
	if err != nil {
		fmt.Fprintln(os.Stderr, "ERROR:", err)
		os.Exit(1)
	}
	fmt.Printf("%+v\n", info)
}
