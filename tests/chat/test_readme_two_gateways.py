"""docs/selling.md's "Sell in one gateway, buy from another" runs as written: two chats, two JSON
configs, one sandbox, on free ports (the page's fixed port 8402 is replaced by a free one)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.chat.test_cli import WAIT_SECS, chat_env
from tests.chat.test_embedded_agent import _json_blocks
from tests.docs_recipes import TWO_GATEWAYS
from tests.docs_recipes import blocks as recipe_blocks


def blocks() -> list[tuple[str, str]]:
    """(language, text) of every fenced block in the section, in order."""
    return recipe_blocks(TWO_GATEWAYS)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_the_section_has_two_terminals_and_two_chats() -> None:
    kinds = [kind for kind, _ in blocks()]
    assert kinds == ["bash", "text", "bash", "text"]
    seller, _, buyer, _ = (text for _, text in blocks())
    assert '"enablePaidEndpoint": true' in seller and "--config seller.json" in seller
    assert "--config buyer.json" in buyer


async def _line_with(stream: asyncio.StreamReader, pattern: str, seen: list[str]) -> re.Match[str]:
    while True:
        raw = await asyncio.wait_for(stream.readline(), WAIT_SECS)
        assert raw, f"EOF before {pattern!r}: {seen[-30:]}"
        seen.append(raw.decode())
        if match := re.search(pattern, seen[-1]):
            return match


@pytest.mark.skipif(shutil.which("bash") is None, reason="bash is not installed")
async def test_sell_in_one_gateway_and_buy_from_another(tmp_path: Path) -> None:
    port = str(free_port())
    (seller_sh, seller_chat), (buyer_sh, buyer_chat) = [
        (sh.replace("8402", port), chat.replace("8402", port))
        for sh, chat in zip(*[iter(text for _, text in blocks())] * 2, strict=True)
    ]
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    shim = bin_dir / "svc-gateway"
    shim.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m svc_gateway.cli "$@"\n')
    shim.chmod(0o755)
    env = chat_env(tmp_path)
    env["PATH"] = os.pathsep.join([str(bin_dir), str(Path(sys.executable).parent), env["PATH"]])
    work = tmp_path / "work"
    work.mkdir()

    async def bash(script: str) -> asyncio.subprocess.Process:
        return await asyncio.create_subprocess_exec(
            "bash",
            "-euo",
            "pipefail",
            "-c",
            script,
            cwd=work,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,  # the sandbox it starts in the background dies with it
        )

    seller = await bash(seller_sh)
    try:
        assert seller.stdin is not None and seller.stdout is not None
        seen: list[str] = []
        await _line_with(seller.stdout, r"reference chat", seen)
        seller.stdin.write(seller_chat.encode())
        await seller.stdin.drain()
        plan_id = (await _line_with(seller.stdout, r'"planId": "(\d+)"', seen)).group(1)
        assert (work / "seller.json").exists()

        buyer = await bash(buyer_sh)
        script = buyer_chat.replace("<planId>", plan_id).encode()
        out, err = await asyncio.wait_for(buyer.communicate(script), WAIT_SECS)
        text = out.decode()
        assert buyer.returncode == 0, err.decode()
        pending, quote, answer, balance = _json_blocks(text)
        assert pending["approvalRequired"] is True and pending["pending"]["planId"] == plan_id
        assert "buying the plan first" in pending["message"]
        assert quote["confirmRequired"] is True and "Allowed: paid queries" in text
        assert answer["receipt"]["creditsRedeemed"] in ("1", 1) and answer["topUp"]
        assert balance["balance"] == "9"
    finally:
        if seller.stdin is not None:
            seller.stdin.close()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(seller.pid, signal.SIGTERM)
        await asyncio.wait_for(seller.wait(), WAIT_SECS)
