package sdk

import (
	"encoding/json"
	"strconv"
)

// ChartType is the kind of a chart (docs/wire/code-interpreter.md §4.4).
type ChartType string

// Chart types.
const (
	ChartLine          ChartType = "line"
	ChartScatter       ChartType = "scatter"
	ChartBar           ChartType = "bar"
	ChartPie           ChartType = "pie"
	ChartBoxAndWhisker ChartType = "box_and_whisker"
	ChartSuperchart    ChartType = "superchart"
	ChartUnknown       ChartType = "unknown"
)

// Chart is a matplotlib figure decoded from a result's e2b/chart data. Its
// dynamic type is one of *LineChart, *ScatterChart, *BarChart, *PieChart,
// *BoxAndWhiskerChart, *SuperChart or *UnknownChart.
type Chart interface {
	// ChartType returns the chart's type.
	ChartType() ChartType
	// ChartTitle returns the chart's title ("" when none).
	ChartTitle() string
}

// BaseChart holds what every chart has.
type BaseChart struct {
	Type  ChartType `json:"type"`
	Title string    `json:"title"`
}

// ChartType returns the chart's type.
func (c *BaseChart) ChartType() ChartType { return c.Type }

// ChartTitle returns the chart's title.
func (c *BaseChart) ChartTitle() string { return c.Title }

// Chart2D is a chart with labelled axes. Units are parsed by the server from
// the labels ("Time (s)" → "s").
type Chart2D struct {
	BaseChart
	XLabel string `json:"x_label"`
	YLabel string `json:"y_label"`
	XUnit  string `json:"x_unit"`
	YUnit  string `json:"y_unit"`
}

// PointChart is a 2-D chart of points (line or scatter). Tick values are
// float64, or ISO 8601 strings on date axes. Scales are "linear", "log",
// "datetime", "categorical", … .
type PointChart struct {
	Chart2D
	XTicks      []any         `json:"x_ticks"`
	XTickLabels []string      `json:"x_tick_labels"`
	XScale      string        `json:"x_scale"`
	YTicks      []any         `json:"y_ticks"`
	YTickLabels []string      `json:"y_tick_labels"`
	YScale      string        `json:"y_scale"`
	Elements    []PointSeries `json:"elements"`
}

// PointSeries is one line or scatter series: Points are [x, y] pairs whose
// values are float64, or ISO 8601 strings for dates.
type PointSeries struct {
	Label  string   `json:"label"`
	Points [][2]any `json:"points"`
}

// LineChart is a chart of Line2D series.
type LineChart struct{ PointChart }

// ScatterChart is a chart of scatter series.
type ScatterChart struct{ PointChart }

// BarChart is a bar chart; each element is one bar.
type BarChart struct {
	Chart2D
	Elements []BarData `json:"elements"`
}

// BarData is one bar: Label is its category, Group its container's label.
type BarData struct {
	Label string      `json:"label"`
	Group string      `json:"group"`
	Value FlexFloat64 `json:"value"`
}

// PieChart is a pie chart; each element is one wedge.
type PieChart struct {
	BaseChart
	Elements []PieData `json:"elements"`
}

// PieData is one wedge: Angle in degrees, Radius in axes units.
type PieData struct {
	Label  string      `json:"label"`
	Angle  FlexFloat64 `json:"angle"`
	Radius FlexFloat64 `json:"radius"`
}

// BoxAndWhiskerChart is a box plot; each element is one box.
type BoxAndWhiskerChart struct {
	Chart2D
	Elements []BoxAndWhiskerData `json:"elements"`
}

// BoxAndWhiskerData is one box's statistics.
type BoxAndWhiskerData struct {
	Label         string        `json:"label"`
	Min           FlexFloat64   `json:"min"`
	FirstQuartile FlexFloat64   `json:"first_quartile"`
	Median        FlexFloat64   `json:"median"`
	ThirdQuartile FlexFloat64   `json:"third_quartile"`
	Max           FlexFloat64   `json:"max"`
	Outliers      []FlexFloat64 `json:"outliers"`
}

// SuperChart is a figure with several axes; Elements are its charts.
type SuperChart struct {
	BaseChart
	Elements []Chart `json:"-"`
}

// UnknownChart is an axes the server could not classify; Elements are kept raw.
type UnknownChart struct {
	BaseChart
	Elements []json.RawMessage `json:"elements"`
}

// FlexFloat64 is a number that may arrive as a JSON number or string (the
// JS typing of bar values is string); null and unparsable values are 0.
type FlexFloat64 float64

// UnmarshalJSON accepts numbers and numeric strings.
func (f *FlexFloat64) UnmarshalJSON(b []byte) error {
	var n float64
	if err := json.Unmarshal(b, &n); err == nil {
		*f = FlexFloat64(n)
		return nil
	}
	var s string
	if err := json.Unmarshal(b, &s); err == nil {
		n, _ = strconv.ParseFloat(s, 64)
	}
	*f = FlexFloat64(n)
	return nil
}

// parseChart decodes e2b/chart data; nil for an empty object or garbage.
func parseChart(raw json.RawMessage) Chart {
	var head struct {
		Type     ChartType         `json:"type"`
		Elements []json.RawMessage `json:"elements"`
	}
	if json.Unmarshal(raw, &head) != nil || head.Type == "" {
		return nil
	}
	var c Chart
	switch head.Type {
	case ChartLine:
		c = &LineChart{}
	case ChartScatter:
		c = &ScatterChart{}
	case ChartBar:
		c = &BarChart{}
	case ChartPie:
		c = &PieChart{}
	case ChartBoxAndWhisker:
		c = &BoxAndWhiskerChart{}
	case ChartSuperchart:
		sc := &SuperChart{}
		_ = json.Unmarshal(raw, &sc.BaseChart)
		for _, e := range head.Elements {
			if sub := parseChart(e); sub != nil {
				sc.Elements = append(sc.Elements, sub)
			}
		}
		return sc
	default:
		c = &UnknownChart{}
	}
	if json.Unmarshal(raw, c) != nil {
		u := &UnknownChart{}
		_ = json.Unmarshal(raw, &u.BaseChart)
		return u
	}
	return c
}
