"""Fixtures for the AstrBot host tests: a sandbox service, a plan, the fake model, AstrBot itself.

These tests need AstrBot (Python 3.12 and the ``astrbot`` extra). Where it is not importable (the
3.11 suite) the folder is not collected at all, so ``SVC_REQUIRE_ALL=1`` sees no skips; CI runs it
in its own 3.12 venv (``.ci/run``).
"""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator
from pathlib import Path

import pytest

if importlib.util.find_spec("astrbot") is None:  # Python < 3.12 or no astrbot extra
    collect_ignore_glob = ["test_*.py"]

from tests.hosts.hermes.hermes_support import Sandbox, create_ordered_plan, sandbox_process

from .support import ScriptedModel


@pytest.fixture(scope="session")
def astr_sandbox() -> Iterator[Sandbox]:
    with sandbox_process() as sandbox:
        yield sandbox


@pytest.fixture(scope="session")
def astr_plan(astr_sandbox: Sandbox) -> str:
    plan_id: str = create_ordered_plan(astr_sandbox, "AstrBot host test plan")
    return plan_id


@pytest.fixture(scope="module")
def model() -> Iterator[ScriptedModel]:
    with ScriptedModel() as fake:
        yield fake


@pytest.fixture(scope="module")
def module_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("astrbot")
