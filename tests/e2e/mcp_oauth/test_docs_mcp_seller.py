"""docs/selling.md's "A complete MCP seller" runs as written (the sandbox, the plan and agent
registered with curl, ``python mcp_seller.py``), and "Pay with OAuth" then pays it: its script
and command line, the consent page answered by this test's ``BROWSER`` with the sandbox's
subscriber key. The page's fixed ports 8765 and 8403 are replaced by free ones."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from tests.chat.test_cli import chat_env
from tests.docs_recipes import MCP_SELLER, PAY_WITH_OAUTH, blocks

from .test_docs_oauth import BROWSER

WAIT_SECS = 60


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def line_with(stream: asyncio.StreamReader, pattern: str, seen: list[str]) -> str:
    while True:
        raw = await asyncio.wait_for(stream.readline(), WAIT_SECS)
        assert raw, f"EOF before {pattern!r}: {seen[-30:]}"
        seen.append(raw.decode())
        if re.search(pattern, seen[-1]):
            return seen[-1]


@pytest.mark.skipif(
    shutil.which("bash") is None or shutil.which("curl") is None, reason="needs bash and curl"
)
async def test_the_mcp_seller_runs_as_written_and_pay_with_oauth_pays_it(tmp_path: Path) -> None:
    (_, shell), (_, seller_py) = blocks(MCP_SELLER)
    (_, oauth_py), (_, command) = blocks(PAY_WITH_OAUTH)
    sandbox_port, mcp_port = str(free_port()), str(free_port())
    shell = shell.replace("8765", sandbox_port).replace("8403", mcp_port)
    seller_py = seller_py.replace('"8403"', f'"{mcp_port}"')
    work = tmp_path / "work"
    work.mkdir()
    (work / "mcp_seller.py").write_text(seller_py)
    (work / "pay_with_oauth.py").write_text(oauth_py)
    (tmp_path / "browser.py").write_text(BROWSER)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    shim = bin_dir / "svc-gateway"
    shim.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m svc_gateway.cli "$@"\n')
    shim.chmod(0o755)
    env = chat_env(tmp_path)
    env["PATH"] = os.pathsep.join([str(bin_dir), str(Path(sys.executable).parent), env["PATH"]])
    seller = await asyncio.create_subprocess_exec(
        "bash",
        "-euo",
        "pipefail",
        "-c",
        shell,
        cwd=work,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,  # the sandbox it starts in the background dies with it
    )
    try:
        assert seller.stdout is not None
        seen: list[str] = []
        listening = await line_with(seller.stdout, r"Paid MCP server: ", seen)
        url = f"http://127.0.0.1:{mcp_port}/mcp"
        assert url in listening
        verdict = await line_with(seller.stdout, r"^Paid MCP: ", seen)
        # the banner reads the registration: it says the agent lists the tool, and nothing
        # below tells the builder to register what is registered
        assert "lists mcp://my-agent/tools/ask: buyers can pay" in verdict, seen
        sandbox = json.loads((work / "sandbox.json").read_text())
        subscriber = sandbox["accounts"]["subscriber"]

        argv = shlex.split(command.strip())
        assert argv[:3] == [".venv/bin/python", "pay_with_oauth.py", "http://127.0.0.1:8403/mcp"]
        assert argv[3] == "ask"
        payer_env = {
            **env,
            "BROWSER": f"{shlex.quote(sys.executable)} {tmp_path / 'browser.py'} %s",
            "SVC_TEST_SUBSCRIBER_KEY": subscriber["apiKey"],
        }
        payer = await asyncio.create_subprocess_exec(
            sys.executable,
            argv[1],
            url,
            *argv[3:],
            cwd=work,
            env=payer_env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        out, err = await asyncio.wait_for(payer.communicate(), WAIT_SECS)
        assert payer.returncode == 0, err.decode()[-3000:]
        result = json.loads(out)
        assert result["structuredContent"] == {"answer": "You asked 1 words."}
        assert result["_meta"]["x402/payment-response"]["creditsRedeemed"] == "1"
        base = sandbox["baseUrl"]
        async with httpx.AsyncClient(base_url=base, timeout=30) as http:
            agents = await http.get(
                "/protocol/agents",
                headers={"Authorization": f"Bearer {sandbox['accounts']['builder']['apiKey']}"},
            )
            (agent,) = agents.json()["agents"]
            (plan,) = agent["registry"]["plans"] if "registry" in agent else agent["plans"]
            plan_id = plan if isinstance(plan, str) else plan.get("planId")
            ledger = (await http.get(f"/sandbox/ledger/{plan_id}/{subscriber['address']}")).json()
        # the consent let the token buy the plan once (100 credits) and one call burned one
        assert int(ledger["granted"]) == 100 and int(ledger["burned"]) == 1
        assert int(ledger["balance"]) == 99
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(seller.pid, signal.SIGTERM)
        _, stderr = await asyncio.wait_for(seller.communicate(), WAIT_SECS)
    assert b"Traceback" not in stderr, stderr.decode(errors="replace")[-3000:]
