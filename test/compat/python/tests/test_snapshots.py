"""Snapshots and fork through the official SDK: create_snapshot, sandboxes
started from a snapshot, list_snapshots, delete_snapshot, fork."""

import uuid

import pytest
from e2b import Sandbox

from helpers import SUITE_KEY


def _prepare(sbx: Sandbox) -> str:
    marker = uuid.uuid4().hex
    sbx.files.write("/home/user/state/marker.txt", marker)
    sbx.commands.run(
        "head -c 1M /dev/urandom > /home/user/state/blob && "
        "sha256sum /home/user/state/blob > /home/user/state/blob.sum"
    )
    return marker


def _check(sbx: Sandbox, marker: str) -> None:
    assert sbx.files.read("/home/user/state/marker.txt") == marker
    out = sbx.commands.run("sha256sum -c --quiet /home/user/state/blob.sum && echo ok")
    assert out.stdout == "ok\n"


def test_snapshot_three_sandboxes_list_delete(sandbox_factory):
    src = sandbox_factory()
    marker = _prepare(src)
    name = "py" + uuid.uuid4().hex[:10]
    snap = src.create_snapshot(name=name)
    assert snap.snapshot_id.endswith(f"/{name}:default")
    assert snap.names == [snap.snapshot_id]
    kids = [sandbox_factory(template=snap.snapshot_id, timeout=120) for _ in range(3)]
    for kid in kids:
        _check(kid, marker)
    kids[0].files.write("/home/user/state/marker.txt", "changed")
    assert kids[1].files.read("/home/user/state/marker.txt") == marker

    listed = Sandbox.list_snapshots(sandbox_id=src.sandbox_id).next_items()
    assert [s.snapshot_id for s in listed] == [snap.snapshot_id]
    assert Sandbox.delete_snapshot(snap.snapshot_id) is True
    assert Sandbox.delete_snapshot(snap.snapshot_id) is False
    with pytest.raises(Exception):
        Sandbox.create(template=snap.snapshot_id, timeout=60, metadata={SUITE_KEY: "py"})
    _check(kids[2], marker)


def test_fork_five_independent(sandbox_factory):
    src = sandbox_factory(envs={"FORKED": "yes"})
    marker = _prepare(src)
    forks = src.fork(count=5, timeout=120)
    try:
        assert len(forks) == 5
        ids = {src.sandbox_id}
        for i, f in enumerate(forks):
            assert isinstance(f, Sandbox), f
            assert f.sandbox_id not in ids
            ids.add(f.sandbox_id)
            _check(f, marker)
            assert f.commands.run("echo $FORKED").stdout == "yes\n"
            f.files.write("/home/user/state/marker.txt", f"fork-{i}")
        for i, f in enumerate(forks):
            assert f.files.read("/home/user/state/marker.txt") == f"fork-{i}"
        assert src.files.read("/home/user/state/marker.txt") == marker
    finally:
        for f in forks:
            if isinstance(f, Sandbox):
                f.kill()
