"""``svc-gateway demo``: in-process and as the command a newcomer types."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from svc_gateway.hosts.demo import mcp_available, run_demo
from tests.support import LogCollector, leaked_secrets

ROOT = Path(__file__).resolve().parents[2]


async def test_run_demo_moves_exactly_the_priced_credits(
    capsys: pytest.CaptureFixture[str], all_logs: LogCollector
) -> None:
    assert await run_demo() == 0
    assert asyncio.all_tasks() == {asyncio.current_task()}  # nothing left running
    assert not [t for t in threading.enumerate() if t.name == "svc-plugin-loop"]
    lines = capsys.readouterr().out.strip().splitlines()
    (verdict,) = [line for line in lines if line.startswith("OK: ")]
    assert verdict.startswith("OK: 4 credits moved from subscriber to builder")
    assert "balance 10 -> 6" in verdict
    assert lines[lines.index(verdict) + 1] == "Try next:"  # the demo ends with what to try next
    assert "svc-gateway chat" in lines[-4] and "svc-gateway sandbox" in lines[-2]
    steps = [line for line in lines if line[:3].strip().rstrip(".").isdigit()]
    tools = {line.split()[2] for line in steps}
    assert {"svc_registerAgent", "/svc_login", "svc_checkBalance", "svc_orderPlan"} <= tools
    mcp = mcp_available()  # with the mcp extra the demo also buys one MCP tool call
    assert sum("svc_queryAgent" in line for line in steps) == 2 + mcp
    assert ("MCP: 1 tool call x 2 credits, receipt agrees" in verdict) is mcp
    assert "eyJ" not in "\n".join(lines)  # no key or token printed
    assert not leaked_secrets(all_logs.text)


async def test_quiet_demo_prints_only_the_verdict(capsys: pytest.CaptureFixture[str]) -> None:
    assert await run_demo(quiet=True) == 0
    out = capsys.readouterr().out.strip().splitlines()
    assert len(out) == 1 and out[0].startswith("OK: 4 credits moved")


def test_demo_command_exits_0_cleanly(tmp_path: Path) -> None:
    env = {**os.environ, "HOME": str(tmp_path), "XDG_CONFIG_HOME": str(tmp_path / ".config")}
    env["PYTHONWARNINGS"] = "always"  # any warning would show up on stderr
    done = subprocess.run(
        [sys.executable, "-m", "svc_gateway.cli", "demo"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    lines = done.stdout.strip().splitlines()
    assert lines[-6].startswith("OK: 4 credits moved from subscriber to builder"), done.stdout
    assert lines[-5] == "Try next:"
    assert not (tmp_path / ".config" / "svc-gateway").exists()  # no credential left behind
