"""matplotlib Figure -> ``e2b/chart`` JSON (docs/wire/code-interpreter.md).

The chart describes what a figure plots, not how it looks: the chart type,
title, axis labels and units, ticks and scales, and per-type elements (points
of a line, bars, pie wedges, box statistics). Every key of a chart type is
always present, with None where there is no value, because the E2B Python SDK
drops a chart that lacks any key.

Only matplotlib artists are inspected; nothing is drawn.
"""

import math
import re
import sys
import warnings

import numpy as np
from matplotlib.collections import PathCollection
from matplotlib.container import BarContainer
from matplotlib.lines import Line2D
from matplotlib.patches import PathPatch, Rectangle, Wedge
from matplotlib.text import Text

# "Time (s)" -> "s" (a parenthesis must follow a space); "Speed [m/s]" -> "m/s".
_UNIT_RE = re.compile(r"\s\(([^()]*)\)|\[([^\[\]]*)\]")
_CHILD_RE = re.compile(r"^_child(\d+)$")
_CONTAINER_RE = re.compile(r"^_container(\d+)$")
_COLORBAR_LABEL = "<colorbar>"


def figure_to_chart(fig):
    """Return the chart dict for fig: {} when no Axes has data or extraction
    fails, the Axes' chart for one Axes with data, else a superchart."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # extraction must not print into the cell's output
            return _figure_to_chart(fig)
    except Exception:  # a chart must never break the display of a figure
        return {}


def _figure_to_chart(fig):
    axes = [ax for ax in fig.get_axes() if _has_data(ax)]
    if not axes:
        return {}
    if len(axes) == 1:
        return axes_to_chart(axes[0])
    return {
        "type": "superchart",
        "title": _suptitle(fig),
        "elements": [axes_to_chart(ax) for ax in axes],
    }


def axes_to_chart(ax):
    """Return the chart dict of one Axes (type detected by chart_type)."""
    kind = chart_type(ax)
    build = {
        "line": _line_chart,
        "scatter": _scatter_chart,
        "bar": _bar_chart,
        "pie": _pie_chart,
        "box_and_whisker": _box_chart,
    }.get(kind)
    if build is None:
        return {"type": "unknown", "title": _title(ax), "elements": []}
    return build(ax)


def chart_type(ax):
    """Classify ax by its non-Text children: all Line2D -> line; all
    PathPatch/Line2D -> box_and_whisker; then, grid-like lines ignored, all
    PathCollection -> scatter, all Wedge -> pie, all Rectangle -> bar; else
    unknown."""
    arts = [a for a in _children(ax) if not isinstance(a, Text)]
    if not arts:
        return "unknown"
    if all(isinstance(a, Line2D) for a in arts):
        return "line"
    if all(isinstance(a, (PathPatch, Line2D)) for a in arts):
        return "box_and_whisker"
    arts = [a for a in arts if not _is_grid_line(ax, a)]
    for cls, kind in ((PathCollection, "scatter"), (Wedge, "pie"), (Rectangle, "bar")):
        if arts and all(isinstance(a, cls) for a in arts):
            return kind
    return "unknown"


def parse_unit(label):
    """Return the unit in an axis label ("Time (s)" -> "s", "v [m/s]" ->
    "m/s"), or None."""
    if not label:
        return None
    m = _UNIT_RE.search(label)
    if m is None:
        return None
    unit = m.group(1) if m.group(1) is not None else m.group(2)
    return unit.strip() or None


# --- figure / axes helpers -------------------------------------------------


def _children(ax):
    children = getattr(ax, "_children", None)
    if children is not None:
        return list(children)
    return list(ax.lines) + list(ax.collections) + list(ax.patches) + list(ax.images) + list(ax.texts)


def _has_data(ax):
    if ax.get_label() == _COLORBAR_LABEL or not ax.get_visible():
        return False
    return any(not isinstance(a, Text) for a in _children(ax))


def _is_grid_line(ax, artist):
    """axhline/axvline-style lines span the Axes in one direction."""
    if not isinstance(artist, Line2D):
        return False
    t = artist.get_transform()
    return t == ax.get_xaxis_transform(which="grid") or t == ax.get_yaxis_transform(which="grid")


def _text_or_none(s):
    return s if s else None


def _title(ax):
    return _text_or_none(ax.get_title() or ax.get_title(loc="left") or ax.get_title(loc="right"))


def _suptitle(fig):
    st = getattr(fig, "_suptitle", None)
    return _text_or_none(st.get_text()) if st is not None else None


def _num(v):
    v = float(v)
    return v if math.isfinite(v) else None


def _series_label(label, auto):
    """matplotlib's automatic "_childN" label becomes "<auto> N"."""
    m = _CHILD_RE.match(label or "")
    return "%s %s" % (auto, m.group(1)) if m else (label or "")


def _base2d(ax, kind, x_label, y_label):
    x_label, y_label = _text_or_none(x_label), _text_or_none(y_label)
    return {
        "type": kind,
        "title": _title(ax),
        "x_label": x_label,
        "y_label": y_label,
        "x_unit": parse_unit(x_label),
        "y_unit": parse_unit(y_label),
        "elements": [],
    }


# --- axis values: dates, ticks, scales ---------------------------------------


def _converter(axis):
    get = getattr(axis, "get_converter", None)
    return get() if get is not None else getattr(axis, "converter", None)


def _date_decoder(axis):
    """Return a function mapping an axis value to an ISO string when the axis
    holds dates (matplotlib date numbers, or pandas period ordinals), else None."""
    fmt = axis.get_major_formatter()
    if type(fmt).__name__ == "TimeSeries_DateFormatter" and getattr(fmt, "freq", None) is not None:
        pd = sys.modules.get("pandas")
        if pd is not None:
            freq = fmt.freq
            return lambda v: pd.Period(ordinal=int(round(v)), freq=freq).to_timestamp().isoformat()
    conv = _converter(axis)
    for obj in (conv, fmt):
        if obj is not None and type(obj).__module__.startswith("matplotlib.dates"):
            from matplotlib import dates

            return lambda v: dates.num2date(v).isoformat()
        if obj is not None and type(obj).__name__ == "DatetimeConverter":  # pandas' converter
            from matplotlib import dates

            return lambda v: dates.num2date(v).isoformat()
    return None


def _values(decode, column):
    """Axis values as floats, or ISO strings through decode; non-finite -> None."""
    out = []
    for v in np.asarray(column, dtype=float).tolist():
        if not math.isfinite(v):
            out.append(None)
        else:
            out.append(decode(v) if decode is not None else v)
    return out


def _points(ax, xy):
    xy = np.ma.filled(np.ma.asarray(xy, dtype=float), np.nan).reshape(-1, 2)
    xs = _values(_date_decoder(ax.xaxis), xy[:, 0])
    ys = _values(_date_decoder(ax.yaxis), xy[:, 1])
    return [[x, y] for x, y in zip(xs, ys)]


def _visible_ticks(axis):
    """Return (locations, labels) of the major ticks inside the view interval,
    labelled by the axis formatter exactly as a draw would."""
    locs = np.asarray(axis.get_majorticklocs(), dtype=float)
    labels = [str(s) for s in axis.get_major_formatter().format_ticks(locs)]
    lo, hi = sorted(float(v) for v in axis.get_view_interval())
    tol = (hi - lo) * 1e-9
    keep = [i for i, v in enumerate(locs.tolist()) if lo - tol <= v <= hi + tol]
    return [float(locs[i]) for i in keep], [labels[i] for i in keep]


def _tick_number(label):
    try:
        return float(label.replace("\u2212", "-"))
    except ValueError:
        return None


def _is_categorical(axis, locs, labels):
    conv = _converter(axis)
    if conv is not None and type(conv).__module__.startswith("matplotlib.category"):
        return True
    if not locs or locs != [float(i) for i in range(len(locs))]:
        return False
    return any(_tick_number(label) != i for i, label in enumerate(labels))


def _axis_info(ax, axis, prefix):
    locs, labels = _visible_ticks(axis)
    decode = _date_decoder(axis)
    if decode is not None:
        scale = "datetime"
    else:
        scale = axis.get_scale()
        if scale == "linear" and _is_categorical(axis, locs, labels):
            scale = "categorical"
    return {
        prefix + "_ticks": _values(decode, locs),
        prefix + "_tick_labels": labels,
        prefix + "_scale": scale,
    }


def _point_chart(ax, kind):
    chart = _base2d(ax, kind, ax.get_xlabel(), ax.get_ylabel())
    elements = chart.pop("elements")
    chart.update(_axis_info(ax, ax.xaxis, "x"))
    chart.update(_axis_info(ax, ax.yaxis, "y"))
    chart["elements"] = elements
    return chart


# --- chart types ---------------------------------------------------------------


def _line_chart(ax):
    chart = _point_chart(ax, "line")
    for line in _children(ax):
        if isinstance(line, Line2D) and not _is_grid_line(ax, line):
            chart["elements"].append({
                "label": _series_label(line.get_label(), "Line"),
                "points": _points(ax, line.get_xydata()),
            })
    return chart


def _scatter_chart(ax):
    chart = _point_chart(ax, "scatter")
    for coll in _children(ax):
        if isinstance(coll, PathCollection):
            chart["elements"].append({
                "label": _series_label(coll.get_label(), "Line"),
                "points": _points(ax, coll.get_offsets()),
            })
    return chart


def _pie_chart(ax):
    elements = []
    for w in _children(ax):
        if isinstance(w, Wedge):
            elements.append({
                "label": w.get_label() or "",
                "angle": int(round(abs(w.theta2 - w.theta1))),
                "radius": _num(w.r),
            })
    return {"type": "pie", "title": _title(ax), "elements": elements}


def _bar_containers(ax):
    containers = [c for c in ax.containers if isinstance(c, BarContainer)]
    if containers:
        return containers
    rects = [a for a in _children(ax) if isinstance(a, Rectangle)]
    return [BarContainer(rects, label="_container0")]


def _bars_horizontal(containers):
    orientations = {getattr(c, "orientation", None) for c in containers}
    if orientations in ({"horizontal"}, {"vertical"}):
        return orientations == {"horizontal"}
    rects = [r for c in containers for r in c.patches]
    heights = {round(r.get_height(), 12) for r in rects}
    widths = {round(r.get_width(), 12) for r in rects}
    return len(heights) == 1 and len(widths) > 1


def _category_label(center, locs, labels):
    """The label of the tick nearest to a bar/box center, if it is within half
    the tick spacing (grouped bars are offset from their tick); else the
    center itself."""
    if locs:
        i = min(range(len(locs)), key=lambda k: abs(locs[k] - center))
        spacing = min((b - a for a, b in zip(locs, locs[1:]) if b > a), default=None)
        if spacing is None or abs(locs[i] - center) <= spacing / 2 + 1e-9:
            return labels[i]
    return "%g" % center


def _group_label(label, index):
    m = _CONTAINER_RE.match(label or "")
    if m:
        return "Group %s" % m.group(1)
    return label or "Group %d" % index


def _bar_chart(ax):
    containers = _bar_containers(ax)
    horizontal = _bars_horizontal(containers)
    cat_axis = ax.yaxis if horizontal else ax.xaxis
    if horizontal:
        chart = _base2d(ax, "bar", ax.get_ylabel(), ax.get_xlabel())
    else:
        chart = _base2d(ax, "bar", ax.get_xlabel(), ax.get_ylabel())
    locs, labels = _visible_ticks(cat_axis)
    for index, container in enumerate(containers):
        group = _group_label(container.get_label(), index)
        for r in container.patches:
            if horizontal:
                center, value = r.get_y() + r.get_height() / 2, r.get_width()
            else:
                center, value = r.get_x() + r.get_width() / 2, r.get_height()
            chart["elements"].append({
                "label": _category_label(center, locs, labels),
                "group": group,
                "value": _num(value),
            })
    return chart


def _box_chart(ax):
    boxes = [a for a in _children(ax) if isinstance(a, PathPatch)]
    lines = [a for a in _children(ax) if isinstance(a, Line2D)]
    vertical = _boxes_vertical(boxes, lines)
    if vertical:
        chart = _base2d(ax, "box_and_whisker", ax.get_xlabel(), ax.get_ylabel())
    else:
        chart = _base2d(ax, "box_and_whisker", ax.get_ylabel(), ax.get_xlabel())
    locs, labels = _visible_ticks(ax.xaxis if vertical else ax.yaxis)
    for box in boxes:
        chart["elements"].append(_box_stats(box, lines, vertical, locs, labels))
    return chart


def _box_extents(box):
    """((pos_lo, pos_hi), (val_lo, val_hi)) in data coordinates for a vertical
    box; swap the tuple for a horizontal one."""
    v = np.asarray(box.get_path().vertices, dtype=float)
    v = box.get_patch_transform().transform(v) if box.get_patch_transform() is not None else v
    return (float(v[:, 0].min()), float(v[:, 0].max())), (float(v[:, 1].min()), float(v[:, 1].max()))


def _boxes_vertical(boxes, lines):
    """A vertical box has whiskers: lines at a constant x inside the box's x
    range that reach beyond its y range. Default vertical."""
    for box in boxes:
        (x0, x1), (y0, y1) = _box_extents(box)
        for line in lines:
            xy = np.asarray(line.get_xydata(), dtype=float)
            if len(xy) != 2:
                continue
            if xy[0, 0] == xy[1, 0] and x0 <= xy[0, 0] <= x1 and (xy[:, 1].min() < y0 or xy[:, 1].max() > y1):
                return True
            if xy[0, 1] == xy[1, 1] and y0 <= xy[0, 1] <= y1 and (xy[:, 0].min() < x0 or xy[:, 0].max() > x1):
                return False
    return True


def _box_stats(box, lines, vertical, locs, labels):
    (x0, x1), (y0, y1) = _box_extents(box)
    if not vertical:
        (x0, x1), (y0, y1) = (y0, y1), (x0, x1)
    q1, q3 = y0, y1
    eps = (x1 - x0) * 1e-6
    median, median_width, lo, hi, markers = None, 0.0, q1, q3, []
    for line in lines:
        xy = np.asarray(line.get_xydata(), dtype=float)
        if not vertical:
            xy = xy[:, ::-1]
        if len(xy) == 0 or xy[:, 0].min() < x0 - eps or xy[:, 0].max() > x1 + eps:
            continue  # belongs to another box
        if line.get_linestyle() in ("None", "none", " ", ""):
            markers.extend(float(y) for y in xy[:, 1] if math.isfinite(y))
            continue
        width = abs(xy[-1, 0] - xy[0, 0])
        if len(xy) == 2 and xy[0, 1] == xy[1, 1] and q1 <= xy[0, 1] <= q3 and width > 0 and width >= median_width:
            # the widest horizontal line inside the box (caps are narrower)
            median, median_width = float(xy[0, 1]), width
        lo, hi = min(lo, float(np.nanmin(xy[:, 1]))), max(hi, float(np.nanmax(xy[:, 1])))
    return {
        "label": _category_label((x0 + x1) / 2, locs, labels),
        "min": _num(lo),
        "first_quartile": _num(q1),
        "median": _num(median) if median is not None else None,
        "third_quartile": _num(q3),
        "max": _num(hi),
        # marker-only lines inside the whiskers are means, not outliers
        "outliers": [m for m in markers if m < lo or m > hi],
    }
