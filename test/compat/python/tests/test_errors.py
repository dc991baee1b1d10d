"""Error paths with the sync and async SDK (docs/wire/e2b-api.md §2.1, docs/wire/envd.md §3.4, §3.5)."""

import os
import re
import threading

import pytest
from e2b import (
    AsyncSandbox,
    AuthenticationException,
    FileNotFoundException,
    NotFoundException,
    Sandbox,
    SandboxException,
    SandboxNotFoundException,
    SandboxQuery,
    TimeoutException,
)

from helpers import SUITE_KEY, TEMPLATE, uniq

WRONG_KEY = "e2b_" + "0123456789abcdef" * 2 + "01234567"
KILLED = "The sandbox was killed or reached its end of life while the request was in flight"
# Over plaintext HTTP/1.1 the Python SDK (pyqwest) reports a connection cut
# mid-body as RemoteProtocolError, which e2b 2.45.1 does not treat as a
# transport failure, so it maps it to UNAVAILABLE ("likely due to sandbox
# timeout") instead of probing /health. Both are its "sandbox is gone"
# TimeoutException; JS (undici) gets the KILLED wording (js/errors.test.mjs).
GONE = re.compile(KILLED + "|This error is likely due to sandbox timeout")


def test_wrong_api_key_is_authentication_error(sandbox):
    assert WRONG_KEY != os.environ["E2B_API_KEY"]
    with pytest.raises(AuthenticationException):
        Sandbox.create(template=TEMPLATE, api_key=WRONG_KEY, metadata={SUITE_KEY: "py"})
    with pytest.raises(AuthenticationException):
        Sandbox.list(api_key=WRONG_KEY).next_items()
    with pytest.raises(AuthenticationException):
        Sandbox.get_info(sandbox.sandbox_id, api_key=WRONG_KEY)
    with pytest.raises(AuthenticationException):
        Sandbox.kill(sandbox.sandbox_id, api_key=WRONG_KEY)
    with pytest.raises(AuthenticationException):
        Sandbox.connect(sandbox.sandbox_id, api_key=WRONG_KEY)
    assert sandbox.is_running()


def test_unknown_template_is_an_error():
    tag = uniq("tag")
    with pytest.raises(SandboxException):
        Sandbox.create(template=f"no-such-template-{uniq('t')}", metadata={SUITE_KEY: "py", "tag": tag})
    assert Sandbox.list(query=SandboxQuery(metadata={"tag": tag})).next_items() == []


def test_not_found_file_errors(sandbox):
    with pytest.raises(FileNotFoundException):
        sandbox.files.read("nope.txt")
    with pytest.raises(NotFoundException):
        sandbox.files.get_info("nope.txt")


def test_sync_killed_mid_stream_is_timeout(sandbox):
    h = sandbox.commands.run("sleep 120", background=True, timeout=0)
    outcome = {}

    def waiter():
        try:
            h.wait()
        except Exception as exc:  # noqa: BLE001 - asserted below
            outcome["e"] = exc

    t = threading.Thread(target=waiter, daemon=True)
    t.start()
    assert Sandbox.kill(sandbox.sandbox_id) is True
    t.join(timeout=30)
    assert not t.is_alive(), "wait() still blocked 30 s after the kill"
    err = outcome.get("e")
    assert isinstance(err, TimeoutException), repr(err)
    assert GONE.search(str(err)), str(err)


async def test_async_killed_mid_stream_is_timeout(async_sandbox):
    sbx = async_sandbox
    h = await sbx.commands.run("sleep 120", background=True, timeout=0)
    assert await AsyncSandbox.kill(sbx.sandbox_id) is True
    with pytest.raises(TimeoutException, match=GONE):
        await h.wait()


def test_operations_on_killed_sandbox_fail_clearly(sandbox):
    sandbox.files.write("f.txt", "x")
    assert sandbox.kill() is True
    assert sandbox.is_running() is False
    with pytest.raises(TimeoutException):
        sandbox.files.read("f.txt")
    with pytest.raises(TimeoutException):
        sandbox.files.exists("f.txt")
    with pytest.raises(SandboxException):
        sandbox.commands.run("echo hi")
    with pytest.raises(SandboxNotFoundException):
        sandbox.get_info()
    with pytest.raises(SandboxNotFoundException):
        Sandbox.connect(sandbox.sandbox_id)
    with pytest.raises(SandboxNotFoundException):
        sandbox.set_timeout(60)
