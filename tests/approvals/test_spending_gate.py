"""Issue 41: one spending gate. Over loopback against the sandbox (its ledger, orders and
delegations as truth): a top-up is charged to the mandate and no delegation can spend past
what its ticket reserved; the person sees what a code buys from the plugin before money moves;
a mandate store that refuses answers in words and allows nothing. Each money test ends with
conservation (granted = balance + burned) and the buyer's wallet (plans bought = orders, each
within a mandate or approved)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from svc_gateway import register
from svc_gateway.account.credentials import CredentialStore
from svc_gateway.hosts.reference import ReferenceGateway
from tests.helpers import approve, confirmation
from tests.support.market import Market, MarketFactory
from tests.support.redis_server import RedisServer

from .test_approval_ledgers import refusing_url
from .test_approvals import (
    HUMAN,
    conserved,
    delegation_rows,
    ledger,
    orders,
    pending_order,
    query,
)


async def four_dollar_market(make_market: MarketFactory) -> Market:
    """A plan selling 10 credits for 4 USDC, 1 credit per answer (40 cents); the subscriber
    holds none, so their first paid answer buys the plan (automatic top-up)."""
    market = await make_market(register_agent=False, subscriber_config=lambda _m: dict(HUMAN))
    result = await market.builder_gw.call_tool(
        "svc_registerAgent",
        {
            "name": "Four-dollar agent",
            "agentUrl": market.endpoint.url,
            "planName": "Four-dollar credits",
            "priceAmounts": [4_000_000],
            "tokenAddress": "0x036CbD53842c5426634e7929541eC2318f3dCF7e",
            "creditsAmount": 10,
            "creditsPerRequest": 1,
        },
    )
    assert not result.isError, result.structuredContent
    market.plan_id = str(result.structuredContent["planId"])
    market.agent_id = str(result.structuredContent["agentId"])
    return market


async def test_a_top_up_is_charged_to_the_mandate_and_no_delegation_outspends_its_ticket(
    make_market: MarketFactory,
) -> None:
    """Item 2. Under 5 USD a day with no credits held, the first answer reserves its credit
    (0.40) plus the plan's price (4.00): its token's delegation can pay that one top-up (400
    cents, one settle) and the mandate is charged 4.40. The next answer needs no top-up: its
    delegation can buy nothing (1 cent) and it costs 0.40. The third would pass what is left
    (0.20): it asks. 4 USDC left the wallet, within the 5 allowed."""
    market = await four_dollar_market(make_market)
    gw = market.subscriber_gw
    assert (await gw.run_command("svc_allow", "5 USD per day")).startswith("Allowed")
    first = (await gw.call_tool("svc_queryAgent", query(market, "one"))).structuredContent
    assert "answer" in first and first["topUp"], first
    [row] = await delegation_rows(market)
    assert (int(row["spendingLimitCents"]), row["maxTransactions"]) == (400, 1)
    assert "0.60 USD left today" in await gw.run_command("svc_allow", "")
    second = (await gw.call_tool("svc_queryAgent", query(market, "two"))).structuredContent
    assert "answer" in second and "topUp" not in second, second
    newest = (await delegation_rows(market))[0]
    assert (int(newest["spendingLimitCents"]), newest["maxTransactions"]) == (1, 1)
    assert "0.20 USD left today" in await gw.run_command("svc_allow", "")
    third = (await gw.call_tool("svc_queryAgent", query(market, "three"))).structuredContent
    assert third["approvalRequired"] is True
    assert await orders(market) == 1  # the wallet: one plan bought, 4 USDC, within 5 USD
    book = await ledger(market)
    assert (book["granted"], book["burned"], book["balance"]) == (10, 2, 8) and conserved(book)


async def test_the_person_sees_what_a_code_buys_from_the_plugin_before_money_moves(
    make_market: MarketFactory,
) -> None:
    """Item 4. The model asks for a 4 USDC order and tells the person the code is for
    something cheap: ``/svc_approve <code>`` alone buys nothing and answers with the plugin's
    own summary (plan, amount, who is paid); only the confirmation word that summary carried
    buys it; ``/svc_approve`` alone lists what waits, with amounts."""
    market = await four_dollar_market(make_market)
    gw = market.subscriber_gw
    code = await pending_order(gw, market.plan_id)
    listed = await gw.run_command("svc_approve", "")
    assert code in listed and "4.00 USD" in listed
    shown = await gw.run_command("svc_approve", code)
    assert "Nothing is paid yet" in shown and "4.00 USD" in shown
    assert '"Four-dollar credits"' in shown and market.builder_address.lower() in shown.lower()
    assert await orders(market) == 0  # looking buys nothing
    confirm = confirmation(shown)
    assert confirm is not None
    guessed = await gw.run_command("svc_approve", f"{code} WXYZ")
    assert "nothing was bought" in guessed and await orders(market) == 0
    # the guess voided the word shown: the person looks again, then confirms
    assert (await approve(gw, code)).startswith("Approved: bought plan")
    assert await orders(market) == 1 and conserved(await ledger(market))
    assert (await gw.run_command("svc_approve", "")).startswith("Nothing waits")


async def test_a_mandate_store_that_refuses_answers_in_words_and_allows_nothing(
    make_market: MarketFactory, redis_server: RedisServer, tmp_path: Path
) -> None:
    """Item 5. The mandates' Redis refuses (a wrong password): ``/svc_allow`` set, list and
    off answer in words (nothing changed, nothing paid), and a paid query is refused, never
    paid without the mandate it could not check."""
    market = await make_market(subscriber_config=lambda _m: dict(HUMAN))
    await market.order()  # credits held: a query would need no top-up
    url = await refusing_url(redis_server, "wrong-password")
    replica = ReferenceGateway(
        {
            "environment": "local",
            "baseUrl": market.server.base_url,
            "approval": "human",
            "stateUrl": url,
        }
    )
    store = CredentialStore(tmp_path / "replica", use_keyring=False)
    handle = await asyncio.to_thread(register, replica, store=store)
    try:
        assert (await replica.run_command("svc_login", market.subscriber_key)).startswith(
            "Logged in"
        )
        for args in ("5 USD per day", "", "off"):
            reply = await replica.run_command("svc_allow", args)
            assert reply.startswith("Spending limits are unavailable"), reply
            assert "nothing was paid" in reply and "wrong-secret" not in reply
        before = await market.balance()
        result = await replica.call_tool("svc_queryAgent", query(market))
        assert (
            result.isError and result.structuredContent["error"]["code"] == "approvals_unavailable"
        )
        assert "nothing was paid" in result.text
    finally:
        await asyncio.to_thread(handle.close)
    assert await market.balance() == before and market.endpoint.stats.settled == 0
    assert conserved(await ledger(market))
