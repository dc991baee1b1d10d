"""Environment variables with the official e2b-code-interpreter SDK (docs/wire/code-interpreter.md §4.5): the sandbox env from create is visible in every language, per-call
``envs`` override it for that call only, and afterwards the sandbox value is
back and per-call-only variables are gone."""

import pytest

from helpers import run_ok

SANDBOX_ENVS = {"CUBBY_SBX": "from-create"}
CALL_ENVS = {"CUBBY_SBX": "per-call", "CUBBY_CALL": "call only"}

# Per language: code printing "$CUBBY_SBX|$CUBBY_CALL" (empty when unset), and
# code showing $CUBBY_CALL to a child process (None: not checked).
PROBES = {
    "python": (
        'import os\nprint(os.environ.get("CUBBY_SBX", "") + "|" + os.environ.get("CUBBY_CALL", ""))',
        'import subprocess\nprint(subprocess.run(["sh", "-c", "echo \\"child $CUBBY_CALL\\""], '
        'capture_output=True, text=True).stdout, end="")',
    ),
    "javascript": (
        'console.log((process.env.CUBBY_SBX ?? "") + "|" + (process.env.CUBBY_CALL ?? ""))',
        None,
    ),
    "r": (
        'cat(Sys.getenv("CUBBY_SBX"), "|", Sys.getenv("CUBBY_CALL"), "\\n", sep = "")',
        'cat(system("echo \\"child $CUBBY_CALL\\"", intern = TRUE), "\\n", sep = "")',
    ),
    "bash": (
        'echo "${CUBBY_SBX:-}|${CUBBY_CALL:-}"',
        "sh -c 'echo \"child $CUBBY_CALL\"'",
    ),
}


def stdout_of(sbx, code, **kwargs) -> str:
    return "".join(run_ok(sbx, code, **kwargs).logs.stdout)


@pytest.mark.parametrize("language", list(PROBES))
def test_sandbox_env_override_and_restore(sandbox_factory, language):
    sbx = sandbox_factory(envs=SANDBOX_ENVS)
    show, child = PROBES[language]
    assert stdout_of(sbx, show, language=language) == "from-create|\n", "sandbox env from create"
    assert stdout_of(sbx, show, language=language, envs=CALL_ENVS) == "per-call|call only\n", "override"
    if child:
        assert stdout_of(sbx, child, language=language, envs=CALL_ENVS) == "child call only\n", "inherited"
    assert stdout_of(sbx, show, language=language) == "from-create|\n", "restored after the call"


def test_per_call_env_in_a_context_does_not_leak(sandbox_factory):
    sbx = sandbox_factory(envs=SANDBOX_ENVS)
    ctx = sbx.create_code_context()
    show = PROBES["python"][0]
    assert stdout_of(sbx, show, context=ctx, envs=CALL_ENVS) == "per-call|call only\n"
    assert stdout_of(sbx, show) == "from-create|\n"
    assert stdout_of(sbx, show, context=ctx) == "from-create|\n"
