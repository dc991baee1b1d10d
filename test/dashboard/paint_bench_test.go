package dashboardtest

import (
	"slices"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
)

// BenchmarkFirstPaint loads dashboard pages in headless Chromium (fresh
// navigation, warm HTTP cache as for a returning user) and reports the median
// first contentful paint (Paint Timing API) in ms, and the median time until
// the load event.
//
//	CUBBY_BIN=$PWD/bin/cubby go test -run XXX -bench FirstPaint -benchtime 20x ./test/dashboard/
func BenchmarkFirstPaint(b *testing.B) {
	for _, page := range []string{"/dashboard/", "/dashboard/sandboxes", "/dashboard/sandbox", "/dashboard/templates"} {
		b.Run(page, func(b *testing.B) { benchPaint(b, page) })
	}
}

func benchPaint(b *testing.B, page string) {
	ctx := browser(b)
	login(b, ctx)
	if page == "/dashboard/sandbox" {
		page = "/dashboard/sandboxes/" + create(b, "base", nil).ID()
	}
	var fcp, load []float64
	for b.Loop() {
		if err := chromedp.Do(ctx, chromedp.Navigate(srv.URL(page))); err != nil {
			b.Fatal(err)
		}
		var v []float64
		var err error
		for range 3 { // the poll may start while the old document's context goes away
			v, err = chromedp.Run(ctx, chromedp.Poll[[]float64](`(() => {
				const p = performance.getEntriesByName('first-contentful-paint')[0];
				const n = performance.getEntriesByType('navigation')[0];
				return p && n && n.loadEventEnd > 0 ? [p.startTime, n.loadEventEnd] : null; })()`))
			if err == nil || !strings.Contains(err.Error(), "Cannot find context") {
				break
			}
		}
		if err != nil {
			b.Fatal(err)
		}
		fcp, load = append(fcp, v[0]), append(load, v[1])
	}
	b.ReportMetric(median(fcp), "ms-first-paint")
	b.ReportMetric(median(load), "ms-load")
}

func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s) == 0 {
		return 0
	}
	return s[len(s)/2]
}
