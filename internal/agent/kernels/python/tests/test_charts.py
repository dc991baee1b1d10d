"""e2b/chart for matplotlib figures shown with plt.show() (docs/wire/code-interpreter.md)."""

import math

import pytest

from conftest import strict_json

POINT_KEYS = {
    "type", "title", "x_label", "y_label", "x_unit", "y_unit",
    "x_ticks", "x_tick_labels", "x_scale", "y_ticks", "y_tick_labels", "y_scale", "elements",
}
CHART_2D_KEYS = {"type", "title", "x_label", "y_label", "x_unit", "y_unit", "elements"}
BASE_KEYS = {"type", "title", "elements"}


def show(run, code):
    """Run plotting code ending in plt.show(); return the one figure's bundle."""
    bundle = run.one(code + "\nplt.show()")
    assert set(bundle) == {"text/plain", "image/png", "e2b/chart"}, sorted(bundle)
    assert strict_json(bundle["e2b/chart"]) == bundle["e2b/chart"]
    return bundle


def chart_of(run, code):
    return show(run, code)["e2b/chart"]


def test_line_chart(run):
    bundle = show(run, """
import numpy as np
x = np.linspace(0, 2 * np.pi, 100)
plt.plot(x, np.sin(x), label="sin(x)")
plt.plot(x, np.cos(x), label="cos(x)")
plt.xlabel("Time (s)")
plt.ylabel("Amplitude (Hz)")
plt.title("Plot of sin(x) and cos(x)")
""")
    assert bundle["text/plain"] == "<Figure size 640x480 with 1 Axes>"
    chart = bundle["e2b/chart"]
    assert set(chart) == POINT_KEYS
    assert chart["type"] == "line"
    assert chart["title"] == "Plot of sin(x) and cos(x)"
    assert (chart["x_label"], chart["y_label"]) == ("Time (s)", "Amplitude (Hz)")
    assert (chart["x_unit"], chart["y_unit"]) == ("s", "Hz")
    assert chart["x_ticks"] == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0]
    assert chart["x_tick_labels"] == ["0", "1", "2", "3", "4", "5", "6"]
    assert chart["y_ticks"] == [-1.0, -0.75, -0.5, -0.25, 0.0, 0.25, 0.5, 0.75, 1.0]
    assert chart["y_tick_labels"] == ["\u22121.00", "\u22120.75", "\u22120.50", "\u22120.25",
                                      "0.00", "0.25", "0.50", "0.75", "1.00"]
    assert (chart["x_scale"], chart["y_scale"]) == ("linear", "linear")
    assert [e["label"] for e in chart["elements"]] == ["sin(x)", "cos(x)"]
    sin_points = chart["elements"][0]["points"]
    assert len(sin_points) == 100
    assert sin_points[0] == [0.0, 0.0]
    assert sin_points[-1][0] == pytest.approx(2 * math.pi)
    assert sin_points[25][1] == pytest.approx(math.sin(25 * 2 * math.pi / 99))
    assert chart["elements"][1]["points"][0] == [0.0, 1.0]


def test_line_auto_labels_nan_and_no_labels(run):
    chart = chart_of(run, """
plt.plot([1, 2, 3], [4.0, float("nan"), 6.0])
plt.plot([1, 2, 3], [1, 1, 1])
plt.axhline(5)  # a full-width reference line is not a series
""")
    assert chart["type"] == "line"
    assert chart["title"] is None
    assert chart["x_label"] is None and chart["x_unit"] is None
    assert chart["y_label"] is None and chart["y_unit"] is None
    assert [e["label"] for e in chart["elements"]] == ["Line 0", "Line 1"]
    assert chart["elements"][0]["points"] == [[1.0, 4.0], [2.0, None], [3.0, 6.0]]


def test_line_chart_dates(run):
    chart = chart_of(run, """
import datetime
days = [datetime.datetime(2023, 9, 1) + datetime.timedelta(days=i) for i in range(5)]
plt.plot(days, [10, 12, 9, 14, 11], label="temp")
plt.xlabel("Date")
plt.ylabel("Temperature [°C]")
""")
    assert chart["x_scale"] == "datetime"
    assert chart["y_scale"] == "linear"
    assert chart["y_unit"] == "°C"
    assert chart["elements"][0]["points"][0] == ["2023-09-01T00:00:00+00:00", 10.0]
    assert chart["elements"][0]["points"][4] == ["2023-09-05T00:00:00+00:00", 11.0]
    assert all(isinstance(t, str) and t.startswith("2023-09-0") for t in chart["x_ticks"])
    assert len(chart["x_tick_labels"]) == len(chart["x_ticks"]) > 0
    assert all(isinstance(t, float) for t in chart["y_ticks"])


def test_pandas_datetime_index_plot(run):
    chart = chart_of(run, """
import pandas as pd
s = pd.Series([1.0, 3.0, 2.0], index=pd.date_range("2024-01-01", periods=3, freq="D"))
s.plot()
""")
    assert chart["type"] == "line"
    assert chart["x_scale"] == "datetime"
    assert [p[0] for p in chart["elements"][0]["points"]] == [
        "2024-01-01T00:00:00", "2024-01-02T00:00:00", "2024-01-03T00:00:00"]
    assert [p[1] for p in chart["elements"][0]["points"]] == [1.0, 3.0, 2.0]


def test_log_and_categorical_scales(run):
    chart = chart_of(run, """
plt.plot(["a", "b", "c"], [1, 10, 100])
plt.yscale("log")
plt.ylabel("Y-axis (log scale)")
""")
    assert (chart["x_scale"], chart["y_scale"]) == ("categorical", "log")
    assert chart["x_ticks"] == [0.0, 1.0, 2.0]
    assert chart["x_tick_labels"] == ["a", "b", "c"]
    assert chart["y_unit"] == "log scale"
    assert chart["elements"][0]["points"] == [[0.0, 1.0], [1.0, 10.0], [2.0, 100.0]]

    chart = chart_of(run, """
plt.plot([0, 1, 2], [3, 4, 5])
plt.xticks([0, 1, 2], ["low", "mid", "high"])
""")
    assert chart["x_scale"] == "categorical"
    assert chart["y_scale"] == "linear"


def test_scatter_chart(run):
    chart = chart_of(run, """
plt.scatter([1, 2, 3], [4, 5, 6], label="Dataset 1")
plt.scatter([1.5, 2.5], [7, 8], label="Dataset 2")
plt.grid(True)
plt.xlabel("A [m]")
plt.ylabel("B")
plt.title("Scatter")
""")
    assert set(chart) == POINT_KEYS
    assert chart["type"] == "scatter"
    assert chart["title"] == "Scatter"
    assert (chart["x_unit"], chart["y_unit"]) == ("m", None)
    assert chart["elements"] == [
        {"label": "Dataset 1", "points": [[1.0, 4.0], [2.0, 5.0], [3.0, 6.0]]},
        {"label": "Dataset 2", "points": [[1.5, 7.0], [2.5, 8.0]]},
    ]


def test_scatter_with_colorbar_is_not_a_superchart(run):
    chart = chart_of(run, """
sc = plt.scatter([1, 2, 3], [3, 2, 1], c=[0.1, 0.5, 0.9])
plt.colorbar(sc)
""")
    assert chart["type"] == "scatter"


def test_bar_chart_vertical(run):
    chart = chart_of(run, """
authors = ["Author A", "Author B", "Author C", "Author D"]
sales = [100, 200, 300, 400]
plt.bar(authors, sales, color="blue")
plt.axhline(0, color="black")
plt.xlabel("Authors")
plt.ylabel("Number of Books Sold (k)")
plt.title("Book Sales by Authors")
""")
    assert set(chart) == CHART_2D_KEYS
    assert chart["type"] == "bar"
    assert chart["title"] == "Book Sales by Authors"
    assert (chart["x_label"], chart["y_label"]) == ("Authors", "Number of Books Sold (k)")
    assert (chart["x_unit"], chart["y_unit"]) == (None, "k")
    assert chart["elements"] == [
        {"label": "Author A", "group": "Group 0", "value": 100.0},
        {"label": "Author B", "group": "Group 0", "value": 200.0},
        {"label": "Author C", "group": "Group 0", "value": 300.0},
        {"label": "Author D", "group": "Group 0", "value": 400.0},
    ]


def test_bar_chart_horizontal_swaps_axes(run):
    chart = chart_of(run, """
plt.barh(["x", "y", "z"], [3, -1, 2])
plt.xlabel("Value (USD)")
plt.ylabel("Item")
""")
    assert chart["type"] == "bar"
    assert (chart["x_label"], chart["y_label"]) == ("Item", "Value (USD)")
    assert (chart["x_unit"], chart["y_unit"]) == (None, "USD")
    assert [(e["label"], e["value"]) for e in chart["elements"]] == [("x", 3.0), ("y", -1.0), ("z", 2.0)]


def test_bar_chart_groups(run):
    chart = chart_of(run, """
import numpy as np
x = np.arange(3)
fig, ax = plt.subplots()
ax.bar(x - 0.2, [1, 2, 3], width=0.4, label="2022")
ax.bar(x + 0.2, [4, 5, 6], width=0.4)
ax.set_xticks(x, ["Q1", "Q2", "Q3"])
""")
    assert [(e["label"], e["group"], e["value"]) for e in chart["elements"]] == [
        ("Q1", "2022", 1.0), ("Q2", "2022", 2.0), ("Q3", "2022", 3.0),
        ("Q1", "Group 1", 4.0), ("Q2", "Group 1", 5.0), ("Q3", "Group 1", 6.0),
    ]


def test_pie_chart(run):
    chart = chart_of(run, """
plt.pie([90, 10], labels=["Big", "Small"])
plt.title("Shares")
""")
    assert set(chart) == BASE_KEYS
    assert chart == {
        "type": "pie",
        "title": "Shares",
        "elements": [
            {"label": "Big", "angle": 324, "radius": 1.0},
            {"label": "Small", "angle": 36, "radius": 1.0},
        ],
    }


def test_box_and_whisker_chart(run):
    chart = chart_of(run, """
fig, ax = plt.subplots()
ax.boxplot([[1, 2, 3, 4, 5, 6, 7, 8, 9, 100], [10, 20, 30, 40, 50]],
           labels=["Class A", "Class B"], patch_artist=True)
ax.set_title("Exam Scores Distribution")
ax.set_xlabel("Class")
ax.set_ylabel("Score (points)")
""")
    assert set(chart) == CHART_2D_KEYS
    assert chart["type"] == "box_and_whisker"
    assert chart["title"] == "Exam Scores Distribution"
    assert (chart["x_label"], chart["y_label"]) == ("Class", "Score (points)")
    assert (chart["x_unit"], chart["y_unit"]) == (None, "points")
    assert chart["elements"] == [
        {"label": "Class A", "min": 1.0, "first_quartile": 3.25, "median": 5.5,
         "third_quartile": 7.75, "max": 9.0, "outliers": [100.0]},
        {"label": "Class B", "min": 10.0, "first_quartile": 20.0, "median": 30.0,
         "third_quartile": 40.0, "max": 50.0, "outliers": []},
    ]


def test_box_and_whisker_matches_matplotlib_stats_horizontal(run):
    chart = chart_of(run, """
import numpy as np
from matplotlib import cbook
rng = np.random.default_rng(7)
data = [rng.normal(50, 10, 200), rng.normal(70, 5, 150)]
stats = cbook.boxplot_stats(data)
fig, ax = plt.subplots()
ax.boxplot(data, vert=False, patch_artist=True, showmeans=True)
ax.set_xlabel("Latency (ms)")
ax.set_ylabel("Server")
""")
    stats = run.shell.user_ns["stats"]
    assert (chart["x_label"], chart["y_label"]) == ("Server", "Latency (ms)")
    assert [e["label"] for e in chart["elements"]] == ["1", "2"]
    for element, s in zip(chart["elements"], stats):
        assert element["min"] == pytest.approx(s["whislo"])
        assert element["first_quartile"] == pytest.approx(s["q1"])
        assert element["median"] == pytest.approx(s["med"])
        assert element["third_quartile"] == pytest.approx(s["q3"])
        assert element["max"] == pytest.approx(s["whishi"])
        assert sorted(element["outliers"]) == pytest.approx(sorted(s["fliers"].tolist()))


def test_superchart(run):
    bundle = show(run, """
fig, (a, b) = plt.subplots(1, 2)
fig.suptitle("Overview")
a.plot([1, 2], [3, 4], label="up")
a.set_title("Trend")
b.bar(["p", "q"], [5, 6])
b.set_title("Totals")
""")
    assert bundle["text/plain"] == "<Figure size 640x480 with 2 Axes>"
    chart = bundle["e2b/chart"]
    assert set(chart) == BASE_KEYS
    assert chart["type"] == "superchart"
    assert chart["title"] == "Overview"
    line, bar = chart["elements"]
    assert set(line) == POINT_KEYS and line["type"] == "line" and line["title"] == "Trend"
    assert line["elements"] == [{"label": "up", "points": [[1.0, 3.0], [2.0, 4.0]]}]
    assert set(bar) == CHART_2D_KEYS and bar["type"] == "bar" and bar["title"] == "Totals"
    assert [(e["label"], e["value"]) for e in bar["elements"]] == [("p", 5.0), ("q", 6.0)]


def test_unknown_chart(run):
    chart = chart_of(run, """
plt.plot([1, 2, 3], [1, 2, 3])
plt.bar([1, 2, 3], [3, 2, 1])
plt.title("Mixed")
""")
    assert chart == {"type": "unknown", "title": "Mixed", "elements": []}


def test_blank_figure_gives_empty_chart(run):
    outputs = run.run("fig = plt.figure()\nplt.show()\n1 + 1")
    assert [o[0] for o in outputs] == ["display_data", "execute_result"]
    assert outputs[0][1]["e2b/chart"] == {}
    assert outputs[0][1]["text/plain"] == "<Figure size 640x480 with 0 Axes>"
    assert outputs[1][1]["text/plain"] == "2"


def test_figure_as_last_expression(run):
    outputs = run.run("fig, ax = plt.subplots()\nax.plot([1, 2])\nfig")
    kinds = [o[0] for o in outputs]
    # the execute_result, then the inline backend flushes the still-open figure
    assert kinds[0] == "execute_result"
    assert outputs[0][1]["e2b/chart"]["type"] == "line"


def test_extraction_failure_gives_empty_chart(run):
    chart = chart_of(run, """
fig, ax = plt.subplots()
ax.plot([1, 2], [1, 2])
ax.get_xlabel = None  # breaks the extractor, not the figure
""")
    assert chart == {}
