"""A paid svc_queryAgent under a person's mandate whose agent fails after charging: the mandate
counts what the ledger burned (the balance read back), or, when the balance cannot be read
back, the whole reservation, so the person's limit is never exceeded. Over loopback against
the sandbox, the ledger as truth."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from aiohttp import web

from svc_gateway.buying.approval import answer_text
from svc_gateway.encoding import decode_access_token
from svc_gateway.service.client import ServiceClient
from svc_gateway.service.models import (
    Accept,
    AgentApi,
    AgentMetadata,
    PaymentRequirement,
    Resource,
)
from tests.buying.test_query import fake_agent, good_card
from tests.helpers import approve
from tests.support.market import Market, MarketFactory, refuse_500

from .test_approvals import HUMAN, conserved, ledger, pending_order

# 20 credits for 20 USDC, 1 to 2 credits a request: each query reserves $2 of the mandate
PLAN = {
    "name": "Dollar credits",
    "priceAmounts": [20_000_000],
    "tokenAddress": "0x036CbD53842c5426634e7929541eC2318f3dCF7e",
    "creditsAmount": 20,
    "minCreditsPerRequest": 1,
    "maxCreditsPerRequest": 2,
}


async def burn_one_credit(market: Market, token: str) -> None:
    """What a misbehaving agent does with the buyer's token: settle 1 credit with the service."""
    decoded = decode_access_token(token)
    assert decoded is not None
    accepted = decoded["accepted"]
    envelope = PaymentRequirement(
        resource=Resource(url=decoded["resource"]["url"]),
        accepts=[
            Accept(
                scheme=accepted["scheme"],
                network=accepted["network"],
                plan_id=accepted["planId"],
                extra=accepted["extra"],
            )
        ],
    )
    client = ServiceClient(market.server.base_url, market.builder_key)
    try:
        settled = await client.settle(envelope, token, 1, None)
    finally:
        await client.aclose()
    assert settled.success, settled


def through_proxy(market: Market) -> dict[str, Any]:
    """The buyer's plugin reaches the service through the market's fault proxy."""
    assert market.transport is not None
    return {**HUMAN, "baseUrl": market.transport.base_url}


async def sell_and_allow(market: Market, agent: Any, name: str) -> Any:
    """The plan sold at ``agent`` (1 to 2 credits a request), ordered by the person's own
    ``/svc_approve``, and their "5 USD per day" mandate; the buyer's gateway."""
    result = await market.builder_gw.call_tool("svc_createPlan", PLAN)
    assert not result.isError, result.structuredContent
    market.plan_id = str(result.structuredContent["planId"])
    client = ServiceClient(market.server.base_url, market.builder_key)
    try:
        market.agent_id = await client.register_agent(
            AgentMetadata(name=name), AgentApi(endpoints=[{"POST": agent.url}]), [market.plan_id]
        )
    finally:
        await client.aclose()
    agent.card = good_card(market)
    gw = market.subscriber_gw
    approved = await approve(gw, await pending_order(gw, market.plan_id))
    assert approved.startswith("Approved"), approved
    assert (await gw.run_command("svc_allow", "5 USD per day")).startswith("Allowed")
    return gw


async def charged_then_failed(
    make_market: MarketFactory, after_charge: Callable[[Market], None]
) -> tuple[Market, str]:
    """A person's $5 a day mandate pays a query whose agent burns 1 credit of the 2 reserved,
    runs ``after_charge``, then answers 500; the mandate's line of /svc_allow after it."""
    market = await make_market(register_agent=False, faults=True, subscriber_config=through_proxy)

    async def answer(request: web.Request) -> web.StreamResponse:
        await burn_one_credit(market, request.headers.get("payment-signature", ""))
        after_charge(market)
        raise web.HTTPInternalServerError()

    async with fake_agent(None, answer) as agent:
        gw = await sell_and_allow(market, agent, "Charging agent")
        failed = await gw.call_tool(
            "svc_queryAgent", {"agentUrl": agent.url, "prompt": "hi", "planId": market.plan_id}
        )
        assert failed.isError and len(agent.posts) == 1, failed.text
    return market, await gw.run_command("svc_allow", "")


async def test_a_failed_paid_query_counts_what_the_ledger_burned_against_the_mandate(
    make_market: MarketFactory,
) -> None:
    market, mandate = await charged_then_failed(make_market, lambda _m: None)
    assert "4.00 USD left today" in mandate, mandate  # $1 burned, not the $2 reserved
    book = await ledger(market)
    assert (book["granted"], book["burned"], book["balance"]) == (20, 1, 19) and conserved(book)


async def test_a_balance_that_cannot_be_read_back_keeps_the_whole_reservation_counted(
    make_market: MarketFactory,
) -> None:
    def balance_down(market: Market) -> None:
        assert market.transport is not None
        path = f"protocol/plans/{market.plan_id}/balance/{market.subscriber_address}"
        market.transport.always[path] = refuse_500

    market, mandate = await charged_then_failed(make_market, balance_down)
    assert "3.00 USD left today" in mandate, mandate  # fail safe: all $2 counted
    assert market.transport is not None
    market.transport.always.clear()
    book = await ledger(market)
    assert (book["granted"], book["burned"], book["balance"]) == (20, 1, 19) and conserved(book)


async def test_a_query_whose_token_is_never_minted_gives_the_mandate_back_whole(
    make_market: MarketFactory,
) -> None:
    """The service refuses to mint the query's token (x402/permissions answers 500) after the
    mandate reserved the query's $2: the token never went out, so nothing is counted."""
    market = await make_market(register_agent=False, faults=True, subscriber_config=through_proxy)

    async def answer(_request: web.Request) -> web.StreamResponse:
        raise AssertionError("no token was minted: the agent is never asked")

    async with fake_agent(None, answer) as agent:
        gw = await sell_and_allow(market, agent, "Never paid")
        assert market.transport is not None
        market.transport.always["x402/permissions"] = refuse_500
        failed = await gw.call_tool(
            "svc_queryAgent", {"agentUrl": agent.url, "prompt": "hi", "planId": market.plan_id}
        )
        market.transport.always.clear()
        assert failed.isError and agent.posts == [], failed.text
    mandate = await gw.run_command("svc_allow", "")
    assert "5.00 USD left today" in mandate, mandate
    book = await ledger(market)
    assert (book["granted"], book["burned"], book["balance"]) == (20, 0, 20) and conserved(book)


def test_an_approved_answer_is_shown_to_the_person_as_text_whatever_its_shape() -> None:
    """A plain text answer, a JSON answer naming its ``answer`` and any other JSON object reach
    the person as readable text, with what it cost."""
    receipt = {"creditsRedeemed": "1"}
    plain = answer_text({"answer": "hello", "receipt": receipt, "agentId": "a"})
    assert "hello" in plain and "(paid 1 credit;" in plain and "1 credits" not in plain
    named = answer_text({"answer": {"answer": "inside"}, "receipt": receipt})
    assert named.splitlines()[1] == "inside"
    other = answer_text({"answer": {"days": [1, 2]}, "receipt": receipt})
    assert other.splitlines()[1] == '{"days": [1, 2]}'
