"""The docs' "Pay with OAuth (any MCP client)" recipe runs as written: the script, then its
command line (only the server's URL and the interpreter changed), against the sandbox and a paid
MCP server on loopback. The browser it opens is this test's: ``BROWSER`` names a small script
that submits the consent page's form with the subscriber's key, as a person would, and follows
the redirect to the recipe's callback."""

from __future__ import annotations

import asyncio
import json
import os
import shlex
import sys
from pathlib import Path
from typing import Any

import httpx

from svc_gateway.selling.ways_in.mcp import Options
from tests.docs_recipes import PAY_WITH_OAUTH, blocks

from ..mcp.conftest import GRANTED, McpMarketFactory

BROWSER = """
import os, re, sys
import httpx

url = sys.argv[1]
with httpx.Client(timeout=30) as http:
    page = http.get(url)
    request = re.search(r"name='request' value='([^']+)'", page.text).group(1)
    answer = http.post(
        url.split("?")[0],
        data={"request": request, "api_key": os.environ["SVC_TEST_SUBSCRIBER_KEY"],
              "decision": os.environ.get("SVC_TEST_DECISION", "approve")},
    )
    assert answer.status_code == 302, answer.text
    http.get(answer.headers["location"])
"""


async def run_recipe(
    make_mcp_market: McpMarketFactory, tmp_path: Path, decision: str
) -> tuple[int, str, str, Any, dict[str, str]]:
    (_, script), (_, command) = blocks(PAY_WITH_OAUTH)
    market = await make_mcp_market()

    async def ask(arguments: dict[str, Any]) -> dict[str, Any]:
        return {"answer": f"you said {arguments['prompt']}"}

    market.server.tool(
        "ask",
        ask,
        input_schema={"type": "object", "properties": {"prompt": {"type": "string"}}},
        options=Options(credits=3),
    )
    subscriber = await market.sandbox.create_account("oauth subscriber")
    market.secrets.append(subscriber["apiKey"])
    (tmp_path / "pay_with_oauth.py").write_text(script)
    (tmp_path / "browser.py").write_text(BROWSER)
    argv = shlex.split(command.strip())
    assert argv[:2] == [".venv/bin/python", "pay_with_oauth.py"], argv
    assert argv[2].endswith("/mcp")
    argv = [sys.executable, argv[1], market.url, *argv[3:]]
    env = {
        **os.environ,
        "BROWSER": f"{shlex.quote(sys.executable)} {tmp_path / 'browser.py'} %s",
        "SVC_TEST_SUBSCRIBER_KEY": subscriber["apiKey"],
        "SVC_TEST_DECISION": decision,
    }
    process = await asyncio.create_subprocess_exec(
        *argv,
        cwd=tmp_path,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(process.communicate(), 90)
    assert process.returncode is not None
    return process.returncode, out.decode(), err.decode(), market, subscriber


async def test_the_pay_with_oauth_recipe_pays_one_call(
    make_mcp_market: McpMarketFactory, tmp_path: Path
) -> None:
    code, out, err, market, subscriber = await run_recipe(make_mcp_market, tmp_path, "approve")
    assert code == 0, err[-3000:]
    result = json.loads(out)
    assert result["structuredContent"] == {"answer": "you said hello"}
    assert result["_meta"]["x402/payment-response"]["creditsRedeemed"] == "3"
    async with httpx.AsyncClient(base_url=market.sandbox.base_url) as http:
        view = (await http.get(f"/sandbox/ledger/{market.plan_id}/{subscriber['address']}")).json()
    assert int(view["burned"]) == 3
    assert int(view["granted"]) == GRANTED == int(view["balance"]) + int(view["burned"])


async def test_denying_on_the_consent_page_pays_nothing(
    make_mcp_market: McpMarketFactory, tmp_path: Path
) -> None:
    code, _out, err, market, subscriber = await run_recipe(make_mcp_market, tmp_path, "deny")
    assert code != 0 and "access_denied" in err
    async with httpx.AsyncClient(base_url=market.sandbox.base_url) as http:
        view = (await http.get(f"/sandbox/ledger/{market.plan_id}/{subscriber['address']}")).json()
    assert int(view["granted"]) == 0 and int(view["burned"]) == 0
