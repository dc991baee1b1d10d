"""Ending executions abnormally with the official e2b-code-interpreter SDK
(docs/wire/code-interpreter.md §4.2, §4.5): client timeout
interrupts the kernel, kernel death, a context restarted or removed mid-run,
input(), and a sandbox killed mid-run."""

import threading

import pytest
from e2b import TimeoutException
from e2b_code_interpreter import Sandbox

from helpers import run_ok

LONG = 'import time\nprint("started", flush=True)\ntime.sleep(300)'
KILLED = "The sandbox was killed while the request was in progress"


class Background:
    """Runs sbx.run_code(code, **kwargs) in a thread; `started` is set at the
    first stdout line (or when the call ends)."""

    def __init__(self, sbx, code, **kwargs):
        self.started = threading.Event()
        self.execution = None
        self.error = None

        def on_stdout(_):
            self.started.set()

        def target():
            try:
                self.execution = sbx.run_code(code, on_stdout=on_stdout, **kwargs)
            except Exception as e:  # noqa: BLE001 - inspected by the test
                self.error = e
            finally:
                self.started.set()

        self.thread = threading.Thread(target=target, daemon=True)
        self.thread.start()

    def wait_started(self):
        assert self.started.wait(120), "the cell did not start"

    def join(self):
        self.thread.join(150)
        assert not self.thread.is_alive(), "run_code did not return"


def test_timeout_interrupts_and_keeps_state(sandbox):
    run_ok(sandbox, "kept = 7")
    with pytest.raises(TimeoutException, match="timed out"):
        sandbox.run_code("import time\ntime.sleep(300)", timeout=3)
    # Were the sleeping cell not interrupted, this one would queue behind it
    # for 300 s and hit its own timeout (docs/wire/code-interpreter.md §4.5: within 5 s + 10 s).
    nxt = run_ok(sandbox, "kept + 1", timeout=15)
    assert nxt.text == "8", "an interrupt keeps the state"


def test_kernel_death_is_an_error_and_the_context_recovers(sandbox):
    run_ok(sandbox, "doomed = 1")
    died = sandbox.run_code("import os\nos._exit(1)", timeout=60)
    assert died.error is not None, "kernel death is reported as an error"
    assert died.error.name and died.error.value
    assert run_ok(sandbox, "1 + 1", timeout=60).text == "2"
    assert sandbox.run_code("doomed").error.name == "NameError", "a new kernel has no state"
    ctx = sandbox.create_code_context(cwd="/tmp")
    assert sandbox.run_code("import os\nos._exit(3)", context=ctx, timeout=60).error is not None
    assert run_ok(sandbox, "import os\nos.getcwd()", context=ctx, timeout=60).text == "/tmp"


def test_kernel_killed_by_the_oom_killer_is_named(sandbox):
    run_ok(sandbox, "kept = 1")
    died = sandbox.run_code("x = bytearray(3 << 30)\nlen(x)", timeout=120)
    assert died.error is not None, "an out-of-memory kernel death is reported as an error"
    assert died.error.name == "OutOfMemoryError", died.error
    assert "out-of-memory" in died.error.value
    assert run_ok(sandbox, "1 + 1", timeout=60).text == "2", "the context works again"


def test_restart_or_remove_mid_run_ends_the_execution_with_an_error(sandbox):
    ctx = sandbox.create_code_context()
    run = Background(sandbox, LONG, context=ctx)
    run.wait_started()
    sandbox.restart_code_context(ctx)
    run.join()
    assert run.error is None, f"the stream ends normally: {run.error!r}"
    assert run.execution.error is not None, "restart mid-run is an execution error"
    assert run_ok(sandbox, "3 * 3", context=ctx).text == "9"

    run = Background(sandbox, LONG, context=ctx)
    run.wait_started()
    sandbox.remove_code_context(ctx)
    run.join()
    assert run.error is None, f"the stream ends normally: {run.error!r}"
    assert run.execution.error is not None, "removal mid-run is an execution error"
    assert run_ok(sandbox, "2 + 2").text == "4", "other contexts keep working"


def test_input_is_an_error_not_a_hang(sandbox):
    ex = sandbox.run_code('input("name? ")', timeout=30)
    assert ex.error is not None
    assert run_ok(sandbox, "5").text == "5"


def test_killed_sandbox_mid_run_is_the_sdk_killed_error(sandbox):
    run = Background(sandbox, LONG, timeout=120)
    run.wait_started()
    Sandbox.kill(sandbox.sandbox_id)
    run.join()
    assert isinstance(run.error, TimeoutException), f"{type(run.error).__name__}: {run.error}"
    assert KILLED in str(run.error)
