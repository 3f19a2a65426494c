"""The docs' "Sandbox with curl" walk-through (docs/sandbox.md) works as written: its bash block is
run with curl against a sandbox on 127.0.0.1 (skipped when curl or bash is not installed)."""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import sys
from pathlib import Path

import pytest

from svc_gateway.sandbox import SandboxServer
from tests.docs_recipes import CURL_WALKTHROUGH, blocks

RUN_TIMEOUT_SECS = 60


def walkthrough() -> str:
    """The bash block of the "Sandbox with curl" section that sets ``BASE``."""
    steps = [text for _, text in blocks(CURL_WALKTHROUGH) if "BASE=" in text]
    assert len(steps) == 1, "the section must have exactly one walk-through block"
    return steps[0]


def test_walkthrough_reads_its_base_url_from_the_environment() -> None:
    assert re.search(r"^BASE=\$\{BASE:-http://127\.0\.0\.1:\d+/api/v1\}$", walkthrough(), re.M)


@pytest.mark.skipif(shutil.which("curl") is None, reason="curl is not installed")
@pytest.mark.skipif(shutil.which("bash") is None, reason="bash is not installed")
async def test_the_curl_walkthrough_sells_one_credit(server: SandboxServer) -> None:
    env = dict(os.environ)
    env["BASE"] = server.base_url
    # the block reads JSON with python3: make it this interpreter
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    script = walkthrough()
    # the sandbox runs on this loop: the script must run without blocking it
    proc = await asyncio.create_subprocess_exec(
        shutil.which("bash") or "bash",
        "-euo",
        "pipefail",
        "-c",
        script,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        out, err = await asyncio.wait_for(proc.communicate(), RUN_TIMEOUT_SECS)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        raise
    assert proc.returncode == 0, err.decode()[-2000:]
    lines = [json.loads(line) for line in out.decode().splitlines() if line.strip()]
    order, settle, balance = lines
    assert order["success"] is True
    assert settle["success"] is True and settle["creditsRedeemed"] == "1"
    assert balance["balance"] == "99" and balance["isSubscriber"] is True
