package sdk

import (
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestURLRules checks docs/wire/e2b-api.md §1.2 for each configuration shape.
func TestURLRules(t *testing.T) {
	for _, k := range []string{"E2B_API_KEY", "E2B_API_URL", "E2B_SANDBOX_URL", "E2B_DOMAIN", "E2B_DEBUG"} {
		t.Setenv(k, "")
	}
	cases := []struct {
		name                                string
		env                                 map[string]string
		opts                                ConnectionOptions
		sandboxDomain                       string
		api, envd, direct, interp, host8080 string
	}{
		{
			name: "defaults (E2B cloud)",
			api:  "https://api.e2b.app", envd: "https://sandbox.e2b.app", direct: "https://49983-sbx.e2b.app",
			interp: "https://49999-sbx.e2b.app", host8080: "8080-sbx.e2b.app",
		},
		{
			name: "self-hosted domain", env: map[string]string{"E2B_DOMAIN": "cubby.example"},
			api: "https://api.cubby.example", envd: "https://49983-sbx.cubby.example", direct: "https://49983-sbx.cubby.example",
			interp: "https://49999-sbx.cubby.example", host8080: "8080-sbx.cubby.example",
		},
		{
			name: "server-returned domain wins", env: map[string]string{"E2B_DOMAIN": "cubby.example"}, sandboxDomain: "e2b.dev",
			api: "https://api.cubby.example", envd: "https://sandbox.e2b.dev", direct: "https://49983-sbx.e2b.dev",
			interp: "https://49999-sbx.e2b.dev", host8080: "8080-sbx.e2b.dev",
		},
		{
			name: "one origin", env: map[string]string{"E2B_API_URL": "http://127.0.0.1:3000/", "E2B_SANDBOX_URL": "http://127.0.0.1:3000"},
			api: "http://127.0.0.1:3000", envd: "http://127.0.0.1:3000", direct: "http://127.0.0.1:3000",
			interp: "http://127.0.0.1:3000", host8080: "8080-sbx.e2b.app",
		},
		{
			name: "debug", env: map[string]string{"E2B_DEBUG": "TRUE"},
			api: "http://localhost:3000", envd: "http://localhost:49983", direct: "http://localhost:49983",
			interp: "http://localhost:49999", host8080: "localhost:8080",
		},
		{
			name: "options beat env", env: map[string]string{"E2B_API_URL": "http://env"},
			opts: ConnectionOptions{APIURL: "http://opt", SandboxURL: "http://sbx-opt", Domain: "d.test"},
			api:  "http://opt", envd: "http://sbx-opt", direct: "http://sbx-opt", interp: "http://sbx-opt", host8080: "8080-sbx.d.test",
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			for k, v := range c.env {
				t.Setenv(k, v)
			}
			cfg := c.opts.resolve()
			got := []string{cfg.apiURL, cfg.envdURL("sbx", c.sandboxDomain), cfg.directURL("sbx", c.sandboxDomain, EnvdPort),
				cfg.directURL("sbx", c.sandboxDomain, CodeInterpreterPort), cfg.host("sbx", c.sandboxDomain, 8080)}
			want := []string{c.api, c.envd, c.direct, c.interp, c.host8080}
			if !slices.Equal(got, want) {
				t.Fatalf("got  %q\nwant %q", got, want)
			}
		})
	}
}

func TestTimeouts(t *testing.T) {
	if effectiveTimeout(0, time.Minute) != time.Minute || effectiveTimeout(NoTimeout, time.Minute) != 0 ||
		effectiveTimeout(time.Second, time.Minute) != time.Second {
		t.Fatal("effectiveTimeout")
	}
	if seconds(1500*time.Millisecond) != 2 || seconds(time.Second) != 1 || seconds(0) != 0 {
		t.Fatal("seconds must round up")
	}
}

// TestMetadataFilter reproduces the JS SDK's captured query (docs/wire/e2b-api.md §2.4).
func TestMetadataFilter(t *testing.T) {
	raw := encodeMetadataFilter(map[string]string{"k y": "v&1"})
	// The generated client form-encodes the value once more.
	q := url.Values{"metadata": {raw}}.Encode()
	if q != "metadata=k%252520y%3Dv%2525261" {
		t.Fatalf("query %q", q)
	}
	if encodeMetadataFilter(map[string]string{"b": "2", "a": "1"}) != "a=1&b=2" {
		t.Fatal("pairs must be sorted and joined with &")
	}
}

func TestVersionAtLeast(t *testing.T) {
	for _, c := range []struct {
		v, min string
		want   bool
	}{
		{"0.6.13", "0.6.4", true}, {"0.6.3", "0.6.4", false}, {"1.0.0", "0.99.99", true},
		{"0.4.0", "0.4.0", true}, {"0.4.0-rc1", "0.4.0", true}, {"garbage", "0.4.0", true}, {"0.0.9", "0.1.0", false},
	} {
		if got := versionAtLeast(c.v, c.min); got != c.want {
			t.Errorf("versionAtLeast(%q, %q) = %v", c.v, c.min, got)
		}
	}
}

func TestIncompleteUTF8Tail(t *testing.T) {
	for _, c := range []struct {
		in   string
		want int
	}{
		{"abc", 0}, {"h\xc3", 1}, {"h\xc3\xa9", 0}, {"\xe2\x82", 2}, {"\xe2\x82\xac", 0}, {"\xf0\x9f\x98", 3}, {"", 0},
	} {
		if got := incompleteUTF8Tail([]byte(c.in)); got != c.want {
			t.Errorf("incompleteUTF8Tail(%q) = %d, want %d", c.in, got, c.want)
		}
	}
}

// TestReadExecution parses the captured /execute stream of docs/wire/code-interpreter.md §4.2.
func TestReadExecution(t *testing.T) {
	stream := strings.Join([]string{
		`{"type":"number_of_executions","execution_count":1}`,
		`{"type":"stdout","text":"hello\n","timestamp":"2026-08-22T10:00:00.123456+00:00"}`,
		`{"type":"keepalive"}`,
		`{"type":"result","text":"2","is_main_result":true,"extra":{}}`,
		`{"type":"result","png":"iVBORw0KGgo=","text":"<Figure size 640x480 with 1 Axes>","is_main_result":false,"extra":{"application/x-custom":{"a":1}},"chart":{"type":"line","title":"T","x_label":"Time (s)","y_label":null,"x_unit":"s","y_unit":null,"x_ticks":[0,1],"x_tick_labels":["0","1"],"x_scale":"linear","y_ticks":[4,5],"y_tick_labels":["4","5"],"y_scale":"linear","elements":[{"label":"up","points":[[0,4],[1,5]]}]}}`,
		`{"type":"error","name":"NameError","value":"name 'x' is not defined","traceback":"tb"}`,
		`{"type":"error","name":"Second","value":"ignored","traceback":""}`,
		`{"type":"unknown_future_type","x":1}`,
		`{"type":"end_of_execution"}`,
	}, "\n") + "\n"
	var outs []OutputMessage
	var errs []ExecutionError
	exec := &Execution{}
	err := readExecution(strings.NewReader(stream), exec, &RunCodeOptions{
		OnStdout: func(m OutputMessage) { outs = append(outs, m) },
		OnError:  func(e ExecutionError) { errs = append(errs, e) },
	})
	if err != nil {
		t.Fatal(err)
	}
	if exec.ExecutionCount != 1 || exec.Text() != "2" || len(exec.Results) != 2 || len(exec.Logs.Stdout) != 1 {
		t.Fatalf("execution %+v", exec)
	}
	if len(outs) != 1 || outs[0].Line != "hello\n" || outs[0].Timestamp.Nanosecond() != 123456000 {
		t.Fatalf("stdout callbacks %+v", outs)
	}
	if exec.Error == nil || exec.Error.Name != "NameError" || len(errs) != 1 {
		t.Fatalf("only the first error counts: %+v %+v", exec.Error, errs)
	}
	fig := exec.Results[1]
	if got := fig.Formats(); !slices.Equal(got, []string{"text", "png", "chart", "application/x-custom"}) {
		t.Fatalf("formats %v", got)
	}
	line, ok := fig.Chart.(*LineChart)
	if !ok || line.Title != "T" || line.XUnit != "s" || line.YLabel != "" || line.Elements[0].Points[1][1].(float64) != 5 {
		t.Fatalf("chart %#v", fig.Chart)
	}
	if png, err := fig.PNGBytes(); err != nil || string(png[:4]) != "\x89PNG" {
		t.Fatalf("png %q %v", png, err)
	}
	if len(exec.Results[0].Extra) != 0 {
		t.Fatalf("extra of a plain result: %v", exec.Results[0].Extra)
	}
}

// TestCharts decodes each chart type of docs/wire/code-interpreter.md §4.4.
func TestCharts(t *testing.T) {
	r, err := parseResult([]byte(`{"type":"result","chart":{"type":"superchart","title":"Fig","elements":[
		{"type":"bar","title":null,"x_label":"k","y_label":"v","x_unit":null,"y_unit":null,"elements":[{"label":"A","group":"Group 1","value":3},{"label":"B","group":"Group 1","value":"4.5"}]},
		{"type":"pie","title":"P","elements":[{"label":"x","angle":324,"radius":1},{"label":"y","angle":36,"radius":1}]},
		{"type":"box_and_whisker","title":null,"x_label":null,"y_label":null,"x_unit":null,"y_unit":null,"elements":[{"label":"b","min":1,"first_quartile":2,"median":3,"third_quartile":4,"max":5,"outliers":[9]}]},
		{"type":"scatter","title":null,"x_label":null,"y_label":null,"x_unit":null,"y_unit":null,"x_ticks":["2024-01-01T00:00:00"],"x_tick_labels":["Jan"],"x_scale":"datetime","y_ticks":[1],"y_tick_labels":["1"],"y_scale":"log","elements":[{"label":"s","points":[["2024-01-01T00:00:00",1]]}]},
		{"type":"unknown","title":null,"elements":[]}
	]}}`))
	if err != nil {
		t.Fatal(err)
	}
	sc, ok := r.Chart.(*SuperChart)
	if !ok || sc.ChartTitle() != "Fig" || len(sc.Elements) != 5 {
		t.Fatalf("superchart %#v", r.Chart)
	}
	bar := sc.Elements[0].(*BarChart)
	if bar.ChartType() != ChartBar || bar.Elements[1].Value != 4.5 || bar.XLabel != "k" {
		t.Fatalf("bar %#v", bar)
	}
	if pie := sc.Elements[1].(*PieChart); pie.Elements[0].Angle != 324 || pie.Title != "P" {
		t.Fatalf("pie %#v", pie)
	}
	if box := sc.Elements[2].(*BoxAndWhiskerChart); box.Elements[0].Median != 3 || box.Elements[0].Outliers[0] != 9 {
		t.Fatalf("box %#v", box)
	}
	if s := sc.Elements[3].(*ScatterChart); s.XScale != "datetime" || s.Elements[0].Points[0][0] != "2024-01-01T00:00:00" {
		t.Fatalf("scatter %#v", s)
	}
	if u := sc.Elements[4].(*UnknownChart); u.ChartType() != ChartUnknown {
		t.Fatalf("unknown %#v", u)
	}
	if r, _ := parseResult([]byte(`{"type":"result","chart":{}}`)); r.Chart != nil {
		t.Fatalf("empty chart decoded as %#v", r.Chart)
	}
}

// TestResultFormats: a raw LaTeX display has exactly ["latex"] (docs/wire/code-interpreter.md §4.2).
func TestResultFormats(t *testing.T) {
	r, err := parseResult([]byte(`{"type":"result","latex":"$x$","is_main_result":false,"extra":{}}`))
	if err != nil || !slices.Equal(r.Formats(), []string{"latex"}) {
		t.Fatalf("formats %v, %v", r.Formats(), err)
	}
	r, _ = parseResult([]byte(`{"type":"result","json":{"a":[1,2]},"data":{"a":[1,2,3]},"text":"x"}`))
	if r.JSON["a"] == nil || len(r.Data["a"].([]any)) != 3 {
		t.Fatalf("json/data %+v", r)
	}
}
