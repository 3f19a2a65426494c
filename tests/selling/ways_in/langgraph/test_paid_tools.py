"""Paid LangChain tools (``requires_payment`` under ``@tool``), the token taken from the run's
``configurable``, against the local sandbox: each call verified, run and settled through the one
paid flow, its own receipt in the ToolMessage's artifact; a tool that raises is not charged; no
token is refused with the x402 envelope. Async all the way: the tests depend on the LangGraph
server fixture, so the blocking-call detector is on for every call (conftest.py).

(No ``from __future__ import annotations`` here: LangChain reads the tool's ``config:
RunnableConfig`` hint from the function's own module to inject the run's config.)"""

from typing import Any

import pytest
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import tool

from svc_gateway.selling.ways_in.langgraph.tools import PaymentRequiredError, requires_payment
from svc_gateway.service.seller import Payments
from tests.support.sellers import Seller, SellerFactory

from .conftest import LangGraphServer
from .test_runs_wait import conserved


def call(args: dict[str, Any]) -> dict[str, Any]:
    return {"type": "tool_call", "name": "forecast", "args": args, "id": "call-1"}


async def test_each_call_is_sold_with_its_own_receipt_and_failures_are_free(
    make_seller: SellerFactory, langgraph_server: LangGraphServer
) -> None:
    seller: Seller = await make_seller()
    payments = Payments.connect(
        seller.builder_key, environment="local", base_url=seller.sandbox.base_url
    )
    seen: list[dict[str, Any]] = []

    @tool(response_format="content_and_artifact")
    @requires_payment(
        payments, plan_id=seller.dynamic_plan, agent_id=seller.dynamic_agent, credits=3
    )
    async def forecast(city: str, config: RunnableConfig) -> str:
        """The weather in a city."""
        seen.append(dict(config.get("configurable") or {}))
        if city == "nowhere":
            raise RuntimeError("no such city")
        return f"sunny in {city}"

    token = await seller.token(seller.dynamic_plan, seller.dynamic_agent)
    paid = {"configurable": {"payment_token": token, "thread_id": "t-1"}}
    try:
        first = await forecast.ainvoke(call({"city": "Paris"}), config=paid)
        second = await forecast.ainvoke(call({"city": "Lyon"}), config=paid)
        with pytest.raises(RuntimeError, match="no such city"):
            await forecast.ainvoke(call({"city": "nowhere"}), config=paid)
        with pytest.raises(PaymentRequiredError) as unpaid:
            await forecast.ainvoke(call({"city": "Nice"}), config={"configurable": {}})
    finally:
        await payments.aclose()
    assert first.content == "sunny in Paris" and second.content == "sunny in Lyon"
    receipts = [message.artifact["payment_response"] for message in (first, second)]
    assert [r["creditsRedeemed"] for r in receipts] == ["3", "3"]
    assert [r["remainingBalance"] for r in receipts] == ["17", "14"]  # each call its own
    assert all("payment_token" not in configurable for configurable in seen)
    assert seen[0]["thread_id"] == "t-1"
    envelope = unpaid.value.payment_required
    assert envelope is not None and envelope["accepts"][0]["planId"] == seller.dynamic_plan
    assert len(seen) == 3  # the unpaid call never ran
    assert (await conserved(seller, seller.dynamic_plan))["burned"] == 6


def test_a_sync_tool_is_refused_at_decoration() -> None:
    payments = Payments.connect(None, environment="local", base_url="http://127.0.0.1:9/api/v1")

    def blocking(city: str) -> str:
        return city

    with pytest.raises(TypeError, match="async def"):
        requires_payment(payments, plan_id="p-1")(blocking)  # type: ignore[arg-type]
