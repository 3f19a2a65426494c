"""A settle queued during an outage is finished by the next run of the endpoint with the
``agentRequestId`` verify gave it: the same answer is never billed twice, and a v3 token's
retry is not refused as a replay."""

from __future__ import annotations

import asyncio
import json

import httpx
from aiohttp import web

from tests.support import until
from tests.support.fixtures import StubMarketFactory
from tests.support.stub_service import StubService, make_token

PAYER = "0x" + "aa" * 20
DOWN = (500, {"code": "TEST.DOWN", "message": "internal error"})


class RecordingStub(StubService):
    """The stub service, remembering every ``agentRequestId`` its verify handed out."""

    def __init__(self, **options: object) -> None:
        super().__init__(**options)  # type: ignore[arg-type]
        self.issued: list[str] = []

    async def _verify(self, request: web.Request) -> web.Response:
        response = await super()._verify(request)
        assert isinstance(response.body, bytes)
        self.issued.append(json.loads(response.body)["agentRequestId"])
        return response


async def test_queued_settles_are_retried_after_a_restart_with_their_original_request_ids(
    make_stub_market: StubMarketFactory,
) -> None:
    stub = RecordingStub(balance=10)
    first = await make_stub_market(stub=stub, store_dir="shared")
    stub.faults["settle"] = DOWN
    async with httpx.AsyncClient(timeout=30) as http:
        for i in range(2):
            token = make_token(PAYER, nonce=f"v3-nonce-{i}")  # a v3 token: one request id only
            answer = await http.post(
                first.url, json={"prompt": f"q{i}"}, headers={"payment-signature": token}
            )
            assert answer.status_code == 200
    assert len(stub.issued) == 2 and stub.burned == 0
    await asyncio.to_thread(first.handle.close)
    del stub.faults["settle"]
    second = await make_stub_market(stub=stub, store_dir="shared")
    await until(lambda: stub.burned == 2)
    await until(lambda: second.endpoint.stats.settle_queue == 0)
    assert sorted(stub.settled) == sorted(stub.issued)  # settled on exactly the verified ids
    assert second.endpoint.stats.settle_recovered == 2 and second.endpoint.stats.settle_lost == 0
    assert stub.balance_of(PAYER) == 8  # each answer paid once
