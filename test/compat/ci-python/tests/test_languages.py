"""Every language of the code-interpreter template with the official
e2b-code-interpreter SDK (docs/wire/code-interpreter.md §4.1): python, javascript, typescript, r and
bash, each keeping state between calls in its default context."""

import pytest
from e2b import SandboxException

from helpers import HOME, run_ok


def test_python(sandbox):
    run_ok(sandbox, "counter = 1", language="python")
    ex = run_ok(sandbox, 'counter += 1\nprint("py", counter)\ncounter', language="Python ")
    assert ex.text == "2"
    assert ex.logs.stdout == ["py 2\n"]


def test_javascript(sandbox):
    run_ok(sandbox, "var counter = 1", language="javascript")
    ex = run_ok(sandbox, 'counter += 1\nconsole.log("js", counter)\ncounter', language="js")
    assert ex.text == "2"
    assert ex.logs.stdout == ["js 2\n"]
    assert run_ok(sandbox, "process.cwd()", language="javascript").text == HOME
    err = sandbox.run_code('throw new Error("boom")', language="javascript")
    assert err.error is not None, "a thrown error is an execution error"
    assert "boom" in f"{err.error.name}: {err.error.value}"
    assert run_ok(sandbox, "counter", language="javascript").text == "2", "state survives an error"


def test_typescript(sandbox):
    run_ok(
        sandbox,
        "const base: number = 40\nfunction add(a: number, b: number): number { return a + b }",
        language="typescript",
    )
    assert run_ok(sandbox, "add(base, 2)", language="ts").text == "42"
    iface = run_ok(sandbox, "interface P { n: number }\nconst p: P = { n: 7 }\np.n * 2", language="typescript")
    assert iface.text == "14"


def test_r(sandbox):
    run_ok(sandbox, "counter <- 1", language="r")
    ex = run_ok(sandbox, "counter <- counter + 1\ncounter", language="R")
    # IRkernel shows values with display_data, so there is no main result.
    assert [r.text for r in ex.results] == ["[1] 2"]
    out = run_ok(sandbox, 'cat("r says", counter, "\\n")', language="r")
    assert out.logs.stdout == ["r says 2 \n"]
    err = sandbox.run_code('stop("bad thing")', language="r")
    assert err.error is not None, "stop() is an execution error"
    assert "bad thing" in f"{err.error.name} {err.error.value}"


def test_bash(sandbox):
    run_ok(sandbox, "export COUNTER=1\ncd /tmp", language="bash")
    ex = run_ok(sandbox, 'COUNTER=$((COUNTER + 1))\necho "bash $COUNTER"\npwd', language="bash")
    assert "".join(ex.logs.stdout) == "bash 2\n/tmp\n"
    assert "".join(run_ok(sandbox, "echo oops >&2", language="bash").logs.stderr) == "oops\n"
    failed = sandbox.run_code("false", language="bash")
    assert failed.error is not None, "a non-zero exit status is an execution error"
    assert "1" in failed.error.value
    assert "".join(run_ok(sandbox, "echo $COUNTER", language="bash").logs.stdout) == "2\n"


def test_unknown_language_is_an_error(sandbox):
    # E2B answers a non-200 (500); the SDK raises SandboxException("<status>[ <reason>]: <text>").
    with pytest.raises(SandboxException, match=r"^[45]\d\d( [A-Za-z ]+)?: .*cobol-nope"):
        sandbox.run_code("1", language="cobol-nope")
    assert run_ok(sandbox, "1 + 1").text == "2"
