"""Behaviours of E2B's envd and API that a drop-in server must match exactly,
with the official e2b SDK:

- watch events of an upload: CREATE, CHMOD, WRITE (new file), CHMOD, WRITE;
- reading procfs files (stat size 0) works (the SDK asks for gzip);
- the sandbox's boot_id is its own and changes when a filesystem-only pause
  and resume boots it again, not after a full pause;
- Idempotency-Key on create, HTTP/2 without TLS (h2c), v2 defaults;
- getHost(port) names a host (with the listener's port) the server routes;
- a second server refuses a subnet or bridge another server uses;
- getInfo's pauseMode is E2B's ``full`` or ``filesystem``.
"""

import inspect
import os
import re
import socket
import subprocess
import tempfile
import time
import uuid
from urllib.parse import urlparse

import httpx
import pytest
from e2b import FilesystemEventType, Sandbox

from helpers import HOME, SUITE_KEY, TEMPLATE, sandbox_url, uniq, wait_for

UUID_RE = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")


def api(path: str) -> str:
    return os.environ["E2B_API_URL"].rstrip("/") + path


def api_headers() -> dict:
    return {"X-API-Key": os.environ["E2B_API_KEY"]}


def test_upload_watch_events_are_envds(sandbox):
    d = f"{HOME}/upl"
    sandbox.files.make_dir(d)
    handle = sandbox.files.watch_dir(d)
    try:
        seen = []

        def upload_events(name):
            def done():
                seen.extend(e for e in handle.get_new_events() if e.name == name)
                return any(e.type == FilesystemEventType.WRITE for e in seen)

            wait_for(f"WRITE of {name}", done, timeout=15, interval=0.2)
            time.sleep(0.5)
            seen.extend(e for e in handle.get_new_events() if e.name == name)
            got = [e.type for e in seen]
            seen.clear()
            return got

        sandbox.files.write(f"{d}/new.txt", "one")
        assert upload_events("new.txt") == [
            FilesystemEventType.CREATE,
            FilesystemEventType.CHMOD,
            FilesystemEventType.WRITE,
        ]
        sandbox.files.write(f"{d}/new.txt", "two")
        assert upload_events("new.txt") == [FilesystemEventType.CHMOD, FilesystemEventType.WRITE]
    finally:
        handle.stop()


def test_read_procfs_files(sandbox):
    boot_id = sandbox.files.read("/proc/sys/kernel/random/boot_id")
    assert UUID_RE.match(boot_id.strip()), repr(boot_id)
    assert sandbox.files.read("/proc/version").startswith("Linux version")
    assert "MemTotal" in sandbox.files.read("/proc/meminfo")
    assert bytes(sandbox.files.read("/proc/version", format="bytes")).startswith(b"Linux version")


def boot_id(sbx) -> str:
    return sbx.commands.run("cat /proc/sys/kernel/random/boot_id").stdout.strip()


def test_boot_id_is_the_sandboxs_and_changes_on_a_filesystem_resume(sandbox_factory):
    sbx = sandbox_factory(timeout=300)
    first = boot_id(sbx)
    assert UUID_RE.match(first), first
    with open("/proc/sys/kernel/random/boot_id") as f:
        assert first != f.read().strip(), "the sandbox shows the host's boot_id"
    assert first != boot_id(sandbox_factory()), "two sandboxes share a boot_id"

    assert sbx.pause() is True
    sbx.connect(timeout=300)
    assert boot_id(sbx) == first, "a full pause and resume is not a reboot"

    assert sbx.pause(keep_memory=False) is True
    sbx.connect(timeout=300)
    again = boot_id(sbx)
    assert UUID_RE.match(again) and again != first, "a filesystem resume boots the sandbox again"


def create_raw(key: str, body: dict) -> httpx.Response:
    return httpx.post(api("/v2/sandboxes"), json=body, headers={**api_headers(), "Idempotency-Key": key}, timeout=300)


def test_idempotency_key_raw():
    key = "k-" + uuid.uuid4().hex
    body = {"templateID": TEMPLATE, "timeout": 120, "metadata": {SUITE_KEY: "py"}}
    first = create_raw(key, body)
    try:
        assert first.status_code == 201, first.text
        again = create_raw(key, body)
        assert again.status_code == 201, again.text
        assert again.json()["sandboxID"] == first.json()["sandboxID"]
        other = create_raw(key, {**body, "timeout": 60})
        assert other.status_code == 409, other.text
        assert other.json().get("error_code") == "idempotency_request_mismatch"
    finally:
        Sandbox.kill(first.json()["sandboxID"])


def test_idempotency_key_sdk(sandbox_factory):
    if "idempotency_key" not in inspect.signature(Sandbox.create).parameters:
        pytest.skip("this e2b SDK does not send Idempotency-Key (added in 2.61)")
    key = "sdk-" + uuid.uuid4().hex
    a = sandbox_factory(idempotency_key=key)
    b = sandbox_factory(idempotency_key=key)
    assert a.sandbox_id == b.sandbox_id
    assert a.commands.run("echo once").stdout == "once\n"


def test_h2c_prior_knowledge():
    pytest.importorskip("h2", reason="this SDK set has no HTTP/2 client (h2)")
    with httpx.Client(http1=False, http2=True, timeout=30) as c:
        r = c.get(api("/health"))
        assert r.status_code == 200 and r.http_version == "HTTP/2"
        r = c.get(api("/v2/sandboxes"), headers=api_headers())
        assert r.status_code == 200 and r.http_version == "HTTP/2"


def test_h2c_to_envd(sandbox):
    pytest.importorskip("h2", reason="this SDK set has no HTTP/2 client (h2)")
    with httpx.Client(http1=False, http2=True, timeout=30) as c:
        r = c.get(
            sandbox_url() + "/health",
            headers={"E2b-Sandbox-Id": sandbox.sandbox_id, "E2b-Sandbox-Port": "49983"},
        )
        assert r.status_code == 204 and r.http_version == "HTTP/2"


def test_v2_defaults_supplied_by_the_server(sandbox_factory):
    sbx = sandbox_factory(timeout=None)  # e2b >= 2.51 then sends no timeout on v2 create
    info = sbx.get_info()
    lifetime = (info.end_at - info.started_at).total_seconds()
    assert 290 <= lifetime <= 310, f"default timeout {lifetime}s, want 300"
    assert sbx.commands.run("echo up").stdout == "up\n"


def test_get_host_names_the_listener(sandbox):
    port = urlparse(sandbox_url()).port
    host = sandbox.get_host(8000)
    assert host.startswith(f"8000-{sandbox.sandbox_id}.") and host.endswith(f":{port}"), host
    token = uniq("h")
    sandbox.files.write(f"{HOME}/gh/index.html", token)
    h = sandbox.commands.run(f"cd {HOME}/gh && python3 -m http.server 8000", background=True)
    try:
        def get():
            r = httpx.get(f"http://127.0.0.1:{port}/index.html", headers={"Host": host}, timeout=5)
            return r if r.status_code == 200 else None

        assert wait_for("the sandbox's web server", get, timeout=20).text == token
    finally:
        h.kill()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def second_server(bridge: str, subnet: str) -> subprocess.CompletedProcess:
    """Starts another `cubby serve` and returns it once it exits (at most 60 s;
    one that keeps running is stopped and reported as such)."""
    for name in ("CUBBY_BIN", "CUBBY_COMPAT_BRIDGE", "CUBBY_COMPAT_SUBNET"):
        if not os.environ.get(name):
            pytest.skip(f"{name} not set (run through test/compat/run.sh)")
    with tempfile.TemporaryDirectory() as data:
        cmd = [os.environ["CUBBY_BIN"], "serve", "--listen", f"127.0.0.1:{free_port()}", "--data-dir", data,
               "--templates-dir", os.environ.get("CUBBY_TEMPLATES_DIR", ""), "--bridge", bridge, "--subnet", subnet]
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        try:
            out, _ = p.communicate(timeout=60)
            return subprocess.CompletedProcess(cmd, p.returncode, out)
        except subprocess.TimeoutExpired:
            p.terminate()
            out, _ = p.communicate()
            return subprocess.CompletedProcess(cmd, None, out)
        finally:
            if bridge != os.environ["CUBBY_COMPAT_BRIDGE"]:
                subprocess.run(["ip", "link", "del", bridge], capture_output=True)
                subprocess.run(["nft", "delete", "table", "inet", "cubby_" + bridge], capture_output=True)


def test_second_server_refuses_an_overlapping_subnet():
    used = os.environ.get("CUBBY_COMPAT_SUBNET", "")
    r = second_server("cbpy" + uuid.uuid4().hex[:6], used)
    assert r.returncode not in (None, 0), f"a server on {used} started:\n{r.stdout[-2000:]}"
    assert "overlaps" in r.stdout and os.environ["CUBBY_COMPAT_BRIDGE"] in r.stdout, r.stdout[-2000:]


def test_second_server_refuses_a_live_servers_bridge():
    r = second_server(os.environ.get("CUBBY_COMPAT_BRIDGE", ""), "10.254.%d.0/24" % (uuid.uuid4().int % 250))
    assert r.returncode not in (None, 0), f"a second server on the bridge started:\n{r.stdout[-2000:]}"
    assert f"pid {os.environ.get('CUBBY_COMPAT_SERVER_PID')}" in r.stdout, r.stdout[-2000:]


def pause_fields(sandbox_id: str) -> tuple:
    r = httpx.get(api(f"/sandboxes/{sandbox_id}"), headers=api_headers(), timeout=30)
    assert r.status_code == 200, r.text
    d = r.json()
    return d.get("pauseMode"), d.get("cubbyPauseMethod")


def test_pause_mode_values_are_e2bs(sandbox_factory):
    sbx = sandbox_factory(timeout=300)
    assert pause_fields(sbx.sandbox_id) == (None, None), "no pauseMode while running"
    assert sbx.pause() is True
    info = sbx.get_info()  # e2b >= 2.63 parses pauseMode strictly
    assert info.state.value == "paused"
    mode, method = pause_fields(sbx.sandbox_id)
    assert mode == "full" and method in ("freeze", "checkpoint"), (mode, method)
    if hasattr(info, "pause_mode"):
        assert str(info.pause_mode) == "full"
    sbx.connect(timeout=300)
    assert sbx.pause(keep_memory=False) is True
    assert sbx.get_info().state.value == "paused"
    assert pause_fields(sbx.sandbox_id) == ("filesystem", "filesystem")
