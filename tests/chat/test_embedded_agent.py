"""Issue 14: the embedded chat serves its own paid agent, so a newcomer can buy from it."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

from tests.chat.test_cli import WAIT_SECS, chat_env

TRY = "Try: svc_queryAgent "


async def _read_until(stream: asyncio.StreamReader, marker: str) -> list[str]:
    lines: list[str] = []
    while True:
        raw = await asyncio.wait_for(stream.readline(), WAIT_SECS)
        assert raw, f"EOF before {marker!r}: {lines}"
        lines.append(raw.decode().rstrip("\n"))
        if lines[-1].startswith(marker):
            return lines


async def test_a_piped_chat_session_buys_from_the_embedded_agent(tmp_path: Path) -> None:
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
    banner = await _read_until(child.stdout, TRY)
    try_line = banner[-1]
    params = json.loads(try_line.removeprefix(TRY))
    assert params["prompt"] == "hello"
    assert params["agentUrl"].startswith("http://127.0.0.1:")
    assert params["agentUrl"].endswith("/svc/agent")
    assert any(params["agentUrl"] in line and "sells answers" in line for line in banner)
    assert any("/svc_allow 2 USD per day" in line for line in banner)
    script = [
        "svc_orderPlan {}",
        'svc_orderPlan {"confirm": true}',
        "/svc_allow 2 USD per day",
        try_line.removeprefix("Try: "),
        "svc_checkBalance {}",
    ]
    out, err = await asyncio.wait_for(
        child.communicate(("\n".join(script) + "\n").encode()), WAIT_SECS
    )
    assert child.returncode == 0, err.decode()
    text = out.decode()
    answers = _json_blocks(text)
    quote, pending, query, balance = answers[-4:]
    assert quote["confirmRequired"] is True and "Nothing was bought" in quote["message"]
    assert pending["approvalRequired"] is True  # the person's code, never the model's confirm
    assert "Allowed: paid queries" in text
    assert query["receipt"]["creditsRedeemed"] in ("1", 1)
    assert query["answer"] and query["topUp"]  # bought within the mandate, and said so
    assert balance["balance"] == "99"
    assert "Traceback" not in err.decode()


def _json_blocks(text: str) -> list[dict[str, object]]:
    """The indented JSON objects the reference chat prints, in order."""
    decoder = json.JSONDecoder()
    found: list[dict[str, object]] = []
    index = 0
    while (start := text.find("{\n", index)) != -1:
        value, end = decoder.raw_decode(text, start)
        if isinstance(value, dict):
            found.append(value)
        index = end
    return found
