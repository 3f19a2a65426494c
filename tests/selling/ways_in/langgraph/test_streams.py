"""A paid stream (``POST /runs/stream``) through our ASGI middleware, read with LangGraph's own
SSE client (``langgraph_sdk``): verified and its credits held before the first byte, the events
streamed through as the graph makes them (not buffered), the receipt in a last
``event: payment-response``; a graph that fails mid-stream is not charged
(``event: payment-error``); an unpaid stream is a 402 before any event."""

from __future__ import annotations

import time
from typing import Any

import httpx
import pytest
from langgraph_sdk import get_client

from svc_gateway.encoding import decode_b64_json
from svc_gateway.selling.ways_in.langgraph import RouteConfig
from tests.support.sellers import Seller, SellerFactory

from .conftest import LangGraphServer, Sell
from .test_runs_wait import conserved


def stream_routes(seller: Seller) -> dict[str, Any]:
    return {
        "POST /runs/stream": RouteConfig(plan_id=seller.fixed_plan, agent_id=seller.fixed_agent)
    }


async def read_stream(origin: str, token: str | None, graph: str) -> list[tuple[float, str, Any]]:
    headers = {"payment-signature": token} if token else {}
    client = get_client(url=origin, headers=headers, api_key=None)
    parts: list[tuple[float, str, Any]] = []
    try:
        async for part in client.runs.stream(
            None, graph, input={"message": "hi"}, stream_mode="updates"
        ):
            parts.append((time.monotonic(), part.event, part.data))
    finally:
        await client.aclose()
    return parts


async def test_a_paid_stream_streams_through_and_ends_with_its_receipt(
    make_seller: SellerFactory, sell: Sell, langgraph_server: LangGraphServer
) -> None:
    seller: Seller = await make_seller()
    sell(seller, stream_routes(seller))
    token = await seller.token(seller.fixed_plan, seller.fixed_agent)
    parts = await read_stream(langgraph_server.origin, token, "slow")
    events = [event for _, event, _ in parts]
    assert events[0] == "metadata" and events[-1] == "payment-response"
    updates = [(at, data) for at, event, data in parts if event == "updates"]
    assert [next(iter(data)) for _, data in updates] == ["a", "b", "c"]
    # streamed as the nodes ran (50 ms apart), not delivered in one block at the end
    assert updates[-1][0] - updates[0][0] >= 0.08
    receipt = parts[-1][2]
    assert receipt["success"] is True and receipt["creditsRedeemed"] == "2"
    assert receipt["remainingBalance"] == "8"
    assert (await conserved(seller, seller.fixed_plan))["burned"] == 2


async def test_a_stream_whose_graph_fails_is_not_charged(
    make_seller: SellerFactory, sell: Sell, langgraph_server: LangGraphServer
) -> None:
    seller: Seller = await make_seller()
    sell(seller, stream_routes(seller))
    token = await seller.token(seller.fixed_plan, seller.fixed_agent)
    parts = await read_stream(langgraph_server.origin, token, "boom")
    events = [event for _, event, _ in parts]
    assert "error" in events and events[-1] == "payment-error"
    assert "nothing was charged" in parts[-1][2]["reason"]
    assert (await conserved(seller, seller.fixed_plan))["burned"] == 0


async def test_an_unpaid_stream_is_402_before_any_event(
    make_seller: SellerFactory, sell: Sell, langgraph_server: LangGraphServer
) -> None:
    seller: Seller = await make_seller()
    sell(seller, stream_routes(seller))
    with pytest.raises(httpx.HTTPStatusError) as refused:
        await read_stream(langgraph_server.origin, None, "slow")
    assert refused.value.response.status_code == 402
    envelope = decode_b64_json(refused.value.response.headers["payment-required"])
    assert envelope is not None and envelope["accepts"][0]["planId"] == seller.fixed_plan


async def test_a_retried_stream_gets_its_receipt_not_a_second_run(
    make_seller: SellerFactory, sell: Sell, langgraph_server: LangGraphServer
) -> None:
    """A stream went to its buyer as it came, so its idempotency key keeps the receipt alone:
    the retry with the same key is 410 with the receipt, no second run, nothing more burned."""
    seller: Seller = await make_seller()
    sell(seller, stream_routes(seller))
    token = await seller.token(seller.fixed_plan, seller.fixed_agent)
    headers = {"payment-signature": token, "Idempotency-Key": "stream-0001-retry-safe"}
    body = {"assistant_id": "echo", "input": {"message": "hi"}, "stream_mode": "updates"}
    async with httpx.AsyncClient(base_url=langgraph_server.origin, timeout=30) as http:
        first = await http.post("/runs/stream", json=body, headers=headers)
        retry = await http.post("/runs/stream", json=body, headers=headers)
    assert first.status_code == 200 and "event: payment-response" in first.text
    assert retry.status_code == 410, retry.text
    note = retry.json()
    assert note["error"] == "idempotency_answer_not_kept" and "streamed" in note["message"]
    assert note["receipt"]["creditsRedeemed"] == "2"
    assert (await conserved(seller, seller.fixed_plan))["burned"] == 2
