"""``/svc_earnings`` counts what the A2A agent sold, with its own flow (no paid endpoint) and
with the endpoint's (one flow, named once)."""

from __future__ import annotations

from a2a.types import TaskState

from .conftest import MarketFactory, message, paid, reply_text, send


async def test_earnings_count_the_sales_of_an_a2a_agent_with_its_own_flow(
    make_market: MarketFactory,
) -> None:
    market = await make_market()  # enablePaidA2A alone: the A2A agent builds its own flow
    assert "paid_endpoint" not in market.handle.extras
    client = await market.client()
    for prompt in ("first sale", "second sale"):
        reply = await send(client, message(prompt, paid(await market.token())))
        assert reply.task.status.state == TaskState.TASK_STATE_COMPLETED, reply_text(reply)
    await client.close()
    earned = await market.gateway.run_command("svc_earnings")
    assert "Earned 2 credits settled" in earned, earned
    assert "- paid A2A agent: 2 sales, 2 credits settled" in earned, earned
    assert market.subscriber_address.lower() in earned.lower()


async def test_an_a2a_agent_on_the_endpoints_flow_is_counted_once(
    make_market: MarketFactory,
) -> None:
    market = await make_market(on_endpoint=True)
    client = await market.client()
    reply = await send(client, message("one sale", paid(await market.token())))
    assert reply.task.status.state == TaskState.TASK_STATE_COMPLETED, reply_text(reply)
    await client.close()
    earned = await market.gateway.run_command("svc_earnings")
    assert "- paid endpoint and paid A2A agent: 1 sale, 1 credit settled" in earned, earned
    assert "Earned 1 credit settled" in earned, earned
