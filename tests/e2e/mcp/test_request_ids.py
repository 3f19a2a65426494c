"""A paid ``tools/call`` sent as a notification (no id) is refused with 400 before the MCP SDK
sees it, so the SDK never logs the unspent payment; and whatever reaches the root logger
itself is redacted. Checked with a capture handler on the root logger at its default level,
against the sandbox (conservation on its ledger)."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from svc_gateway.selling.ways_in.mcp import Options
from tests.support import LogCollector

from .conftest import GRANTED, McpMarket, secret_forms

HEADERS = {"accept": "application/json, text/event-stream", "content-type": "application/json"}


@pytest.fixture
def root_capture() -> Iterator[LogCollector]:
    """A capture handler on the root logger, at the root's default level (WARNING)."""
    root = logging.getLogger()
    collector, level = LogCollector(), root.level
    root.setLevel(logging.WARNING)
    root.addHandler(collector)
    yield collector
    root.removeHandler(collector)
    root.setLevel(level)


async def session(http: httpx.AsyncClient, market: McpMarket, bearer: str) -> dict[str, str]:
    """An initialized MCP session over raw HTTP: the headers its next messages carry."""
    headers = {**HEADERS, "authorization": f"Bearer {bearer}"}
    hello = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "raw", "version": "0"},
        },
    }
    answer = await http.post(market.url, json=hello, headers=headers)
    assert answer.status_code == 200, answer.text
    headers["mcp-session-id"] = answer.headers["mcp-session-id"]
    ready = {"jsonrpc": "2.0", "method": "notifications/initialized"}
    assert (await http.post(market.url, json=ready, headers=headers)).status_code == 202
    return headers


async def test_a_paid_call_without_an_id_is_refused_400_and_its_payment_never_logged(
    mcp_market: McpMarket, root_capture: LogCollector
) -> None:
    ran: list[dict[str, Any]] = []

    def forecast(arguments: dict[str, Any]) -> str:
        ran.append(arguments)
        return "sunny"

    mcp_market.server.tool("forecast", forecast, options=Options(credits=2))
    token, meta = await mcp_market.payment("forecast")
    call = {"name": "forecast", "arguments": {"city": "Oslo"}, "_meta": meta}
    async with httpx.AsyncClient(timeout=30) as http:
        headers = await session(http, mcp_market, token)
        refused: list[Any] = [
            {"jsonrpc": "2.0", "method": "tools/call", "params": call},  # no id
            {"jsonrpc": "2.0", "id": None, "method": "tools/call", "params": call},
            [{"jsonrpc": "2.0", "method": "tools/call", "params": call}],  # in a batch
        ]
        answers = [await http.post(mcp_market.url, json=m, headers=headers) for m in refused]
        cancelled = {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {}}
        notified = await http.post(mcp_market.url, json=cancelled, headers=headers)
    for answer in answers:
        assert answer.status_code == 400, answer.text
        assert "is a request" in answer.json()["error"]["message"]
    assert notified.status_code == 202  # a real notification still reaches the SDK
    assert ran == []  # the tool never ran
    for form in secret_forms(token):
        assert form not in root_capture.text
    # the paid path still works with the same, unspent token, through the official client
    async with mcp_market.session(token) as client:
        result = await client.call_tool("forecast", {"city": "Oslo"}, meta)
    assert result["_meta"]["x402/payment-response"]["creditsRedeemed"] == "2"
    assert await mcp_market.balance() + 2 == GRANTED  # conservation: granted = balance + burned


async def test_a_record_logged_on_the_root_logger_itself_is_redacted(
    mcp_market: McpMarket, root_capture: LogCollector
) -> None:
    """What mcp 1.x does with a message it cannot validate: ``logging.warning(...)`` with the
    whole message, on the root logger itself (the ``mcp`` loggers' filters never see it)."""
    token, meta = await mcp_market.payment("forecast")
    logging.warning("Failed to validate notification: x. Message was: %s", {"params": meta})
    logging.warning(f"Message was: {meta}")  # as the SDK writes it (an f-string)
    assert "Failed to validate notification" in root_capture.text
    for form in secret_forms(token):
        assert form not in root_capture.text
    assert await mcp_market.balance() == GRANTED  # nothing charged: granted = balance + 0
