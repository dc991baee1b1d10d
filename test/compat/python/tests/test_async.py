"""The async SDK (AsyncSandbox) end to end: create, info, list, connect,
commands with callbacks and stdin, files, timeouts."""

import asyncio

import pytest
from e2b import (
    AsyncSandbox,
    CommandExitException,
    FileNotFoundException,
    SandboxQuery,
    TimeoutException,
)

from helpers import HOME, SUITE_KEY, uniq


async def test_async_create_info_list_connect(async_sandbox_factory):
    tag = uniq("tag")
    sbx = await async_sandbox_factory(metadata={"tag": tag, "k y": "v&1"}, envs={"CUBBY_E": "e"}, timeout=120)
    info = await sbx.get_info()
    assert info.sandbox_id == sbx.sandbox_id
    assert info.metadata == {SUITE_KEY: "py-async", "tag": tag, "k y": "v&1"}

    page = await AsyncSandbox.list(query=SandboxQuery(metadata={"tag": tag, "k y": "v&1"})).next_items()
    assert [s.sandbox_id for s in page] == [sbx.sandbox_id]

    same = await AsyncSandbox.connect(sbx.sandbox_id)
    r = await same.commands.run('echo "$CUBBY_E"')
    assert r.stdout == "e\n"
    assert await same.is_running()


async def test_async_commands(async_sandbox):
    sbx = async_sandbox
    out = []
    r = await sbx.commands.run("for i in 1 2 3; do echo l$i; done", on_stdout=out.append)
    assert r.stdout == "l1\nl2\nl3\n"
    assert "".join(out) == "l1\nl2\nl3\n"

    with pytest.raises(CommandExitException) as ei:
        await sbx.commands.run("echo bad >&2; exit 5")
    assert ei.value.exit_code == 5
    assert ei.value.stderr == "bad\n"

    h = await sbx.commands.run("cat", background=True, stdin=True)
    await sbx.commands.send_stdin(h.pid, "via async\n")
    await sbx.commands.close_stdin(h.pid)
    res = await h.wait()
    assert res.exit_code == 0
    assert res.stdout == "via async\n"

    with pytest.raises(TimeoutException):
        await sbx.commands.run("sleep 30", timeout=1.5)


async def test_async_connect_after_disconnect(async_sandbox):
    sbx = async_sandbox
    flag = f"/tmp/{uniq('flag')}"
    h = await sbx.commands.run(
        f"while [ ! -e {flag} ]; do sleep 0.05; done; echo reattached", background=True
    )
    await h.disconnect()
    got = []
    c = await sbx.commands.connect(h.pid, on_stdout=got.append)
    assert c.pid == h.pid
    await sbx.files.write(flag, "")
    r = await c.wait()
    assert r.stdout == "reattached\n"
    assert "".join(got) == "reattached\n"


async def test_async_files(async_sandbox):
    sbx = async_sandbox
    info = await sbx.files.write("async/a.txt", "async text")
    assert info.path == f"{HOME}/async/a.txt"
    assert await sbx.files.read("async/a.txt") == "async text"
    data = bytes(range(256)) * 100
    await sbx.files.write("async/b.bin", data)
    assert bytes(await sbx.files.read("async/b.bin", format="bytes")) == data
    entries = await sbx.files.list("async")
    assert [e.name for e in entries] == ["a.txt", "b.bin"]
    assert await sbx.files.make_dir("async/d") is True
    assert await sbx.files.make_dir("async/d") is False
    await sbx.files.remove("async")
    assert await sbx.files.exists("async") is False
    with pytest.raises(FileNotFoundException):
        await sbx.files.read("async/a.txt")


async def test_async_concurrent_commands(async_sandbox):
    sbx = async_sandbox
    results = await asyncio.gather(*(sbx.commands.run(f"echo {i}") for i in range(8)))
    assert [r.stdout for r in results] == [f"{i}\n" for i in range(8)]


async def test_async_set_timeout_and_kill(async_sandbox):
    sbx = async_sandbox
    await sbx.set_timeout(60)
    info = await sbx.get_info()
    assert info.end_at > info.started_at
    assert await sbx.kill() is True
    assert await sbx.is_running() is False
    assert await AsyncSandbox.kill(sbx.sandbox_id) is False
