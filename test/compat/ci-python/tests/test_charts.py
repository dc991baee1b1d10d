"""Figures, chart JSON and DataFrames with the official e2b-code-interpreter
SDK (docs/wire/code-interpreter.md §4.2–§4.4). Expected values are worked out from
the plotted data by hand, not taken from the server."""

from datetime import datetime

from e2b_code_interpreter.charts import (
    BarChart,
    BoxAndWhiskerChart,
    ChartType,
    LineChart,
    PieChart,
    ScaleType,
    ScatterChart,
    SuperChart,
)

from helpers import assert_chart, assert_fields, assert_png, chart_keys, figure_result, run_ok


def test_plt_show_gives_png_text_and_chart(sandbox):
    ex = run_ok(sandbox, "import matplotlib.pyplot as plt\nplt.plot([1, 2, 3], [1, 4, 9])\nplt.show()")
    assert len(ex.results) == 1
    r = ex.results[0]
    assert r.is_main_result is False
    assert_png(r.png, "plt.show()")
    assert r.text == "<Figure size 640x480 with 1 Axes>"
    assert isinstance(r.chart, LineChart)
    assert r.extra == {}
    assert list(r.formats()) == ["text", "png", "chart"]

    two = run_ok(sandbox, "plt.plot([1, 2], [2, 1])\nplt.show()\n1 + 1")
    assert len(two.results) == 2, "plt.show() followed by an expression gives 2 results"
    assert_png(two.results[0].png, "first")
    assert [r.is_main_result for r in two.results] == [False, True]
    assert two.text == "2"


def test_line_chart(sandbox):
    r = figure_result(
        sandbox,
        """import matplotlib.pyplot as plt
fig, ax = plt.subplots()
ax.plot([0, 1, 2, 3], [0, 1, 4, 9], label="squares")
ax.plot([0, 1, 2, 3], [3, 2, 1, 0])
ax.set_title("Growth")
ax.set_xlabel("Time (s)")
ax.set_ylabel("Distance [m]")
ax.set_xticks([0, 1, 2, 3])
ax.set_yticks([0, 5, 10])
plt.show()""",
    )
    chart = r.chart
    assert isinstance(chart, LineChart) and chart.type == ChartType.LINE
    assert_chart(
        chart,
        {
            "type": "line",
            "title": "Growth",
            "x_label": "Time (s)",
            "y_label": "Distance [m]",
            "x_unit": "s",
            "y_unit": "m",
            "x_scale": "linear",
            "y_scale": "linear",
            "x_ticks": [0, 1, 2, 3],
            "x_tick_labels": ["0", "1", "2", "3"],
            "y_ticks": [0, 5, 10],
            "y_tick_labels": ["0", "5", "10"],
            "elements": [
                {"label": "squares", "points": [[0, 0], [1, 1], [2, 4], [3, 9]]},
                {"label": "Line 1", "points": [[0, 3], [1, 2], [2, 1], [3, 0]]},
            ],
        },
    )
    assert chart.x_scale == ScaleType.LINEAR
    assert [e.label for e in chart.elements] == ["squares", "Line 1"]
    assert chart.elements[0].points == [(0, 0), (1, 1), (2, 4), (3, 9)]

    dates = figure_result(
        sandbox,
        """import datetime
fig, ax = plt.subplots()
ax.plot([datetime.datetime(2024, 1, d) for d in (1, 2, 3)], [1, 10, 100], label="d")
ax.set_yscale("log")
ax.set_ylabel("Y-axis (log scale)")
plt.show()""",
    ).chart
    assert_chart(
        dates,
        {"type": "line", "title": None, "x_label": None, "x_unit": None, "y_unit": "log scale",
         "x_scale": "datetime", "y_scale": "log"},
    )
    assert dates.x_scale == ScaleType.DATETIME and dates.y_scale == ScaleType.LOG
    assert dates.x_ticks and all(isinstance(t, str) for t in dates.x_ticks), "date ticks are ISO strings"
    for tick in dates.x_ticks:
        datetime.fromisoformat(tick)
    (line,) = dates.elements
    assert line.label == "d"
    assert [datetime.fromisoformat(x).date().isoformat() for x, _ in line.points] == [
        "2024-01-01", "2024-01-02", "2024-01-03"
    ]
    assert [y for _, y in line.points] == [1, 10, 100]

    cats = figure_result(sandbox, 'fig, ax = plt.subplots()\nax.plot(["a", "b", "c"], [1, 3, 2])\nplt.show()').chart
    assert_chart(cats, {"type": "line", "x_scale": "categorical", "x_ticks": [0, 1, 2],
                        "x_tick_labels": ["a", "b", "c"]})


def test_scatter_chart(sandbox):
    r = figure_result(
        sandbox,
        """import matplotlib.pyplot as plt
fig, ax = plt.subplots()
ax.scatter([1, 2, 3], [4, 5, 6], label="A")
ax.scatter([1.5, 2.5], [0.5, 1.5], label="B")
ax.set_title("Scatter")
ax.set_xlabel("x")
ax.set_ylabel("Speed (m/s)")
ax.set_xticks([1, 2, 3])
ax.set_yticks([0, 2, 4, 6])
plt.show()""",
    )
    assert isinstance(r.chart, ScatterChart)
    assert_chart(
        r.chart,
        {
            "type": "scatter",
            "title": "Scatter",
            "x_label": "x",
            "y_label": "Speed (m/s)",
            "x_unit": None,
            "y_unit": "m/s",
            "x_scale": "linear",
            "y_scale": "linear",
            "x_ticks": [1, 2, 3],
            "x_tick_labels": ["1", "2", "3"],
            "y_ticks": [0, 2, 4, 6],
            "y_tick_labels": ["0", "2", "4", "6"],
            "elements": [
                {"label": "A", "points": [[1, 4], [2, 5], [3, 6]]},
                {"label": "B", "points": [[1.5, 0.5], [2.5, 1.5]]},
            ],
        },
    )


def test_bar_charts(sandbox):
    v = figure_result(
        sandbox,
        """import matplotlib.pyplot as plt
fig, ax = plt.subplots()
ax.bar(["Author A", "Author B", "Author C"], [100, 200, 300], label="Books Sold")
ax.set_title("Book Sales by Authors")
ax.set_xlabel("Authors")
ax.set_ylabel("Number of Books Sold")
plt.show()""",
    ).chart
    assert isinstance(v, BarChart)
    assert_chart(
        v,
        {
            "type": "bar",
            "title": "Book Sales by Authors",
            "x_label": "Authors",
            "y_label": "Number of Books Sold",
            "x_unit": None,
            "y_unit": None,
            "elements": [
                {"label": "Author A", "group": "Books Sold", "value": 100},
                {"label": "Author B", "group": "Books Sold", "value": 200},
                {"label": "Author C", "group": "Books Sold", "value": 300},
            ],
        },
    )
    assert [(b.label, b.group, b.value) for b in v.elements][0] == ("Author A", "Books Sold", 100)

    grouped = figure_result(
        sandbox,
        """fig, ax = plt.subplots()
ax.bar([-0.2, 0.8], [10, 20], width=0.4, label="Y2023")
ax.bar([0.2, 1.2], [15, 5], width=0.4)
ax.set_xticks([0, 1], ["Q1", "Q2"])
plt.show()""",
    ).chart
    assert_chart(
        grouped,
        {
            "type": "bar",
            "title": None,
            "x_label": None,
            "y_label": None,
            "elements": [
                {"label": "Q1", "group": "Y2023", "value": 10},
                {"label": "Q2", "group": "Y2023", "value": 20},
                {"label": "Q1", "group": "Group 1", "value": 15},
                {"label": "Q2", "group": "Group 1", "value": 5},
            ],
        },
    )

    h = figure_result(
        sandbox,
        """fig, ax = plt.subplots()
ax.barh(["x", "y", "z"], [3, 1, 2], label="L")
ax.set_xlabel("Count (n)")
ax.set_ylabel("Letter")
plt.show()""",
    ).chart
    assert_chart(
        h,
        {
            "type": "bar",
            "x_label": "Letter",
            "y_label": "Count (n)",
            "x_unit": None,
            "y_unit": "n",
            "elements": [
                {"label": "x", "group": "L", "value": 3},
                {"label": "y", "group": "L", "value": 1},
                {"label": "z", "group": "L", "value": 2},
            ],
        },
    )

    mixed = figure_result(
        sandbox,
        'fig, ax = plt.subplots()\nax.plot([0, 1], [1, 2])\nax.bar(["a", "b"], [1, 2])\nax.set_title("Mixed")\nplt.show()',
    ).chart
    assert mixed.to_dict() == {"type": "unknown", "title": "Mixed", "elements": []}
    assert mixed.type == ChartType.UNKNOWN


def test_pie_chart(sandbox):
    r = figure_result(
        sandbox,
        """import matplotlib.pyplot as plt
fig, ax = plt.subplots()
ax.pie([90, 10], labels=["Big", "Small"])
ax.set_title("Share")
plt.show()""",
    )
    assert isinstance(r.chart, PieChart)
    assert_chart(
        r.chart,
        {
            "type": "pie",
            "title": "Share",
            "elements": [
                {"label": "Big", "angle": 324, "radius": 1},
                {"label": "Small", "angle": 36, "radius": 1},
            ],
        },
    )


def test_box_and_whisker_chart(sandbox):
    r = figure_result(
        sandbox,
        """import matplotlib.pyplot as plt
data = {
    "Class A": [85, 90, 78, 92, 88],
    "Class B": [95, 89, 76, 91, 84, 87],
    "Class C": [75, 82, 88, 79, 86],
}
fig, ax = plt.subplots()
ax.boxplot(list(data.values()), labels=list(data.keys()), patch_artist=True)
ax.set_title("Exam Scores Distribution")
ax.set_xlabel("Class")
ax.set_ylabel("Score (points)")
plt.show()""",
    )
    assert isinstance(r.chart, BoxAndWhiskerChart)
    # Linear-interpolated quartiles, whiskers at the last datum within 1.5 IQR
    # (Class B: Q1 84.75, IQR 5.75, lower fence 76.125, so 76 is an outlier).
    assert_chart(
        r.chart,
        {
            "type": "box_and_whisker",
            "title": "Exam Scores Distribution",
            "x_label": "Class",
            "y_label": "Score (points)",
            "x_unit": None,
            "y_unit": "points",
            "elements": [
                {"label": "Class A", "min": 78, "first_quartile": 85, "median": 88,
                 "third_quartile": 90, "max": 92, "outliers": []},
                {"label": "Class B", "min": 84, "first_quartile": 84.75, "median": 88,
                 "third_quartile": 90.5, "max": 95, "outliers": [76]},
                {"label": "Class C", "min": 75, "first_quartile": 79, "median": 82,
                 "third_quartile": 86, "max": 88, "outliers": []},
            ],
        },
    )


def test_superchart(sandbox):
    r = figure_result(
        sandbox,
        """import matplotlib.pyplot as plt
fig, (left, right) = plt.subplots(1, 2)
left.plot([1, 2], [3, 4], label="l")
left.set_title("Left")
right.bar(["p", "q"], [1, 2], label="b")
right.set_title("Right")
fig.suptitle("Both")
plt.show()""",
    )
    assert r.text == "<Figure size 640x480 with 2 Axes>"
    chart = r.chart
    assert isinstance(chart, SuperChart)
    assert isinstance(chart.elements[0], LineChart) and isinstance(chart.elements[1], BarChart)
    assert_chart(
        chart,
        {
            "type": "superchart",
            "title": "Both",
            "elements": [
                {"type": "line", "title": "Left", "elements": [{"label": "l", "points": [[1, 3], [2, 4]]}]},
                {"type": "bar", "title": "Right", "elements": [
                    {"label": "p", "group": "b", "value": 1},
                    {"label": "q", "group": "b", "value": 2},
                ]},
            ],
        },
    )
    raw = chart.to_dict()
    for sub, kind in zip(raw["elements"], ("line", "bar")):
        missing = [k for k in chart_keys(kind) if k not in sub]
        assert not missing, f"superchart {kind} element lacks {missing}"


def test_dataframe_data(sandbox):
    setup = """import pandas as pd
df = pd.DataFrame({
    "a": [1, 2, 3],
    "b": ["x", "y", "z"],
    "f": [0.5, 1.5, 2.5],
    "t": pd.to_datetime(["2024-01-01", "2024-01-02 03:04:05", "2024-01-03"]),
})"""
    main = run_ok(sandbox, setup + "\ndf")
    assert len(main.results) == 1
    r = main.results[0]
    assert r.is_main_result is True
    assert_fields(
        r.data,
        {
            "a": [1, 2, 3],
            "b": ["x", "y", "z"],
            "f": [0.5, 1.5, 2.5],
            "t": ["2024-01-01T00:00:00", "2024-01-02T03:04:05", "2024-01-03T00:00:00"],
        },
        "data",
    )
    assert list(r.data) == ["a", "b", "f", "t"]
    assert "<table" in r.html
    assert list(r.formats()) == ["text", "html", "data"]

    shown = run_ok(sandbox, 'display(df[["a"]])')
    assert len(shown.results) == 1
    assert shown.results[0].is_main_result is False
    assert shown.results[0].data == {"a": [1, 2, 3]}


def test_pil_images_display_png(sandbox):
    shown = run_ok(sandbox, 'from PIL import Image\nimg = Image.new("RGB", (8, 8), "red")\nimg.show()')
    pngs = [r for r in shown.results if r.png]
    assert len(pngs) == 1, f"Image.show() results: {[list(r.formats()) for r in shown.results]}"
    assert_png(pngs[0].png, "Image.show()")

    saved = run_ok(sandbox, 'import os\nimg.save("/tmp/red.png")\nos.path.getsize("/tmp/red.png") > 0')
    saved_pngs = [r for r in saved.results if r.png]
    assert len(saved_pngs) == 1, "Image.save() displays the image"
    assert_png(saved_pngs[0].png, "Image.save()")
    assert saved.text == "True", "the file is still written"
