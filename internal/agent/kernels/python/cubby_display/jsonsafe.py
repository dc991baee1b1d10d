"""Conversion of Python, numpy and pandas values to plain JSON values.

Jupyter serialises display data with the standard ``json`` module, which
rejects numpy scalars and writes NaN/Infinity (not JSON). Everything the
Cubby formatters emit goes through :func:`to_json_safe` first.
"""

import datetime
import decimal
import enum
import math
import pathlib
import sys
import uuid

#: Deepest container nesting accepted (guards against self-referencing lists).
MAX_DEPTH = 200


class NotJSONSafe(TypeError):
    """Raised for a value that has no JSON form (strict mode) or nests too deep."""


def to_json_safe(obj, strict=True, _depth=0):
    """Return obj as str/int/float/bool/None/list/dict, recursively.

    NaN, infinities, NaT and pandas.NA become None; datetimes become ISO 8601
    strings; numpy scalars and arrays become Python values and lists; dict keys
    become strings. Other objects raise NotJSONSafe when strict, else become
    str(obj).
    """
    if _depth > MAX_DEPTH:
        raise NotJSONSafe("value nests deeper than %d levels" % MAX_DEPTH)
    if obj is None or isinstance(obj, (bool, str)):
        return obj
    if isinstance(obj, int):
        return int(obj)
    if isinstance(obj, float):
        return float(obj) if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {json_key(k): to_json_safe(v, strict, _depth + 1) for k, v in obj.items()}
    if isinstance(obj, (list, tuple, set, frozenset)):
        return [to_json_safe(v, strict, _depth + 1) for v in obj]
    np = sys.modules.get("numpy")
    if np is not None and isinstance(obj, (np.ndarray, np.generic)):
        return _numpy_safe(np, obj, strict, _depth)
    return _scalar_safe(obj, strict, _depth)


def _numpy_safe(np, obj, strict, depth):
    if isinstance(obj, np.ndarray):
        return to_json_safe(obj.tolist(), strict, depth + 1)
    if isinstance(obj, np.datetime64):
        return None if np.isnat(obj) else str(np.datetime_as_string(obj))
    if isinstance(obj, np.timedelta64):
        return None if np.isnat(obj) else str(obj)
    return to_json_safe(obj.item(), strict, depth + 1)


def _scalar_safe(obj, strict, depth):
    if isinstance(obj, (datetime.datetime, datetime.date, datetime.time)):
        # pandas.NaT is a datetime subclass and the only one unequal to itself.
        return None if obj != obj else obj.isoformat()
    if isinstance(obj, datetime.timedelta):
        return None if obj != obj else str(obj)
    if isinstance(obj, decimal.Decimal):
        return to_json_safe(float(obj), strict, depth + 1)
    if isinstance(obj, (uuid.UUID, pathlib.PurePath)):
        return str(obj)
    if isinstance(obj, enum.Enum):
        return to_json_safe(obj.value, strict, depth + 1)
    if type(obj).__name__ in ("NAType", "NaTType"):
        return None
    if strict:
        raise NotJSONSafe("%s has no JSON form" % type(obj).__name__)
    return str(obj)


def json_key(key):
    """Return the JSON object key for a dict key (JSON keys are strings)."""
    if isinstance(key, str):
        return key
    if key is None:
        return "null"
    if isinstance(key, bool):
        return "true" if key else "false"
    np = sys.modules.get("numpy")
    if np is not None and isinstance(key, np.generic) and not isinstance(key, (np.datetime64, np.timedelta64)):
        return json_key(key.item())
    if isinstance(key, (datetime.datetime, datetime.date, datetime.time)) and key == key:
        return key.isoformat()
    return str(key)
