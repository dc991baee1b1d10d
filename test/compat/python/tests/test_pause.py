"""Pause and resume with the sync SDK (docs/wire/e2b-api.md §2.3).

``Sandbox.pause`` posts ``/sandboxes/{id}/pause`` (409 -> ``False``);
``Sandbox.connect`` resumes a paused sandbox; the sandbox side answers 502
while paused, which ``is_running`` reports as ``False``.
"""

import httpx
import pytest
from e2b import Sandbox, SandboxNotFoundException, SandboxState

from helpers import HOME, sandbox_url, uniq


def health_status(sandbox_id: str) -> int:
    """GET /health of the sandbox's envd through the sandbox URL."""
    r = httpx.get(
        sandbox_url() + "/health",
        headers={"E2b-Sandbox-Id": sandbox_id, "E2b-Sandbox-Port": "49983"},
        timeout=10,
    )
    return r.status_code


def test_pause_keeps_files_and_processes_connect_resumes(sandbox_factory):
    sbx = sandbox_factory(timeout=120)
    marker = uniq("kept")
    sbx.files.write(f"{HOME}/kept.txt", marker)
    bg = sbx.commands.run("sleep 600", background=True)
    bg.disconnect()

    assert sbx.pause() is True
    assert sbx.pause() is False, "pausing a paused sandbox is a 409 -> False"
    assert Sandbox.pause(sbx.sandbox_id) is False
    assert sbx.get_info().state == SandboxState.PAUSED
    assert sbx.is_running() is False
    assert health_status(sbx.sandbox_id) == 502

    resumed = Sandbox.connect(sbx.sandbox_id, timeout=120)
    assert resumed.sandbox_id == sbx.sandbox_id
    assert resumed.get_info().state == SandboxState.RUNNING
    assert resumed.is_running() is True
    assert resumed.files.read(f"{HOME}/kept.txt") == marker
    procs = {p.pid: p for p in resumed.commands.list()}
    assert bg.pid in procs, f"background process {bg.pid} gone after resume: {procs}"
    assert "sleep 600" in " ".join([procs[bg.pid].cmd, *procs[bg.pid].args])
    assert resumed.commands.run(f"kill -0 {bg.pid} && echo alive").stdout == "alive\n"


def test_pause_without_memory_keeps_files(sandbox_factory):
    sbx = sandbox_factory(timeout=120)
    marker = uniq("disk")
    sbx.files.write(f"{HOME}/disk.txt", marker)
    assert sbx.pause(keep_memory=False) is True
    assert sbx.get_info().state == SandboxState.PAUSED
    assert sbx.is_running() is False
    sbx.connect(timeout=120)
    assert sbx.get_info().state == SandboxState.RUNNING
    assert sbx.files.read(f"{HOME}/disk.txt") == marker
    assert sbx.commands.run("echo back").stdout == "back\n"


def test_pause_and_connect_killed_sandbox_not_found(sandbox_factory):
    sbx = sandbox_factory()
    assert sbx.pause() is True
    assert sbx.kill() is True, "kill of a paused sandbox"
    with pytest.raises(SandboxNotFoundException):
        Sandbox.connect(sbx.sandbox_id)
    with pytest.raises(SandboxNotFoundException):
        sbx.pause()
