"""run_code basics with the official e2b-code-interpreter SDK (docs/wire/code-interpreter.md §4.1, §4.2): state across calls, execution counts, streaming callbacks in
order, main vs display results, result formats and errors."""

from datetime import datetime

from helpers import HOME, assert_no_error, run_ok, uniq


def test_state_and_execution_counts(sandbox):
    first = run_ok(sandbox, "x = 1")
    assert first.results == []
    assert first.text is None
    assert first.execution_count == 1, "first user cell in a fresh sandbox"

    second = run_ok(sandbox, "x += 1; x")
    assert second.text == "2"
    assert len(second.results) == 1 and second.results[0].is_main_result
    assert second.execution_count == 2, "internal (env, cwd) runs must not count"

    third = run_ok(sandbox, "x * 10")
    assert third.text == "20"
    assert third.execution_count == 3


def test_callbacks_stream_in_order_before_the_cell_ends(sandbox):
    flag = f"/tmp/{uniq('go')}"
    # The cell waits (up to 60 s) for a file the test writes only once the
    # first stdout line has reached the client: a server that buffered the
    # stream until the end would make the cell print "not streamed".
    code = f"""
import os, sys, time
from IPython.display import display
print("out1", flush=True)
deadline = time.time() + 60
while not os.path.exists({flag!r}) and time.time() < deadline:
    time.sleep(0.05)
print("streamed" if os.path.exists({flag!r}) else "not streamed", flush=True)
time.sleep(0.3)
print("err1", file=sys.stderr, flush=True)
time.sleep(0.3)
display("shown")
time.sleep(0.3)
print("out2", flush=True)
time.sleep(0.3)
raise ValueError("last")
"""
    events = []
    timestamps = []

    def on_stdout(m):
        events.append(("stdout", m.line))
        assert m.error is False
        timestamps.append(m.timestamp)
        if m.line == "out1\n":
            sandbox.files.write(flag, "go")

    def on_stderr(m):
        events.append(("stderr", m.line))
        assert m.error is True
        timestamps.append(m.timestamp)

    execution = sandbox.run_code(
        code,
        on_stdout=on_stdout,
        on_stderr=on_stderr,
        on_result=lambda r: events.append(("result", r.text, r.is_main_result)),
        on_error=lambda e: events.append(("error", e.name, e.value)),
    )
    assert events == [
        ("stdout", "out1\n"),
        ("stdout", "streamed\n"),
        ("stderr", "err1\n"),
        ("result", "shown", False),
        ("stdout", "out2\n"),
        ("error", "ValueError", "last"),
    ]
    # Python reads the server's timestamp (ISO 8601 from the kernel message).
    for ts in timestamps:
        assert isinstance(ts, str) and ts, f"timestamp {ts!r}"
        datetime.fromisoformat(ts.replace("Z", "+00:00"))
    assert execution.logs.stdout == ["out1\n", "streamed\n", "out2\n"]
    assert execution.logs.stderr == ["err1\n"]
    assert execution.error.name == "ValueError"


def test_display_results_are_not_the_main_result(sandbox):
    ex = run_ok(sandbox, 'from IPython.display import display\ndisplay(1)\ndisplay("two")\n3')
    assert [(r.text, r.is_main_result) for r in ex.results] == [("1", False), ("two", False), ("3", True)]
    assert ex.text == "3"
    quiet = run_ok(sandbox, "display(4)\n5;")
    assert [(r.text, r.is_main_result) for r in quiet.results] == [("4", False)]
    assert quiet.text is None


def test_text_loses_one_pair_of_surrounding_quotes(sandbox):
    assert run_ok(sandbox, "import os\nos.getcwd()").text == HOME
    assert run_ok(sandbox, '"double"').text == "double"
    assert run_ok(sandbox, "'it\\'s'").text == "it's"
    assert run_ok(sandbox, '[1, "a"]').text == "[1, 'a']"
    assert run_ok(sandbox, "42").text == "42"


def test_rich_formats(sandbox):
    html = run_ok(sandbox, 'from IPython.display import HTML\nHTML("<b>x</b>")').results[0]
    assert html.html == "<b>x</b>"
    assert "html" in html.formats()

    md = run_ok(sandbox, 'from IPython.display import Markdown\nMarkdown("# Title")').results[0]
    assert md.markdown == "# Title"

    svg_src = '<svg xmlns="http://www.w3.org/2000/svg" width="4" height="4"></svg>'
    svg = run_ok(sandbox, f"from IPython.display import SVG\nSVG({svg_src!r})").results[0]
    assert svg.svg.startswith("<svg") and 'width="4"' in svg.svg

    latex = run_ok(
        sandbox, "from IPython.display import display\ndisplay({'text/latex': r'$\\frac{1}{2}$'}, raw=True)"
    )
    assert len(latex.results) == 1
    lr = latex.results[0]
    assert lr.latex == "$\\frac{1}{2}$"
    assert list(lr.formats()) == ["latex"], "no text and an empty extra"
    assert lr.text is None
    assert lr.extra == {}
    assert lr.is_main_result is False

    js = run_ok(sandbox, 'from IPython.display import Javascript\nJavascript("var a = 1;")').results[0]
    assert js.javascript == "var a = 1;"

    obj = run_ok(sandbox, 'from IPython.display import JSON\nJSON({"a": 1, "b": [1, 2], "c": {"d": None}})')
    assert obj.results[0].json == {"a": 1, "b": [1, 2], "c": {"d": None}}, "json is an object"

    d = run_ok(sandbox, 'import numpy as np\n{"k": [1, 2], "n": np.int64(5)}').results[0]
    assert d.json == {"k": [1, 2], "n": 5}, "dicts get numpy-safe JSON"
    assert d.text == "{'k': [1, 2], 'n': 5}"

    custom = run_ok(sandbox, "display({'application/x-cubby': 'v', 'text/plain': 'p'}, raw=True)").results[0]
    assert custom.text == "p"
    assert custom.extra == {"application/x-cubby": "v"}, "unknown MIME types go under extra"
    assert list(custom.formats()) == ["text", "application/x-cubby"]


def test_errors_carry_name_value_and_traceback(sandbox):
    run_ok(sandbox, "kept = 41")
    errors = []
    ex = sandbox.run_code("undefined_name_q", on_error=errors.append)
    assert ex.error.name == "NameError"
    assert ex.error.value == "name 'undefined_name_q' is not defined"
    assert isinstance(ex.error.traceback, str)
    assert "NameError" in ex.error.traceback and "undefined_name_q" in ex.error.traceback
    assert "\x1b[" not in ex.error.traceback, "colours are disabled"
    assert ex.results == []
    assert [e.name for e in errors] == ["NameError"]

    syntax = sandbox.run_code("def f(:\n  pass")
    assert syntax.error.name == "SyntaxError"
    assert syntax.error.value

    partial = sandbox.run_code('print("before")\nraise KeyError("k")\nprint("after")')
    assert partial.logs.stdout == ["before\n"]
    assert (partial.error.name, partial.error.value) == ("KeyError", "'k'")

    exit_ = sandbox.run_code("import sys\nsys.exit(3)")
    assert exit_.error is not None and exit_.error.name == "SystemExit"

    after = run_ok(sandbox, "kept + 1")
    assert after.text == "42", "errors do not lose state"
    assert_no_error(after)


def test_large_stdout_arrives_complete(sandbox):
    ex = run_ok(sandbox, 'for i in range(20000):\n    print(f"line {i:05d}")')
    lines = "".join(ex.logs.stdout).split("\n")[:-1]
    assert len(lines) == 20000
    assert lines[0] == "line 00000" and lines[-1] == "line 19999"
