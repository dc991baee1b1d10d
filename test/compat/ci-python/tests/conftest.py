"""Shared fixtures for the code-interpreter Python compatibility suite.

The suite drives the official, unmodified ``e2b-code-interpreter`` package
(pinned in requirements.txt) against a Cubby server, configured only through
the environment as a user would (docs/wire/e2b-api.md §1.1): ``E2B_API_URL``,
``E2B_SANDBOX_URL`` and ``E2B_API_KEY`` (all required). test/compat/run.sh
starts a server and exports them.

Every test creates its own sandboxes from the SDK's default template
(``code-interpreter-v1``) through the fixtures below, which kill them
afterwards whether the test passed or not.
"""

import os
from typing import List

import pytest
from e2b_code_interpreter import AsyncSandbox, Sandbox

from helpers import REQUIRED_ENV, SUITE_KEY, TEMPLATE


@pytest.fixture(scope="session", autouse=True)
def _server_env():
    """Fails (does not skip) every test when the server env is missing."""
    missing = [name for name in REQUIRED_ENV if not os.environ.get(name)]
    if missing:
        pytest.fail(
            f"{', '.join(missing)} not set: run through test/compat/run.sh --ci-only or export "
            "E2B_API_URL, E2B_SANDBOX_URL and E2B_API_KEY for a running Cubby server",
            pytrace=False,
        )
    if os.environ.get("E2B_DEBUG", "").lower() == "true":
        pytest.fail("E2B_DEBUG=true bypasses the control plane; unset it", pytrace=False)


def _create_kwargs(kwargs: dict, suite_value: str) -> dict:
    kwargs["metadata"] = {SUITE_KEY: suite_value, **(kwargs.get("metadata") or {})}
    kwargs.setdefault("timeout", 300)
    if TEMPLATE:
        kwargs.setdefault("template", TEMPLATE)
    return kwargs


@pytest.fixture
def sandbox_factory():
    """Returns ``make(**create_kwargs) -> Sandbox``; all are killed afterwards."""
    created: List[Sandbox] = []

    def make(**kwargs) -> Sandbox:
        sbx = Sandbox.create(**_create_kwargs(kwargs, "ci-py"))
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
    """A fresh code-interpreter sandbox, killed after the test."""
    return sandbox_factory()


@pytest.fixture
async def async_sandbox():
    """A fresh AsyncSandbox, killed after the test."""
    sbx = await AsyncSandbox.create(**_create_kwargs({}, "ci-py-async"))
    yield sbx
    try:
        await sbx.kill()
    except Exception:  # noqa: BLE001 - best-effort cleanup
        pass
