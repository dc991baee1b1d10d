"""IPython display formatters for the E2B MIME types (docs/wire/code-interpreter.md).

The type tests run at call time through ``sys.modules``: pandas and
matplotlib are never imported on the user's behalf, and IPython's inline
backend (which strips Figure printers registered with ``for_type`` from every
formatter when it activates) cannot remove them.
"""

import sys

from IPython.core.formatters import BaseFormatter, JSONFormatter
from traitlets import ObjectName, Unicode

from .jsonsafe import NotJSONSafe, to_json_safe

DATA_MIME = "e2b/data"
CHART_MIME = "e2b/chart"
JSON_MIME = "application/json"


class DataFrameFormatter(BaseFormatter):
    """``e2b/data``: a pandas DataFrame as {"<column>": [values...]}."""

    format_type = Unicode(DATA_MIME)
    print_method = ObjectName("_repr_e2b_data_")
    _return_type = (dict,)

    def __call__(self, obj):
        pd = sys.modules.get("pandas")
        if self.enabled and pd is not None and isinstance(obj, pd.DataFrame):
            try:
                from .data import dataframe_to_data

                return dataframe_to_data(obj)
            except Exception:
                return None
        return super().__call__(obj)


class ChartFormatter(BaseFormatter):
    """``e2b/chart``: a matplotlib Figure as chart JSON ({} when blank)."""

    format_type = Unicode(CHART_MIME)
    print_method = ObjectName("_repr_e2b_chart_")
    _return_type = (dict,)

    def __call__(self, obj):
        mf = sys.modules.get("matplotlib.figure")
        if self.enabled and mf is not None and isinstance(obj, mf.Figure):
            try:
                from .charts import figure_to_chart

                return to_json_safe(figure_to_chart(obj))
            except Exception:
                return {}
        return super().__call__(obj)


class SafeJSONFormatter(JSONFormatter):
    """``application/json`` that also formats lists and dicts, numpy-safe
    (metadata {"expanded": true}); values without a JSON form get no JSON."""

    def __call__(self, obj):
        if self.enabled and isinstance(obj, (list, dict)):
            try:
                return to_json_safe(obj), {"expanded": True}
            except (NotJSONSafe, RecursionError):
                return None
        return super().__call__(obj)


def install(shell):
    """Register the formatters on shell.display_formatter (idempotent);
    returns the application/json formatter that was replaced."""
    formatters = shell.display_formatter.formatters
    parent = shell.display_formatter
    old_json = formatters.get(JSON_MIME)
    if not isinstance(old_json, SafeJSONFormatter):
        new_json = SafeJSONFormatter(parent=parent)
        if old_json is not None:
            new_json.type_printers.update(old_json.type_printers)
            new_json.deferred_printers.update(old_json.deferred_printers)
        formatters[JSON_MIME] = new_json
    if not isinstance(formatters.get(DATA_MIME), DataFrameFormatter):
        formatters[DATA_MIME] = DataFrameFormatter(parent=parent)
    if not isinstance(formatters.get(CHART_MIME), ChartFormatter):
        formatters[CHART_MIME] = ChartFormatter(parent=parent)
    return old_json


def uninstall(shell, old_json):
    """Remove the formatters and put old_json back (None: a plain JSONFormatter)."""
    formatters = shell.display_formatter.formatters
    formatters.pop(DATA_MIME, None)
    formatters.pop(CHART_MIME, None)
    if isinstance(formatters.get(JSON_MIME), SafeJSONFormatter):
        formatters[JSON_MIME] = old_json if old_json is not None else JSONFormatter(parent=shell.display_formatter)
