"""Parallel tool calls of a metered tool in the real ``hermes chat -q``: one charge per call
(issue 43, item 10). Hermes 0.19.0's concurrent path runs the ``tool_execution`` middleware
twice around one registry tool (``agent_runtime_helpers.invoke_tool`` wraps
``model_tools.handle_function_call``, which wraps it again) with the same ``tool_call_id``."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

pytest.importorskip("hermes_cli")

from tests.docs_recipes import ROOT

from .hermes_support import SERVICE_VERSION, Sandbox, plan_body
from .test_hermes_offline import free_port, hermes_env

pytestmark = pytest.mark.hermes
SAY = "(fake model) The tools answered:"
WAIT_SECS = 90.0


def own_plan(sandbox: Sandbox) -> str:
    """A plan the builder registers and orders itself: the CLI's account both pays for its
    metered calls and, owning the plan, settles them (a one-person gateway selling to itself)."""
    headers = {
        "Authorization": f"Bearer {sandbox.builder.api_key}",
        "Service-Version": SERVICE_VERSION,
    }
    with httpx.Client(base_url=sandbox.base_url, timeout=15.0, headers=headers) as http:
        created = http.post("/protocol/plans", json=plan_body("Metered", sandbox.builder.address))
        plan_id = str(created.json()["planId"])
        assert http.post(f"/protocol/plans/{plan_id}/order").status_code < 300
    return plan_id


def ledger(sandbox: Sandbox, plan_id: str) -> dict[str, int]:
    holder = sandbox.builder.address
    with httpx.Client(base_url=sandbox.base_url, timeout=15.0) as http:
        data = http.get(f"/sandbox/ledger/{plan_id}/{holder}").json()
    return {k: int(data[k]) for k in ("granted", "burned", "balance")}


def ask_hermes(
    tmp_path: Path, settings: dict[str, Any], calls: list[tuple[str, dict[str, Any]]]
) -> subprocess.CompletedProcess[str]:
    """``hermes chat -q`` against the scripted model making ``calls`` in one answer."""
    port = free_port()
    env = hermes_env(tmp_path)
    config = {
        "model": {
            "provider": "custom",
            "base_url": f"http://127.0.0.1:{port}/v1",
            "default": "fake-model",
            "api_key": "no-key-needed",
        },
        "plugins": {"enabled": ["svc"], "entries": {"svc": {"settings": settings}}},
    }
    (tmp_path / "hermes" / "config.yaml").write_text(yaml.safe_dump(config))
    (first_tool, first_args), *more = calls
    argv = [sys.executable, "-m", "tests.hosts.hermes.fake_llm", "--port", port, "--say", SAY]
    argv += ["--tool", first_tool, "--args", json.dumps(first_args)]
    for tool, args in more:
        argv += ["--also", json.dumps({"tool": tool, "args": args})]
    hermes = Path(sys.executable).parent / "hermes"
    with subprocess.Popen(argv, cwd=ROOT, env=env, stdout=subprocess.PIPE, text=True) as fake:
        try:
            assert fake.stdout is not None
            assert fake.stdout.readline().startswith("fake model at http://127.0.0.1:")
            return subprocess.run(
                [str(hermes), "chat", "-q", "Read both notes"],
                cwd=tmp_path,
                env=env,
                capture_output=True,
                text=True,
                timeout=WAIT_SECS,
                check=False,
            )
        finally:
            fake.terminate()


def test_parallel_calls_of_a_metered_tool_are_each_charged_once(
    hermes_sandbox: Sandbox, tmp_path: Path
) -> None:
    plan_id = own_plan(hermes_sandbox)
    notes = []
    for name in ("alpha", "beta"):
        note = tmp_path / f"{name}.txt"
        note.write_text(f"the {name} note says hello\n")
        notes.append(note)
    before = ledger(hermes_sandbox, plan_id)
    settings = {
        "environment": "local",
        "baseUrl": hermes_sandbox.base_url,
        "svcApiKey": hermes_sandbox.builder.api_key,  # the CLI acts as the operator
        "planId": plan_id,
        "meteredTools": {"read_file": 1},
        "approval": "model",
    }
    calls = [("read_file", {"path": str(note)}) for note in notes]
    run = ask_hermes(tmp_path, settings, calls)
    assert run.returncode == 0, run.stderr[-3000:]
    said = " ".join(run.stdout.split(SAY, 1)[-1].split())
    assert "alpha note says hello" in said and "beta note says hello" in said, said[:2000]
    after = ledger(hermes_sandbox, plan_id)
    assert after["burned"] - before["burned"] == 2  # two calls, two credits: none twice
    assert after["balance"] == before["balance"] - 2
    assert after["granted"] == after["balance"] + after["burned"]  # conservation
