"""docs/cli.md's first recipe ("Try it offline") runs as written: one step makes the builder
and subscriber profiles on a local sandbox, and the paid cycle (plan, agent, order, token,
verify and settle from the token and the plan) runs with ``svc`` alone, offline."""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import sys
from pathlib import Path

import pytest

from svc_gateway.sandbox import SandboxServer
from tests.docs_recipes import CLI_OFFLINE, blocks

from .conftest import RUN_SECS, Svc


def recipe() -> tuple[str, str]:
    (_, start), (_, walk) = blocks(CLI_OFFLINE)
    return start.strip(), walk


def test_the_recipe_starts_the_sandbox_the_walk_then_reads() -> None:
    start, walk = recipe()
    assert start == "svc-gateway sandbox --port 8765 --db sandbox.db"
    assert re.search(r"^SANDBOX=\$\{SANDBOX:-http://127\.0\.0\.1:8765\}$", walk, re.M)


@pytest.mark.skipif(shutil.which("bash") is None, reason="bash is not installed")
async def test_the_offline_recipe_runs_the_paid_cycle_as_written(
    svc: Svc, sandbox: SandboxServer
) -> None:
    _, walk = recipe()
    bin_dir = Path(sys.executable).parent
    assert (bin_dir / "svc").is_file(), "the svc console script is installed beside python"
    env = {
        **svc.env,
        "SANDBOX": sandbox.origin,  # the session's sandbox stands in for the one on 8765
        "PATH": os.pathsep.join([str(bin_dir), os.environ.get("PATH", "")]),
    }
    proc = await asyncio.create_subprocess_exec(
        shutil.which("bash") or "bash", "-euo", "pipefail", "-c", walk,
        env=env, cwd=svc.home,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    try:
        out, err = await asyncio.wait_for(proc.communicate(), RUN_SECS * 2)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        raise
    text, errors = out.decode(), err.decode()
    assert proc.returncode == 0, errors[-2000:]
    assert "Traceback" not in errors
    assert "Profile 'builder'" in text and "Profile 'subscriber'" in text
    assert re.search(r"^creditsRedeemed\s+1$", text, re.M), text  # the settle's table
    assert re.search(r"^balance\s+99$", text, re.M), text  # the last line's balance
