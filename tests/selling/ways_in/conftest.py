"""These tests only create accounts of their own: they share the session's sandbox."""

from __future__ import annotations

import importlib.util

import pytest

from tests.support.fixtures import SharedSandbox

# langgraph/ runs a real LangGraph server: only where langgraph-api is installed (.ci/run's
# "LangGraph tests" venv; payments-py[langsmith] pins starlette < 0.50, langgraph-api needs >= 1.3)
collect_ignore = [] if importlib.util.find_spec("langgraph_api") else ["langgraph"]


@pytest.fixture
def sandbox(shared_sandbox: SharedSandbox) -> SharedSandbox:
    return shared_sandbox
