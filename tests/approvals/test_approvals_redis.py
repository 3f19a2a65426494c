"""Issue 25 across replicas: two buyer gateways sharing ``stateUrl`` on a real redis-server
keep one mandate. Typed on one, honoured on the other; a burst split across both pays exactly
what it allows (the ledger as truth)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from svc_gateway import register
from svc_gateway.account.credentials import CredentialStore
from svc_gateway.hosts.reference import ReferenceGateway
from tests.helpers import approve
from tests.support.market import MarketFactory
from tests.support.redis_server import RedisServer

from .test_approvals import conserved, dollar_market, ledger, orders, pending_order, query


async def test_a_mandate_is_shared_by_two_replicas_and_a_split_burst_pays_exactly_5(
    make_market: MarketFactory, redis_server: RedisServer, tmp_path: Path
) -> None:
    market = await dollar_market(make_market)
    gw = market.subscriber_gw
    await approve(gw, await pending_order(gw, market.plan_id))
    assert await market.balance() == 20
    replicas: list[ReferenceGateway] = []
    handles = []
    try:
        for n in range(2):
            replica = ReferenceGateway(
                {
                    "environment": "local",
                    "baseUrl": market.server.base_url,
                    "approval": "human",
                    "stateUrl": redis_server.url,
                }
            )
            store = CredentialStore(tmp_path / f"replica-{n}", use_keyring=False)
            handles.append(await asyncio.to_thread(register, replica, store=store))
            reply = await replica.run_command("svc_login", market.subscriber_key)
            assert reply.startswith("Logged in"), reply
            replicas.append(replica)
        first, second = replicas
        assert (await first.run_command("svc_allow", "5 USD per day")).startswith("Allowed")
        assert "5.00 USD left today" in await second.run_command("svc_allow", "")
        results = await asyncio.gather(
            *(
                (first if i % 2 else second).call_tool("svc_queryAgent", query(market, f"q{i}"))
                for i in range(20)
            )
        )
        paid = [r for r in results if "answer" in r.structuredContent]
        asked = [r for r in results if r.structuredContent.get("approvalRequired")]
        assert (len(paid), len(asked)) == (5, 15), [r.text[:200] for r in results]
        assert await market.balance() == 15 and market.endpoint.stats.settled == 5
        assert conserved(await ledger(market)) and await orders(market) == 1
        assert "0.00 USD left today" in await first.run_command("svc_allow", "")
        assert (await second.run_command("svc_allow", "off")).startswith("Ended 1")
        assert (await first.run_command("svc_allow", "")).startswith("No spending mandate")
    finally:
        for handle in handles:
            await asyncio.to_thread(handle.close)
