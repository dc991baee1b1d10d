"""Issue 11 under gVisor through the official Python SDK, unchanged,
configured only by E2B_API_URL, E2B_SANDBOX_URL and E2B_API_KEY: a
code-interpreter sandbox sets x = 42 and writes a file; create_snapshot; 3
sandboxes started from the snapshot ID each have x == 42 and the file under
their own sandbox ID, and a change of x in one leaves the others alone; then
fork(count=5) of the source: each fork has x == 42 and the file and is
independent. Everything is killed and the snapshot deleted. Prints one JSON
line {"ok": true, ...}; raises (exit code 1) on any mismatch.
(test/integration/sdk_gvisor_test.go runs it.)"""

import json
import sys
import time

from e2b_code_interpreter import Sandbox

PATH, CONTENT = "/home/user/kept.txt", "written before the snapshot\n"


def x_of(sbx):
    """The value of x in the sandbox's default Python context, as text."""
    ex = sbx.run_code("x")
    assert ex.error is None, f"{sbx.sandbox_id}: x: {ex.error.name}: {ex.error.value}"
    return ex.text


def check_copy(sbx, seen):
    """sbx is a new sandbox (its own ID) holding x == 42 and the file."""
    assert sbx.sandbox_id not in seen, f"sandbox ID {sbx.sandbox_id} reused"
    seen.add(sbx.sandbox_id)
    assert x_of(sbx) == "42", f"{sbx.sandbox_id}: x = {x_of(sbx)!r}, want '42'"
    assert sbx.files.read(PATH) == CONTENT, f"{sbx.sandbox_id}: {PATH} differs"
    host = sbx.commands.run("hostname").stdout.strip()
    assert host == sbx.sandbox_id, f"hostname {host!r} in {sbx.sandbox_id}"


def check_independent(copies, source):
    """Each copy sets its own x; no other copy nor the source sees it."""
    for i, sbx in enumerate(copies):
        assert sbx.run_code(f"x = {100 + i}").error is None
    for i, sbx in enumerate(copies):
        assert x_of(sbx) == str(100 + i), f"{sbx.sandbox_id}: x = {x_of(sbx)!r}"
    assert x_of(source) == "42", f"source: x = {x_of(source)!r}"


template = sys.argv[1] if len(sys.argv) > 1 else "code-interpreter"
live, snapshot_id, figures = [], None, {}
try:
    src = Sandbox.create(template=template, timeout=600)
    live.append(src)
    assert src.run_code("x = 42").error is None
    src.files.write(PATH, CONTENT)
    began = time.monotonic()
    snapshot_id = src.create_snapshot().snapshot_id
    figures["snapshotMs"] = int((time.monotonic() - began) * 1000)
    seen, copies = {src.sandbox_id}, []
    for _ in range(3):
        began = time.monotonic()
        copies.append(Sandbox.create(template=snapshot_id, timeout=600))
        figures.setdefault("startMs", []).append(int((time.monotonic() - began) * 1000))
        live.append(copies[-1])
        check_copy(copies[-1], seen)
    check_independent(copies, src)
    for sbx in copies:
        sbx.kill()
    began = time.monotonic()
    forks = src.fork(count=5, timeout=600)
    figures["fork5Ms"] = int((time.monotonic() - began) * 1000)
    live += [f for f in forks if not isinstance(f, Exception)]
    failed = [repr(f) for f in forks if isinstance(f, Exception)]
    assert len(forks) == 5 and not failed, f"{len(forks)} forks, failed: {failed}"
    for f in forks:
        check_copy(f, seen)
    check_independent(forks, src)
finally:
    for sbx in live:
        sbx.kill()
    if snapshot_id is not None:
        Sandbox.delete_snapshot(snapshot_id)
print(json.dumps({"ok": True, "sandboxID": src.sandbox_id, "snapshotID": snapshot_id, **figures}))
