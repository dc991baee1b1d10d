"""application/json for lists and dicts, numpy-safe (docs/wire/code-interpreter.md)."""

import datetime
import math

import numpy as np
import pytest

from cubby_display.jsonsafe import NotJSONSafe, json_key, to_json_safe
from conftest import strict_json


def test_list_and_dict_results_carry_json(run):
    outputs = run.run("[1, 2, 3]")
    assert outputs == [("execute_result", {"text/plain": "[1, 2, 3]", "application/json": [1, 2, 3]},
                        {"application/json": {"expanded": True}})]
    bundle = run.one("""
import numpy as np
{"a": np.int64(1), "b": np.array([1.5, np.nan]), 1: "x", "d": {"t": (1, 2)}}
""", kind="execute_result")
    assert bundle["application/json"] == {"a": 1, "b": [1.5, None], "1": "x", "d": {"t": [1, 2]}}
    assert strict_json(bundle["application/json"]) == bundle["application/json"]


def test_values_without_json_form_get_no_json(run):
    bundle = run.one("[object()]", kind="execute_result")
    assert "application/json" not in bundle
    assert bundle["text/plain"].startswith("[<object at")
    bundle = run.one("x = []\nx.append(x)\nx", kind="execute_result")
    assert "application/json" not in bundle
    for code in ("42", "'s'", "(1, 2)"):
        assert "application/json" not in run.one(code, kind="execute_result")


def test_repr_json_objects_still_work(run):
    bundle = run.one("""
class J:
    def _repr_json_(self):
        return {"k": 1}
J()
""", kind="execute_result")
    assert bundle["application/json"] == {"k": 1}


def test_to_json_safe_scalars():
    assert to_json_safe([np.float64(1.5), np.int32(2), np.bool_(True), float("inf"), -math.nan]) == [1.5, 2, True, None, None]
    assert to_json_safe(np.datetime64("2024-05-06T07:08:09")) == "2024-05-06T07:08:09"
    assert to_json_safe(np.datetime64("NaT")) is None
    assert to_json_safe(datetime.date(2024, 1, 2)) == "2024-01-02"
    assert to_json_safe({None: 1, True: 2, 1.5: 3, np.int64(4): 5, datetime.date(2020, 1, 1): 6}) == {
        "null": 1, "true": 2, "1.5": 3, "4": 5, "2020-01-01": 6}
    assert json_key((1, 2)) == "(1, 2)"
    with pytest.raises(NotJSONSafe):
        to_json_safe({"x": object()})
    assert to_json_safe({"x": b"raw"}, strict=False) == {"x": "b'raw'"}
