"""Helpers shared by the compatibility tests (imported by conftest and tests)."""

import asyncio
import inspect
import os
import time
import uuid
from typing import Callable, Optional, TypeVar

import pytest

REQUIRED_ENV = ("E2B_API_URL", "E2B_SANDBOX_URL", "E2B_API_KEY")

#: Template every test sandbox is created from (docs/wire/envd.md §3.6).
TEMPLATE = os.environ.get("CUBBY_COMPAT_TEMPLATE", "base")

#: Metadata key every sandbox of this suite carries.
SUITE_KEY = "cubby-compat"

HOME = "/home/user"

T = TypeVar("T")


def sandbox_url() -> str:
    """The sandbox-side origin (one origin, routed by headers)."""
    return os.environ["E2B_SANDBOX_URL"].rstrip("/")


def uniq(prefix: str = "c") -> str:
    """A short random token usable in metadata, paths and file names."""
    return prefix + uuid.uuid4().hex[:12]


def wait_for(what: str, fn: Callable[[], T], timeout: float = 10.0, interval: float = 0.1) -> T:
    """Polls ``fn`` until it returns a truthy value and returns it.

    Fails the test with ``what`` when ``timeout`` seconds pass first. Used to
    wait for asynchronous effects (events, samples), not to assert on time.
    """
    deadline = time.monotonic() + timeout
    last_exc: Optional[BaseException] = None
    while True:
        try:
            value = fn()
            if value:
                return value
        except Exception as exc:  # noqa: BLE001 - reported on timeout
            last_exc = exc
        if time.monotonic() > deadline:
            suffix = f" (last error: {last_exc!r})" if last_exc else ""
            pytest.fail(f"timed out after {timeout}s waiting for {what}{suffix}")
        time.sleep(interval)


async def async_wait_for(what: str, fn, timeout: float = 10.0, interval: float = 0.1):
    """Async variant of :func:`wait_for`; ``fn`` may return an awaitable."""
    deadline = time.monotonic() + timeout
    last_exc: Optional[BaseException] = None
    while True:
        try:
            value = fn()
            if inspect.isawaitable(value):
                value = await value
            if value:
                return value
        except Exception as exc:  # noqa: BLE001 - reported on timeout
            last_exc = exc
        if time.monotonic() > deadline:
            suffix = f" (last error: {last_exc!r})" if last_exc else ""
            pytest.fail(f"timed out after {timeout}s waiting for {what}{suffix}")
        await asyncio.sleep(interval)


def unsecured_or_skip(sbx) -> None:
    """Skips the test when the SDK made a secured sandbox although asked for an
    unsecured one: e2b >= 2.51 creates with v2 (always secured) and ignores
    ``secure``."""
    if getattr(sbx, "_envd_access_token", None):
        pytest.skip("this e2b SDK always creates secured sandboxes (v2 create ignores secure=False)")
