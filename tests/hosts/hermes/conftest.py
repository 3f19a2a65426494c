"""Fixtures for the Hermes host tests: one local sandbox service per session, one ordered plan."""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator

import pytest

from .hermes_support import Sandbox, create_ordered_plan, sandbox_process


def _sandbox_available() -> bool:
    try:
        import svc_gateway.sandbox as sandbox_pkg
    except ImportError:
        return False
    return hasattr(sandbox_pkg, "main_sandbox")


@pytest.fixture(scope="session")
def hermes_sandbox() -> Iterator[Sandbox]:
    if importlib.util.find_spec("hermes_cli") is None:
        pytest.skip("Hermes Agent is not installed (pip install -e '.[hermes]')")
    if not _sandbox_available():
        pytest.skip("svc_gateway.sandbox.main_sandbox is not available")
    with sandbox_process() as sandbox:
        yield sandbox


@pytest.fixture(scope="session")
def hermes_plan_id(hermes_sandbox: Sandbox) -> str:
    plan_id: str = create_ordered_plan(hermes_sandbox, "Hermes host test plan")
    return plan_id
