"""Helpers shared by the code-interpreter compatibility tests."""

import base64
import math
import os
import uuid
from typing import Any

REQUIRED_ENV = ("E2B_API_URL", "E2B_SANDBOX_URL", "E2B_API_KEY")

#: Template override; None means the SDK default (code-interpreter-v1).
TEMPLATE = os.environ.get("CUBBY_COMPAT_CI_TEMPLATE") or None

#: Metadata key every sandbox of this suite carries, for leak hunting.
SUITE_KEY = "cubby-compat"

#: The sandbox user's home, the default cwd of every context (docs/wire/code-interpreter.md §4.1).
HOME = "/home/user"

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"

#: Keys a chart of each type must carry, None allowed (docs/wire/code-interpreter.md §4.4).
_COMMON = ["type", "title", "elements"]
_TWO_D = ["x_label", "y_label", "x_unit", "y_unit"]
_POINT = ["x_ticks", "y_ticks", "x_tick_labels", "y_tick_labels", "x_scale", "y_scale"]


def uniq(prefix: str = "c") -> str:
    """A short random token usable in metadata, paths and names."""
    return prefix + uuid.uuid4().hex[:12]


def chart_keys(chart_type: str) -> list:
    """The keys a chart of chart_type must have."""
    keys = list(_COMMON)
    if chart_type in ("line", "scatter", "bar", "box_and_whisker"):
        keys += _TWO_D
    if chart_type in ("line", "scatter"):
        keys += _POINT
    return keys


def assert_no_error(execution, what: str = "execution") -> None:
    """Fails showing the execution error, if there is one."""
    e = execution.error
    assert e is None, f"{what} failed: {e.name}: {e.value}\n{e.traceback}"


def run_ok(sbx, code: str, **kwargs):
    """Runs code and asserts it succeeded; returns the Execution."""
    execution = sbx.run_code(code, **kwargs)
    assert_no_error(execution, repr(code[:60]))
    return execution


async def arun_ok(sbx, code: str, **kwargs):
    """Async variant of :func:`run_ok`."""
    execution = await sbx.run_code(code, **kwargs)
    assert_no_error(execution, repr(code[:60]))
    return execution


def assert_png(b64: Any, what: str) -> None:
    """Asserts b64 is a base64-encoded PNG."""
    assert isinstance(b64, str), f"{what}: png is not a base64 string"
    assert base64.b64decode(b64)[:8] == PNG_MAGIC, f"{what}: not a PNG"


def assert_fields(actual: Any, expected: Any, path: str = "chart") -> None:
    """Compares actual with expected field by field.

    Every key of an expected dict must be in actual and match recursively;
    lists and tuples must have the same length; numbers may differ by 1e-6
    (relative); bools and None must match exactly. Keys of actual that
    expected does not mention are not checked.
    """
    if isinstance(expected, bool) or expected is None:
        assert actual is expected, f"{path}: got {actual!r}, want {expected!r}"
    elif isinstance(expected, (int, float)):
        assert isinstance(actual, (int, float)) and not isinstance(actual, bool), (
            f"{path}: {actual!r} is not a number"
        )
        assert math.isclose(actual, expected, rel_tol=1e-6, abs_tol=1e-6), (
            f"{path}: got {actual!r}, want {expected!r}"
        )
    elif isinstance(expected, (list, tuple)):
        assert isinstance(actual, (list, tuple)), f"{path}: {actual!r} is not a list"
        assert len(actual) == len(expected), f"{path}: length of {actual!r}"
        for i, (a, e) in enumerate(zip(actual, expected)):
            assert_fields(a, e, f"{path}[{i}]")
    elif isinstance(expected, dict):
        assert isinstance(actual, dict), f"{path}: {actual!r} is not a dict"
        for k, e in expected.items():
            assert k in actual, f"{path}.{k} is missing in {actual!r}"
            assert_fields(actual[k], e, f"{path}.{k}")
    else:
        assert actual == expected, f"{path}: got {actual!r}, want {expected!r}"


def assert_chart(chart, expected: dict) -> None:
    """Checks a deserialised chart: its raw JSON has every key of its type and
    matches expected field by field."""
    assert chart is not None, "the result has no chart (the SDK drops charts lacking a key)"
    raw = chart.to_dict()
    missing = [k for k in chart_keys(expected["type"]) if k not in raw]
    assert not missing, f"{expected['type']} chart lacks {missing}: {raw!r}"
    assert_fields(raw, expected)


def figure_result(sbx, code: str):
    """Runs matplotlib code ending in plt.show(); returns the single figure result."""
    execution = run_ok(sbx, code)
    figs = [r for r in execution.results if r.png]
    assert len(figs) == 1, f"one figure expected, got {[list(r.formats()) for r in execution.results]}"
    return figs[0]
