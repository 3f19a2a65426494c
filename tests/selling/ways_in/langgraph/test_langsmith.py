"""LangSmith runs of the paid requests, received on a loopback stand-in of LangSmith's ingest
endpoint (:mod:`.langsmith_stub`): with LangSmith's switch on, one ``svc:x402-request`` per gated
request with ``svc:verify`` and ``svc:settlement`` children and SPEC's ``svc.*`` metadata; a
refused token marks the parent and verify failed; a settle that fails after the run marks only
the settlement run; no key and no full token in anything sent."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from langsmith import Client, utils

from svc_gateway.selling.ways_in.langgraph import RouteConfig
from svc_gateway.selling.ways_in.langgraph.langsmith_runs import use_langsmith_client
from tests.e2e.test_state_table import tamper
from tests.support.market import FaultProxy, refuse_500
from tests.support.sellers import Seller, SellerFactory

from .conftest import LangGraphServer, Sell
from .langsmith_stub import LangSmithStub
from .test_runs_wait import ECHO, paid


@pytest.fixture
def langsmith(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[LangSmithStub, Client]]:
    stub = LangSmithStub()
    for name, value in {
        "LANGSMITH_TRACING": "true",
        "LANGSMITH_ENDPOINT": stub.url,  # LangGraph's own runs (the graph's) go here too
        "LANGSMITH_API_KEY": "ls-dummy-key",
        "LANGSMITH_DISABLE_RUN_COMPRESSION": "true",
    }.items():
        monkeypatch.setenv(name, value)
    utils.get_env_var.cache_clear()  # LangSmith reads each variable once, then keeps it
    client = Client(api_url=stub.url, api_key="ls-dummy-key")
    use_langsmith_client(client)
    try:
        yield stub, client
    finally:
        use_langsmith_client(None)
        monkeypatch.undo()
        utils.get_env_var.cache_clear()
        stub.close()


def by_trace(runs: dict[str, dict[str, Any]]) -> list[dict[str, dict[str, Any]]]:
    """Each ``svc:x402-request`` with its children, by name."""
    traces = []
    for run in runs.values():
        if run.get("name") == "svc:x402-request":
            children = {
                child["name"]: child
                for child in runs.values()
                if str(child.get("parent_run_id")) == str(run["id"])
            }
            traces.append({"request": run, **children})
    return traces


async def test_paid_and_refused_requests_send_their_runs(
    make_seller: SellerFactory,
    sell: Sell,
    langgraph_server: LangGraphServer,
    langsmith: tuple[LangSmithStub, Client],
) -> None:
    stub, client = langsmith
    seller: Seller = await make_seller()
    proxy = FaultProxy(seller.sandbox.origin)
    await proxy.start()
    try:
        sell(
            seller,
            {
                "POST /runs/wait": RouteConfig(
                    plan_id=seller.fixed_plan, agent_id=seller.fixed_agent
                )
            },
            base_url=proxy.base_url,
        )
        token = await seller.token(seller.fixed_plan, seller.fixed_agent)
        async with httpx.AsyncClient(base_url=langgraph_server.origin, timeout=30) as http:
            good = await http.post("/runs/wait", json=ECHO, headers=paid(token))
            bad = await http.post("/runs/wait", json=ECHO, headers=paid(tamper(token)))
            proxy.faults["x402/settle"] = [refuse_500] * 3
            unsettled = await http.post("/runs/wait", json=ECHO, headers=paid(token))
        assert [good.status_code, bad.status_code, unsettled.status_code] == [200, 402, 200]
        assert "payment-response" not in unsettled.headers
        await asyncio.to_thread(client.flush)
    finally:
        await proxy.close()
    traces = by_trace(stub.runs())
    assert len(traces) == 3
    paid_trace, refused, deferred = sorted(traces, key=lambda t: t["request"]["start_time"])
    request, verify, settle = (
        paid_trace["request"],
        paid_trace["svc:verify"],
        paid_trace["svc:settlement"],
    )
    assert request["run_type"] == "chain" and verify["run_type"] == "tool"
    meta = request["metadata"]
    assert meta["svc.plan_id"] == seller.fixed_plan
    assert meta["svc.scheme"] == "svc:erc4337" and meta["svc.network"] == "eip155:84532"
    assert meta["svc.payer"] == seller.buyer_address
    assert meta["svc.credits_redeemed"] == 2 and meta["svc.balance_after"] == 8
    assert meta["svc.transaction"].startswith("0x")
    assert meta["svc.token"] == f"{token[:4]}…{token[-4:]}"
    assert meta["svc.verify_ms"] > 0 and meta["svc.settle_ms"] > 0
    assert verify["metadata"]["svc.payer"] == seller.buyer_address
    assert settle["metadata"]["svc.credits_redeemed"] == 2
    assert not request.get("error") and not verify.get("error") and not settle.get("error")
    # a refused token: the parent and verify failed, no settlement
    assert refused["request"].get("error") and refused["svc:verify"].get("error")
    assert "svc:settlement" not in refused
    # a settle that failed after the run: only the settlement run is marked
    assert deferred["svc:settlement"].get("error") and not deferred["request"].get("error")
    sent = b"".join(stub.raw).decode(errors="replace")
    assert token not in sent and seller.builder_key not in sent and seller.buyer_key not in sent
