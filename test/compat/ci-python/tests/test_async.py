"""The AsyncSandbox of the official e2b-code-interpreter SDK (its own code
path: async httpx stream, awaitable callbacks) on the essentials: state, an
ordered stream with async callbacks, charts, errors, contexts and timeouts."""

import pytest
from e2b import NotFoundException, TimeoutException
from e2b_code_interpreter.charts import BarChart

from helpers import arun_ok, assert_png


async def test_state_callbacks_and_errors(async_sandbox):
    await arun_ok(async_sandbox, "x = 1")
    ex = await arun_ok(async_sandbox, "x += 1; x")
    assert ex.text == "2" and ex.execution_count == 2

    events = []

    async def on_stdout(m):
        events.append(("stdout", m.line))

    async def on_stderr(m):
        events.append(("stderr", m.line))

    async def on_result(r):
        events.append(("result", r.text))

    async def on_error(e):
        events.append(("error", e.name))

    code = (
        "import sys, time\nprint('a', flush=True)\ntime.sleep(0.3)\n"
        "print('b', file=sys.stderr, flush=True)\ntime.sleep(0.3)\ndisplay(5)\ntime.sleep(0.3)\nmissing_q"
    )
    ex = await async_sandbox.run_code(
        code, on_stdout=on_stdout, on_stderr=on_stderr, on_result=on_result, on_error=on_error
    )
    assert events == [("stdout", "a\n"), ("stderr", "b\n"), ("result", "5"), ("error", "NameError")]
    assert ex.error.value == "name 'missing_q' is not defined"


async def test_chart_and_contexts(async_sandbox):
    ex = await arun_ok(
        async_sandbox,
        'import matplotlib.pyplot as plt\nplt.bar(["a", "b"], [1, 2], label="g")\nplt.title("T")\nplt.show()',
    )
    (r,) = ex.results
    assert_png(r.png, "bar")
    assert isinstance(r.chart, BarChart)
    assert [(e.label, e.group, e.value) for e in r.chart.elements] == [("a", "g", 1), ("b", "g", 2)]
    assert r.chart.title == "T"

    ctx = await async_sandbox.create_code_context(cwd="/tmp", language="python")
    assert (await arun_ok(async_sandbox, "import os\nos.getcwd()", context=ctx)).text == "/tmp"
    assert ctx.id in [c.id for c in await async_sandbox.list_code_contexts()]
    await async_sandbox.restart_code_context(ctx)
    await async_sandbox.remove_code_context(ctx)
    with pytest.raises(NotFoundException):
        await async_sandbox.run_code("1", context=ctx)


async def test_timeout_then_next_cell(async_sandbox):
    with pytest.raises(TimeoutException, match="timed out"):
        await async_sandbox.run_code("import time\ntime.sleep(300)", timeout=3)
    assert (await arun_ok(async_sandbox, "1 + 1", timeout=15)).text == "2"
