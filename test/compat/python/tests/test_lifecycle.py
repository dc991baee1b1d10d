"""Sandbox lifecycle through the control plane with the sync SDK (docs/wire/e2b-api.md §2.3).

The Python SDK creates with the v1 endpoint (``POST /sandboxes`` with
``secure``) and connects with ``POST /sandboxes/{id}/connect``.
"""

import datetime
import re
import time

import pytest
from e2b import InvalidArgumentException, Sandbox, SandboxNotFoundException, SandboxState
from packaging.version import Version

from helpers import SUITE_KEY, uniq, wait_for, unsecured_or_skip


def now_utc() -> datetime.datetime:
    return datetime.datetime.now(datetime.timezone.utc)


def assert_near(actual: datetime.datetime, expected: datetime.datetime, slack_s: float, what: str):
    assert actual.tzinfo is not None, f"{what} is not timezone-aware"
    delta = abs((actual - expected).total_seconds())
    assert delta <= slack_s, f"{what}: {actual.isoformat()} is {delta:.1f}s from {expected.isoformat()}"


def test_create_v1_with_metadata_envs_timeout_and_get_info(sandbox_factory):
    metadata = {"owner": uniq("o"), "k y": "v&1", "spaced": "a b=c"}
    before = now_utc()
    sbx = sandbox_factory(metadata=metadata, envs={"CUBBY_CREATE_ENV": "from-create"}, timeout=120)
    assert re.fullmatch(r"[a-z0-9]+", sbx.sandbox_id), sbx.sandbox_id

    info = sbx.get_info()
    assert info.sandbox_id == sbx.sandbox_id
    assert isinstance(info.template_id, str) and info.template_id
    assert info.metadata == {**metadata, SUITE_KEY: "py"}
    assert info.state == SandboxState.RUNNING
    assert isinstance(info.cpu_count, int) and info.cpu_count >= 1
    assert isinstance(info.memory_mb, int) and info.memory_mb >= 1
    assert Version(info.envd_version) >= Version("0.6.4")
    assert isinstance(info.started_at, datetime.datetime)
    assert isinstance(info.end_at, datetime.datetime)
    assert_near(info.started_at, before, 30, "started_at")
    ttl = (info.end_at - info.started_at).total_seconds()
    assert abs(ttl - 120) <= 3, f"end_at - started_at = {ttl}s"

    same = Sandbox.get_info(sbx.sandbox_id)
    assert same.metadata == info.metadata

    r = sbx.commands.run('echo "$CUBBY_CREATE_ENV"')
    assert r.stdout == "from-create\n"


def test_unsecured_sandbox_works_without_access_token(sandbox_factory):
    sbx = sandbox_factory(secure=False)
    unsecured_or_skip(sbx)
    # Without an envdAccessToken the SDK refuses signed-URL expirations.
    with pytest.raises(InvalidArgumentException):
        sbx.download_url("x.txt", use_signature_expiration=10)
    assert sbx.commands.run("echo unsecured").stdout == "unsecured\n"
    sbx.files.write("plain.txt", "no token needed")
    assert sbx.files.read("plain.txt") == "no token needed"
    assert sbx.is_running()


def test_connect_attaches_and_only_extends(sandbox_factory):
    sbx = sandbox_factory(timeout=120)
    info0 = sbx.get_info()

    same = Sandbox.connect(sbx.sandbox_id, timeout=10)
    assert same.sandbox_id == sbx.sandbox_id
    assert same.commands.run("echo connected").stdout == "connected\n"
    info1 = sbx.get_info()
    assert info1.end_at >= info0.end_at - datetime.timedelta(seconds=1), "connect shortened end_at"

    before = now_utc()
    again = sbx.connect(timeout=600)
    assert again.sandbox_id == sbx.sandbox_id
    info2 = sbx.get_info()
    assert info2.end_at > info0.end_at, "connect did not extend end_at"
    assert_near(info2.end_at, before + datetime.timedelta(seconds=600), 5, "end_at after connect(600)")


def test_connect_unknown_sandbox_raises_not_found():
    with pytest.raises(SandboxNotFoundException):
        Sandbox.connect(uniq("nosuch"))


def test_set_timeout_shortens_and_sandbox_goes_away(sandbox_factory):
    sbx = sandbox_factory(timeout=300)
    t0 = time.monotonic()
    start = now_utc()
    sbx.set_timeout(5)
    info = sbx.get_info()
    assert_near(info.end_at, start + datetime.timedelta(seconds=5), 2, "end_at after set_timeout(5)")
    assert sbx.is_running(), "killed long before its deadline"

    time.sleep(max(0.0, t0 + 6.5 - time.monotonic()))
    assert not sbx.is_running(), "still running 1.5 s after its deadline"
    with pytest.raises(SandboxNotFoundException):
        sbx.get_info()


def test_set_timeout_extends_and_replaces(sandbox_factory):
    sbx = sandbox_factory(timeout=4)
    t0 = time.monotonic()
    sbx.set_timeout(30)
    info1 = sbx.get_info()
    assert_near(info1.end_at, now_utc() + datetime.timedelta(seconds=30), 3, "end_at after set_timeout(30)")

    time.sleep(max(0.0, t0 + 6 - time.monotonic()))
    assert sbx.is_running(), "extended sandbox died at its original deadline"

    start = now_utc()
    Sandbox.set_timeout(sbx.sandbox_id, 10)
    info2 = sbx.get_info()
    assert_near(info2.end_at, start + datetime.timedelta(seconds=10), 2, "end_at after set_timeout(10)")
    assert info2.end_at < info1.end_at


def test_kill_true_then_false_and_is_running(sandbox_factory):
    sbx = sandbox_factory()
    assert sbx.is_running() is True
    assert sbx.kill() is True
    assert sbx.is_running() is False
    assert Sandbox.kill(sbx.sandbox_id) is False


def test_kill_unknown_id_returns_false():
    assert Sandbox.kill(uniq("nosuch")) is False


def test_get_metrics(sandbox_factory):
    sbx = sandbox_factory()
    created = now_utc()
    metrics = wait_for("a metrics sample", lambda: sbx.get_metrics(), timeout=15, interval=0.5)
    for m in metrics:
        assert isinstance(m.timestamp, datetime.datetime)
        assert_near(m.timestamp, created, 60, "metric timestamp")
        assert m.cpu_count >= 1
        assert m.cpu_used_pct >= 0
        assert m.mem_total > 0
        assert 0 < m.mem_used <= m.mem_total
        assert m.mem_cache >= 0
        assert m.disk_total > 0
        assert 0 <= m.disk_used <= m.disk_total

    old = sbx.get_metrics(
        start=created - datetime.timedelta(hours=1),
        end=created - datetime.timedelta(minutes=50),
    )
    assert old == []

    start = created - datetime.timedelta(seconds=5)
    end = now_utc() + datetime.timedelta(seconds=5)
    ranged = Sandbox.get_metrics(sbx.sandbox_id, start=start, end=end)
    assert ranged, "no sample inside a range covering the whole life"
    for m in ranged:
        assert m.timestamp >= start - datetime.timedelta(seconds=10)
        assert m.timestamp <= end + datetime.timedelta(seconds=10)


def test_context_manager_kills_on_exit():
    with Sandbox.create(metadata={SUITE_KEY: "py"}, timeout=120) as sbx:
        assert sbx.commands.run("echo inside").stdout == "inside\n"
        sandbox_id = sbx.sandbox_id
    assert Sandbox.kill(sandbox_id) is False
