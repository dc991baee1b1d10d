"""e2b/data for pandas DataFrames (docs/wire/code-interpreter.md)."""

from conftest import strict_json


def test_dataframe_last_expression(run):
    bundle = run.one('import pandas as pd\npd.DataFrame({"a": [1, 2, 3]})', kind="execute_result")
    assert bundle["e2b/data"] == {"a": [1, 2, 3]}
    assert "<table" in bundle["text/html"]
    assert "a" in bundle["text/plain"]
    assert "application/json" not in bundle


def test_dataframe_values_are_json_safe(run):
    bundle = run.one("""
import numpy as np, pandas as pd
df = pd.DataFrame({
    "when": pd.to_datetime(["2024-01-02 03:04:05", None]),
    "x": [1.5, np.nan],
    "obj": [np.int64(7), "s"],
    "flag": [True, False],
    "cat": pd.Categorical(["u", "v"]),
})
df[5] = [np.float32(0.5), np.inf]
display(df)
""")
    data = bundle["e2b/data"]
    assert strict_json(data) == data
    assert data == {
        "when": ["2024-01-02T03:04:05", None],
        "x": [1.5, None],
        "obj": [7, "s"],
        "flag": [True, False],
        "cat": ["u", "v"],
        "5": [0.5, None],
    }


def test_only_dataframes_get_data(run):
    bundle = run.one("import pandas as pd\npd.Series([1, 2])", kind="execute_result")
    assert "e2b/data" not in bundle
    bundle = run.one("'text'", kind="execute_result")
    assert set(bundle) == {"text/plain"}
