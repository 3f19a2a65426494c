"""The README's 30-second tour works as typed: the embedded chat's banner names the demo agent, and
the tour's lines (with that agent's port) allow a daily amount and buy one answer (the plan bought
within it), leaving 99 credits."""

from __future__ import annotations

import asyncio
import re
import subprocess
import sys
from pathlib import Path

from tests.chat.test_cli import WAIT_SECS, chat_env
from tests.chat.test_embedded_agent import _json_blocks
from tests.docs_recipes import README_TOUR, blocks

TRY = "Try: svc_queryAgent "


async def test_the_tour_buys_the_demo_plan_and_one_answer(tmp_path: Path) -> None:
    ((_, tour),) = blocks(README_TOUR)
    assert "<port>" in tour
    child = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "svc_gateway.cli",
        "chat",
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=chat_env(tmp_path),
    )
    assert child.stdin is not None and child.stdout is not None
    banner: list[str] = []
    while not banner or not banner[-1].startswith(TRY):
        raw = await asyncio.wait_for(child.stdout.readline(), WAIT_SECS)
        assert raw, f"EOF before the banner's {TRY!r} line: {banner}"
        banner.append(raw.decode())
    port = re.search(r'"agentUrl": "http://127\.0\.0\.1:(\d+)/svc/agent"', banner[-1])
    assert port is not None, banner[-1]
    out, err = await asyncio.wait_for(
        child.communicate((tour.replace("<port>", port.group(1)) + "/context\n").encode()),
        WAIT_SECS,
    )
    assert child.returncode == 0, err.decode()
    text = out.decode()
    (query,) = _json_blocks(text)
    assert "Allowed: paid queries" in text
    assert query["topUp"]  # the demo plan, bought within the mandate and named
    assert query["receipt"]["creditsRedeemed"] in ("1", 1)
    assert query["balanceAfter"] == "99"
    first, last = re.findall(r"\): (\d+) credits", text)
    assert (first, last) == ("0", "99")
