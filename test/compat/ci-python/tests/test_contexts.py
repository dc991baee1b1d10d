"""Code contexts with the official e2b-code-interpreter SDK (docs/wire/code-interpreter.md §4.1):
create with cwd and language, list (defaults once each), restart, remove, and
NotFound for unknown contexts."""

import pytest
from e2b import InvalidArgumentException, NotFoundException
from e2b_code_interpreter import Context

from helpers import HOME, run_ok


def test_created_context_has_own_cwd_language_and_state(sandbox):
    ctx = sandbox.create_code_context(cwd="/tmp", language="python")
    assert isinstance(ctx.id, str) and ctx.id
    assert (ctx.language, ctx.cwd) == ("python", "/tmp")
    assert run_ok(sandbox, "import os\nos.getcwd()", context=ctx).text == "/tmp"

    run_ok(sandbox, "only_here = 5", context=ctx)
    assert run_ok(sandbox, "only_here", context=ctx).text == "5"
    other = sandbox.run_code("only_here")
    assert other.error is not None and other.error.name == "NameError", "the default context does not see it"
    assert run_ok(sandbox, "import os\nos.getcwd()").text == HOME, "default cwd"

    plain = sandbox.create_code_context()
    assert (plain.language, plain.cwd) == ("python", HOME), "defaults"

    js = sandbox.create_code_context(cwd="/tmp", language="javascript")
    assert js.language == "javascript"
    assert run_ok(sandbox, "process.cwd()", context=js).text == "/tmp"

    sh = sandbox.create_code_context(cwd="/tmp", language="bash")
    assert sh.language == "bash"
    assert run_ok(sandbox, "pwd", context=sh).logs.stdout == ["/tmp\n"]

    with pytest.raises(InvalidArgumentException):
        sandbox.run_code("1", context=ctx, language="python")


def test_list_shows_each_default_once_plus_created(sandbox):
    # Use the defaults so that lazily created or aliased contexts would show.
    run_ok(sandbox, "1")
    run_ok(sandbox, "1", language="python")
    run_ok(sandbox, "1", language="javascript")
    before = sandbox.list_code_contexts()
    ids = [c.id for c in before]
    assert len(set(ids)) == len(ids), f"duplicate ids in {before}"
    langs = [c.language for c in before]
    assert langs.count("python") == 1, f"one python default: {before}"
    assert langs.count("javascript") == 1, f"one javascript default: {before}"
    assert all(c.cwd == HOME for c in before)

    a = sandbox.create_code_context(cwd="/tmp")
    b = sandbox.create_code_context(language="javascript")
    after = {c.id: c for c in sandbox.list_code_contexts()}
    assert set(after) == set(ids) | {a.id, b.id}
    assert (after[a.id].language, after[a.id].cwd) == ("python", "/tmp")
    assert (after[b.id].language, after[b.id].cwd) == ("javascript", HOME)


def test_restart_loses_state_and_keeps_working(sandbox):
    ctx = sandbox.create_code_context(cwd="/tmp")
    run_ok(sandbox, "x = 1", context=ctx)
    sandbox.restart_code_context(ctx)
    lost = sandbox.run_code("x", context=ctx)
    assert lost.error is not None and lost.error.name == "NameError", "state is gone after a restart"
    assert run_ok(sandbox, "import os\nos.getcwd()", context=ctx).text == "/tmp", "cwd survives"
    run_ok(sandbox, "y = 2", context=ctx)
    assert run_ok(sandbox, "y + 1", context=ctx).text == "3"

    # Restart by id, of the default python context (found through the list).
    run_ok(sandbox, "z = 1")
    default = next(c for c in sandbox.list_code_contexts() if c.language == "python" and c.id != ctx.id)
    sandbox.restart_code_context(default.id)
    assert sandbox.run_code("z").error.name == "NameError"
    assert ctx.id in [c.id for c in sandbox.list_code_contexts()], "a restarted context stays listed"


def test_remove_and_unknown_contexts_are_not_found(sandbox):
    ctx = sandbox.create_code_context()
    run_ok(sandbox, "1", context=ctx)
    sandbox.remove_code_context(ctx)
    assert ctx.id not in [c.id for c in sandbox.list_code_contexts()]
    with pytest.raises(NotFoundException):
        sandbox.run_code("1", context=ctx)

    ghost = Context(context_id="no-such-context", language="python", cwd=HOME)
    with pytest.raises(NotFoundException, match="no-such-context"):
        sandbox.run_code("1", context=ghost)
    with pytest.raises(NotFoundException):
        sandbox.restart_code_context(ghost)
    with pytest.raises(NotFoundException):
        sandbox.remove_code_context("no-such-context")
    with pytest.raises(NotFoundException):
        sandbox.remove_code_context(ctx.id)  # twice

    assert run_ok(sandbox, "2 * 21").text == "42", "the default context is unaffected"
