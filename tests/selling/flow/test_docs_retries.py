"""The buyer recipe of docs/retries.md, run as written: an answer lost in flight (the
connection cut after the response headers) is asked for again with the same key and token,
and comes back paid once."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from tests.docs_recipes import RETRY_BUYER, blocks
from tests.support.cutting import CutProxy
from tests.support.fixtures import StubMarketFactory
from tests.support.stub_service import StubService, make_token

PAYER = "0x" + "cc" * 20


async def test_the_buyer_recipe_gets_a_lost_answer_back_paid_once(
    make_stub_market: StubMarketFactory,
) -> None:
    ((_, text),) = blocks(RETRY_BUYER)
    namespace: dict[str, Any] = {}
    exec(compile(text, "docs/retries.md", "exec"), namespace)
    market = await make_stub_market(stub=StubService(balance=10))
    where = urlsplit(market.url)
    proxy = CutProxy(cuts=1)
    proxy.upstream = f"{where.scheme}://{where.netloc}"
    await proxy.start()
    try:
        answer = await namespace["ask_once"](proxy.origin + where.path, make_token(PAYER), "hi")
    finally:
        await proxy.close()
    assert len(proxy.lost) == 1
    assert answer.status_code == 200 and answer.headers["Idempotent-Replayed"] == "true"
    assert market.stub.burned == 1 and market.stub.calls["settle"] == 1
    assert market.stub.balance_of(PAYER) + market.stub.burned == 10
