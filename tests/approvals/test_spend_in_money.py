"""Issue 44: money shown as money. ``/svc_spend`` lists the plan a query's top-up bought apart
from the calls, each in money and credits (the credits bought, not the balance left after the
call); ``/svc_allow`` and the balance context say where a mandate's spent figure comes from; a
human-mode warning names what the person approved, not ``defaultSpendingLimitCents``."""

from __future__ import annotations

from tests.support.market import MarketFactory

from .test_approvals import conserved, human_market, ledger, query


async def test_a_top_up_and_the_calls_are_listed_apart_in_money_and_the_mandate_explained(
    make_market: MarketFactory,
) -> None:
    market = await human_market(make_market, credits=10, per_request=2)  # 10 credits, 1 USDC
    gw = market.subscriber_gw
    assert (await gw.run_command("svc_allow", "2 USD per day")).startswith("Allowed")
    first = await gw.call_tool("svc_queryAgent", query(market))
    data = first.structuredContent
    assert not first.isError, data
    assert data["topUp"]["creditsBought"] == "10" and data["balanceAfter"] == "8"
    (warning,) = data["warnings"]
    assert "automatic top-up: 10 credits" in warning and "used 2" in warning
    assert "within what you approved" in warning and "defaultSpendingLimitCents" not in warning
    second = await gw.call_tool("svc_queryAgent", query(market, "again"))
    assert not second.isError and "topUp" not in second.structuredContent

    spend = await gw.run_command("svc_spend")
    head, *rest = spend.splitlines()
    assert head == (
        "You bought 10 credits for 1.00 USD (1 purchase of a plan) and paid 4 credits "
        "(0.40 USD) for 2 calls (receipts since the gateway started):"
    )
    assert rest[0] == "Purchases:" and "10 credits (1.00 USD)" in rest[1] and "(top-up)" in rest[1]
    assert rest[2] == "Calls:" and all("2 credits (0.20 USD)" in line for line in rest[3:5])

    # the mandate spent the plan's price and the two calls: 1.40 USD, as /svc_spend lists
    allowed = await gw.run_command("svc_allow", "")
    assert "0.60 USD left today (1.40 USD spent: the purchases and calls /svc_spend lists" in (
        allowed
    )
    assert "1.40 USD spent" in await gw.context_text()
    book = await ledger(market)
    assert (book["granted"], book["burned"]) == (10, 4) and conserved(book)
