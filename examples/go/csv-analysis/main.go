// Command csv-analysis uploads a CSV file into a code-interpreter sandbox,
// analyses it over several stateful RunCode cells (load, summarise, plot) and
// saves the chart as a PNG.
//
// Configure it like the official SDKs (E2B_API_KEY, E2B_API_URL,
// E2B_SANDBOX_URL), then:
//
//	go run ./examples/go/csv-analysis -out chart.png
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"os"
	"strings"
	"time"

	"github.com/cubby-dev/cubby/sdk"
)

// salesCSV is the data set the example analyses.
const salesCSV = `month,region,units,price
2026-01,north,120,9.5
2026-01,south,80,9.5
2026-02,north,135,9.5
2026-02,south,95,9.0
2026-03,north,150,9.0
2026-03,south,130,8.5
2026-04,north,160,8.5
2026-04,south,155,8.5
`

// cells run one after the other in the same code context, so later cells see
// the variables of earlier ones.
var cells = []string{
	`import pandas as pd
df = pd.read_csv("/home/user/data/sales.csv")
df["revenue"] = df["units"] * df["price"]
print(f"{len(df)} rows, columns: {', '.join(df.columns)}")`,

	`by_region = df.groupby("region")["revenue"].sum()
for region, revenue in by_region.items():
    print(f"{region}: {revenue:.2f}")
df.groupby("month")["revenue"].sum()`,

	`import matplotlib.pyplot as plt
monthly = df.pivot(index="month", columns="region", values="revenue")
ax = monthly.plot(marker="o", title="Revenue by region")
ax.set_ylabel("Revenue (EUR)")
plt.show()`,
}

func main() {
	out := flag.String("out", "chart.png", "where to save the chart")
	template := flag.String("template", "code-interpreter", "code-interpreter template (E2B's cloud: code-interpreter-v1)")
	flag.Parse()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if err := run(ctx, *template, *out); err != nil {
		log.Fatal(err)
	}
}

// run creates the sandbox, analyses the CSV and writes the chart to out.
func run(ctx context.Context, template, out string) error {
	sbx, err := sdk.Create(ctx, &sdk.CreateOptions{Template: template, Timeout: 5 * time.Minute})
	if err != nil {
		return fmt.Errorf("create sandbox: %w", err)
	}
	defer sbx.Kill(context.WithoutCancel(ctx))

	if _, err := sbx.Files.Write(ctx, "data/sales.csv", []byte(salesCSV), nil); err != nil {
		return fmt.Errorf("upload CSV: %w", err)
	}
	cc, err := sbx.CreateCodeContext(ctx, &sdk.CodeContextOptions{Language: "python"})
	if err != nil {
		return fmt.Errorf("create code context: %w", err)
	}
	var chart []byte
	for i, code := range cells {
		exec, err := sbx.RunCode(ctx, code, &sdk.RunCodeOptions{
			Context:  cc,
			OnStdout: func(m sdk.OutputMessage) { fmt.Print(prefixLines("  │ ", m.Line)) },
			OnStderr: func(m sdk.OutputMessage) { fmt.Fprint(os.Stderr, prefixLines("  ! ", m.Line)) },
		})
		if err != nil {
			return fmt.Errorf("cell %d: %w", i+1, err)
		}
		if exec.Error != nil {
			return fmt.Errorf("cell %d raised %s: %s\n%s", i+1, exec.Error.Name, exec.Error.Value, exec.Error.Traceback)
		}
		if text := exec.Text(); text != "" {
			fmt.Printf("cell %d result:\n%s\n", i+1, indent(text))
		}
		for _, r := range exec.Results {
			if png, err := r.PNGBytes(); err == nil && png != nil {
				chart = png
				if r.Chart != nil {
					fmt.Printf("cell %d chart: %s %q\n", i+1, r.Chart.ChartType(), r.Chart.ChartTitle())
				}
			}
		}
	}
	if chart == nil {
		return errors.New("the plotting cell displayed no PNG")
	}
	if err := os.WriteFile(out, chart, 0o644); err != nil {
		return err
	}
	fmt.Printf("chart saved to %s (%d bytes)\n", out, len(chart))
	return nil
}

func indent(s string) string { return "  " + strings.ReplaceAll(s, "\n", "\n  ") }

// prefixLines puts prefix before every line of an output chunk.
func prefixLines(prefix, chunk string) string {
	lines := strings.SplitAfter(chunk, "\n")
	var b strings.Builder
	for _, l := range lines {
		if l != "" {
			b.WriteString(prefix + l)
		}
	}
	return b.String()
}
