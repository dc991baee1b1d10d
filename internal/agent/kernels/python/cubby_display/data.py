"""pandas DataFrame -> ``e2b/data`` (docs/wire/code-interpreter.md)."""

import warnings

from .jsonsafe import json_key, to_json_safe


def dataframe_to_data(df):
    """Return df column-oriented: {"<column>": [v0, v1, ...], ...}.

    This is ``df.to_dict(orient="list")`` made JSON-safe: Timestamps become
    ``isoformat()`` strings, numpy scalars plain numbers, NaN/NaT null, column
    names strings. Values with no JSON form become their str().
    """
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # e.g. duplicate column names: not the user's output
        columns = df.to_dict(orient="list")
    return {json_key(name): to_json_safe(values, strict=False) for name, values in columns.items()}
