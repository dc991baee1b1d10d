"""Shared fixtures for the Python compatibility suite.

The suite drives the official, unmodified ``e2b`` package (pinned in
requirements.txt) against a Cubby server. The SDK is configured only through
the environment, as a user would configure it (docs/wire/e2b-api.md §1.1):
``E2B_API_URL``, ``E2B_SANDBOX_URL`` and ``E2B_API_KEY`` (all required).
test/compat/run.sh starts a server and exports them.

Every test creates its own sandboxes through the fixtures below, which kill
them afterwards whether the test passed or not, so tests are independent of
each other and of their order.
"""

import os
from typing import List

import pytest
from e2b import AsyncSandbox, Sandbox

from helpers import REQUIRED_ENV, SUITE_KEY, TEMPLATE


@pytest.fixture(scope="session", autouse=True)
def _server_env():
    """Fails (does not skip) every test when the server env is missing."""
    missing = [name for name in REQUIRED_ENV if not os.environ.get(name)]
    if missing:
        pytest.fail(
            f"{', '.join(missing)} not set: run through test/compat/run.sh or export "
            "E2B_API_URL, E2B_SANDBOX_URL and E2B_API_KEY for a running Cubby server",
            pytrace=False,
        )
    if os.environ.get("E2B_DEBUG", "").lower() == "true":
        pytest.fail("E2B_DEBUG=true bypasses the control plane; unset it", pytrace=False)


@pytest.fixture
def sandbox_factory():
    """Returns ``make(**create_kwargs) -> Sandbox``; all are killed afterwards."""
    created: List[Sandbox] = []

    def make(**kwargs) -> Sandbox:
        metadata = {SUITE_KEY: "py", **(kwargs.pop("metadata", None) or {})}
        kwargs.setdefault("timeout", 300)
        sbx = Sandbox.create(template=kwargs.pop("template", TEMPLATE), metadata=metadata, **kwargs)
        created.append(sbx)
        return sbx

    yield make
    for sbx in created:
        try:
            sbx.kill()
        except Exception:  # noqa: BLE001 - best-effort cleanup
            pass


@pytest.fixture
def sandbox(sandbox_factory) -> Sandbox:
    """A fresh sandbox from TEMPLATE, killed after the test."""
    return sandbox_factory()


@pytest.fixture
async def async_sandbox_factory():
    """Async variant of :func:`sandbox_factory` returning AsyncSandbox."""
    created: List[AsyncSandbox] = []

    async def make(**kwargs) -> AsyncSandbox:
        metadata = {SUITE_KEY: "py-async", **(kwargs.pop("metadata", None) or {})}
        kwargs.setdefault("timeout", 300)
        sbx = await AsyncSandbox.create(
            template=kwargs.pop("template", TEMPLATE), metadata=metadata, **kwargs
        )
        created.append(sbx)
        return sbx

    yield make
    for sbx in created:
        try:
            await sbx.kill()
        except Exception:  # noqa: BLE001 - best-effort cleanup
            pass


@pytest.fixture
async def async_sandbox(async_sandbox_factory) -> AsyncSandbox:
    """A fresh AsyncSandbox from TEMPLATE, killed after the test."""
    return await async_sandbox_factory()
