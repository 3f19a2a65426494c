"""These tests only create accounts of their own: they share the session's sandbox."""

from __future__ import annotations

import pytest

from tests.support.fixtures import SharedSandbox


@pytest.fixture
def sandbox(shared_sandbox: SharedSandbox) -> SharedSandbox:
    return shared_sandbox
