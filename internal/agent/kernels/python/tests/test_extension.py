"""Loading, reloading and unloading the extension; no noise in user output."""

import warnings

from cubby_display.formatters import ChartFormatter, DataFrameFormatter, SafeJSONFormatter


def test_load_is_idempotent_and_unload_restores(session):
    shell = session.shell
    formatters = shell.display_formatter.formatters
    before = dict(formatters)
    shell.extension_manager.reload_extension("cubby_display")  # unload + load
    import cubby_display

    cubby_display.load_ipython_extension(shell)  # again: no-op
    assert set(formatters) == set(before)
    assert isinstance(formatters["e2b/data"], DataFrameFormatter)
    assert isinstance(formatters["e2b/chart"], ChartFormatter)
    assert isinstance(formatters["application/json"], SafeJSONFormatter)
    assert shell.colors == "NoColor"

    cubby_display.unload_ipython_extension(shell)
    try:
        assert "e2b/data" not in formatters and "e2b/chart" not in formatters
        assert type(formatters["application/json"]) is not SafeJSONFormatter
        assert "application/json" not in session.run("[1]")[0][1]
    finally:
        cubby_display.load_ipython_extension(shell)
    assert session.run("[1]")[0][1]["application/json"] == [1]


def test_formatters_print_no_warnings(run, capsys):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        bundle = run.one("import pandas as pd\npd.DataFrame([[1, 2]], columns=['a', 'a'])", kind="execute_result")
    assert list(bundle["e2b/data"]) == ["a"]
    captured = capsys.readouterr()
    assert "Warning" not in captured.err
