"""Settle failures: which withhold the answer (402), which deliver it and queue the settle,
which are retried, and how a queued settle is finished, by this run or the next."""

from __future__ import annotations

import asyncio
import json
import stat
from pathlib import Path

import httpx
import pytest

from svc_gateway.selling.state.settle_journal import SettleJournal
from svc_gateway.selling.state.settle_queue import PendingSettle
from tests.support import LogCollector, until
from tests.support.fixtures import StubMarket, StubMarketFactory
from tests.support.stub_service import StubService, make_token

PAYER = "0x" + "aa" * 20
DOWN = (500, {"code": "TEST.DOWN", "message": "internal error"})


async def post(http: httpx.AsyncClient, url: str, token: str, prompt: str = "hi") -> httpx.Response:
    return await http.post(url, json={"prompt": prompt}, headers={"payment-signature": token})


async def drain(market: StubMarket) -> int:
    """Retry the queue now, on the plugin loop (where the service client lives)."""
    return await market.endpoint.flow.seller.runtime.run(market.endpoint.flow.settler.drain_queue())


async def test_a_replayed_v3_token_gets_402_and_no_answer(
    make_stub_market: StubMarketFactory,
) -> None:
    market = await make_stub_market(stub=StubService(balance=10))
    token = make_token(PAYER, nonce="n-1")
    async with httpx.AsyncClient(timeout=30) as http:
        first = await post(http, market.url, token, "first answer")
        replay = await post(http, market.url, token, "second answer")
    assert first.status_code == 200 and "first answer" in first.text
    assert replay.status_code == 402
    assert "second answer" not in replay.text
    assert "BCK.X402.0059" in replay.json()["reason"]
    assert market.stub.calls["settle"] == 2  # the replay's settle was not retried
    assert market.stub.burned == 1
    assert market.endpoint.stats.settle_refused == 1 and market.endpoint.stats.settle_queue == 0


@pytest.mark.parametrize(
    "fault",
    [
        (402, {"code": "BCK.X402.0010", "message": "payment required"}),
        (403, {"code": "BCK.X402.0023", "message": "delegation budget insufficient"}),
    ],
)
async def test_a_settle_the_service_refuses_for_the_payer_withholds_the_answer(
    make_stub_market: StubMarketFactory, fault: tuple[int, dict[str, str]]
) -> None:
    market = await make_stub_market(stub=StubService(balance=10))
    market.stub.faults["settle"] = fault
    async with httpx.AsyncClient(timeout=30) as http:
        response = await post(http, market.url, make_token(PAYER), "the answer")
    assert response.status_code == 402
    assert "the answer" not in response.text
    assert fault[1]["message"] in response.json()["reason"]
    assert market.stub.calls["settle"] == 1


@pytest.mark.parametrize(
    "fault",
    [
        (404, {"code": "BCK.PLAN.0404", "message": "no such plan"}),
        (400, {"code": "BCK.X402.0100", "message": "bad request"}),
        (403, {"code": "BCK.AUTH.0003", "message": "not the plan's owner"}),
    ],
)
async def test_settle_errors_that_will_not_change_are_not_retried_and_counted_lost(
    make_stub_market: StubMarketFactory,
    fault: tuple[int, dict[str, str]],
    all_logs: LogCollector,
) -> None:
    market = await make_stub_market(stub=StubService(balance=10))
    market.stub.faults["settle"] = fault
    async with httpx.AsyncClient(timeout=30) as http:
        response = await post(http, market.url, make_token(PAYER), "the answer")
        assert response.status_code == 200  # SPEC: settle failure after 2xx → 2xx, logged
        assert "payment-response" not in response.headers
        assert market.stub.calls["settle"] == 1  # not retried
        stats = market.endpoint.stats
        assert stats.settle_lost == 1 and stats.settle_queue == 0 and stats.settle_deferred == 0
        again = await post(http, market.url, make_token(PAYER), "another answer")
    assert again.status_code == 200 and market.stub.calls["settle"] == 2
    assert stats.settle_lost == 2  # each loss is counted
    assert "delivered without payment" in all_logs.text


async def test_settle_outage_delivers_queues_and_the_next_success_pays_the_builder(
    make_stub_market: StubMarketFactory, all_logs: LogCollector
) -> None:
    market = await make_stub_market(stub=StubService(balance=10))
    market.stub.faults["settle"] = DOWN
    token = make_token(PAYER)
    async with httpx.AsyncClient(timeout=30) as http:
        delivered = await post(http, market.url, token, "while down")
        assert delivered.status_code == 200 and "while down" in delivered.text
        assert "payment-response" not in delivered.headers
        assert market.stub.calls["settle"] == 3  # retried on the same agentRequestId
        stats = market.endpoint.stats
        assert (stats.settle_deferred, stats.settle_queue, stats.settle_lost) == (1, 1, 0)
        queue_file = market.endpoint.flow.settler.queue.path
        assert stat.S_IMODE(queue_file.stat().st_mode) == 0o600  # it holds access tokens
        (record,) = [json.loads(line) for line in queue_file.read_text().splitlines()]
        entry = record["add"]  # one journal line: the settle owed
        assert entry["payer"] == PAYER and entry["amount"] == 1
        line = next(x for x in all_logs.lines if "settle failed" in x)
        assert entry["request_id"] in line and PAYER in line and line.startswith("ERROR")
        assert "TEST.DOWN: internal error; the answer was delivered (200)" in line  # why
        # the builder's two credits for the two answers: one still owed, so only 8 available
        assert market.endpoint.flow.book.known("plan-1", PAYER) == (10, 1)
        del market.stub.faults["settle"]
        paid = await post(http, market.url, token, "back up")
        assert paid.status_code == 200 and paid.headers["payment-response"]
        await until(lambda: market.endpoint.stats.settle_queue == 0)
    assert market.stub.burned == 2  # both answers paid, each once
    assert market.endpoint.stats.settle_recovered == 1
    assert len(market.endpoint.flow.settler.queue) == 0
    assert json.loads(queue_file.read_text().splitlines()[-1]) == {"remove": entry["request_id"]}
    assert market.endpoint.flow.book.known("plan-1", PAYER) == (8, 0)


async def test_a_second_run_of_the_endpoint_finishes_what_the_first_left(
    make_stub_market: StubMarketFactory,
) -> None:
    stub = StubService(balance=10)
    first = await make_stub_market(stub=stub, store_dir="shared")
    stub.faults["settle"] = DOWN
    async with httpx.AsyncClient(timeout=30) as http:
        for i in range(3):
            assert (await post(http, first.url, make_token(PAYER), f"q{i}")).status_code == 200
    assert first.endpoint.stats.settle_queue == 3 and stub.burned == 0
    await asyncio.to_thread(first.handle.close)
    del stub.faults["settle"]
    settles_before = stub.calls["settle"]
    second = await make_stub_market(stub=stub, store_dir="shared")
    await until(lambda: stub.burned == 3)
    await until(lambda: second.endpoint.stats.settle_queue == 0)
    assert second.endpoint.stats.settle_recovered == 3
    assert stub.calls["settle"] - settles_before == 3  # one call each, nothing burned twice
    # a replay of those settles is harmless: settle is idempotent on agentRequestId
    assert await drain(second) == 0


async def test_our_own_key_rejected_at_settle_is_queued_not_retried_now(
    make_stub_market: StubMarketFactory,
) -> None:
    market = await make_stub_market(stub=StubService(balance=10))
    market.stub.faults["settle"] = (401, {"code": "BCK.APIKEY.0004", "message": "bad key"})
    async with httpx.AsyncClient(timeout=30) as http:
        response = await post(http, market.url, make_token(PAYER))
    assert response.status_code == 200
    assert market.stub.calls["settle"] == 1
    assert market.endpoint.stats.settle_queue == 1
    # still refused on retry: kept for later
    assert await drain(market) == 0
    assert market.endpoint.stats.settle_queue == 1


async def test_a_queued_settle_the_service_then_refuses_is_dropped_and_counted(
    make_stub_market: StubMarketFactory,
) -> None:
    market = await make_stub_market(stub=StubService(balance=10))
    market.stub.faults["settle"] = DOWN
    async with httpx.AsyncClient(timeout=30) as http:
        assert (await post(http, market.url, make_token(PAYER))).status_code == 200
    market.stub.faults["settle"] = (200, {"success": False, "errorReason": "token expired"})
    assert await drain(market) == 0
    stats = market.endpoint.stats
    assert stats.settle_queue == 0 and stats.settle_lost == 1 and stats.settle_recovered == 0
    assert market.endpoint.flow.book.known("plan-1", PAYER) == (10, 0)  # claim released


async def test_a_settle_outage_without_a_request_id_is_tried_once_and_not_queued(
    make_stub_market: StubMarketFactory,
) -> None:
    market = await make_stub_market(stub=StubService(balance=10))
    market.stub.faults["verify"] = (200, {"isValid": True, "payer": PAYER})  # no agentRequestId
    market.stub.faults["settle"] = DOWN
    async with httpx.AsyncClient(timeout=30) as http:
        response = await post(http, market.url, make_token(PAYER))
    assert response.status_code == 200
    assert market.stub.calls["settle"] == 1  # without an id a retry could burn twice
    assert market.endpoint.stats.settle_queue == 0 and market.endpoint.stats.settle_lost == 1


# -- the queue file -------------------------------------------------------------------------


async def test_queue_sets_aside_an_unreadable_file_and_skips_bad_entries(
    tmp_path: Path, all_logs: LogCollector
) -> None:
    path = tmp_path / "settle-queue.json"
    path.write_text("{not json")
    first = await SettleJournal.open(path)
    await first.aclose()
    assert len(first) == 0
    assert path.with_name("settle-queue.json.bad").exists()
    good = {
        "request_id": "r1",
        "plan_id": "p",
        "payer": None,
        "amount": 1,
        "token": "t",
        "envelope": {},
        "queued_at": 1e12,
    }
    # the previous format (one JSON array), as a file left by an older version
    path.write_text(json.dumps([good, {"request_id": "r2"}, {**good, "amount": 0}, 5]))
    queue = await SettleJournal.open(path)
    await queue.aclose()
    assert [e.request_id for e in await queue.entries()] == ["r1"]
    assert queue.dropped == 3
    assert "unreadable" in all_logs.text


async def test_a_token_naming_no_payer_is_unmetered_but_never_answered_free(
    make_stub_market: StubMarketFactory, all_logs: LogCollector
) -> None:
    market = await make_stub_market(stub=StubService(balance=10))
    market.stub.faults["verify"] = (200, {"isValid": True, "agentRequestId": "r-1"})
    async with httpx.AsyncClient(timeout=30) as http:
        response = await post(http, market.url, "opaque-token", "the answer")
    assert response.status_code == 402  # the stub's settle cannot read it: success false
    assert "the answer" not in response.text
    assert market.stub.calls["balance"] == 0  # nobody to meter
    assert market.stub.burned == 0
    assert "settle refused for agentRequestId r-1 (payer unknown, plan plan-1)" in all_logs.text


async def test_an_unexpected_client_failure_at_settle_is_retried_then_queued(
    make_stub_market: StubMarketFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    market = await make_stub_market(stub=StubService(balance=10))
    core = market.endpoint.flow.seller
    real = await core.runtime.run(_client(core))
    attempts = 0

    class Closed:
        """The real client, except that settle fails the way a closed session does."""

        def __getattr__(self, name: str) -> object:
            return getattr(real, name)

        async def settle(self, *args: object, **kwargs: object) -> object:
            nonlocal attempts
            attempts += 1
            raise RuntimeError("Session is closed")

    monkeypatch.setattr(core, "client", lambda running=None: Closed())
    async with httpx.AsyncClient(timeout=30) as http:
        response = await post(http, market.url, make_token(PAYER), "the answer")
    assert response.status_code == 200 and "the answer" in response.text
    assert attempts == 3
    assert market.endpoint.stats.settle_queue == 1
    # still failing at the retry: the entry is kept, not dropped
    assert await drain(market) == 0 and market.endpoint.stats.settle_queue == 1
    monkeypatch.setattr(core, "client", lambda running=None: real)
    assert await drain(market) == 1
    assert market.stub.burned == 1


async def _client(core: object) -> object:
    return core.client()  # type: ignore[attr-defined]


async def test_a_queued_settle_refused_for_the_payer_or_unreadable_is_dropped(
    make_stub_market: StubMarketFactory, all_logs: LogCollector
) -> None:
    market = await make_stub_market(stub=StubService(balance=10))
    market.stub.faults["settle"] = DOWN
    async with httpx.AsyncClient(timeout=30) as http:
        for _ in range(2):
            assert (await post(http, market.url, make_token(PAYER))).status_code == 200
    flow = market.endpoint.flow
    first, second = await flow.settler.queue.entries()
    replaced = flow.settler.queue.add(
        PendingSettle(
            second.request_id,
            second.plan_id,
            second.payer,
            second.amount,
            second.token,
            {"x402Version": "two"},  # unreadable envelope
            second.queued_at,
        )
    )
    await flow.seller.runtime.run(replaced)
    market.stub.faults["settle"] = (403, {"code": "BCK.X402.0023", "message": "budget spent"})
    assert await drain(market) == 0
    stats = market.endpoint.stats
    assert stats.settle_deferred == 2  # both answers were delivered while settle was down
    assert stats.settle_queue == 0 and stats.settle_lost == 2
    assert market.stub.calls["settle"] == 3 * 2 + 1  # the unreadable one was never sent
    assert market.endpoint.flow.book.known("plan-1", PAYER) == (10, 0)  # both claims released
    assert first.request_id != second.request_id
    # the operator's log says why each was given up
    assert (
        f"{first.request_id} (payer {PAYER}, plan plan-1) refused: BCK.X402.0023" in all_logs.text
    )
    assert f"{second.request_id} (payer {PAYER}, plan plan-1) refused: ValidationError;" in (
        all_logs.text
    )


async def test_settle_queue_path_setting_is_honoured(
    make_stub_market: StubMarketFactory, tmp_path: Path
) -> None:
    target = tmp_path / "elsewhere" / "queue.json"
    market = await make_stub_market(config={"settleQueuePath": str(target)})
    assert market.endpoint.flow.settler.queue.path == target


async def test_a_settle_dropped_from_a_full_queue_releases_its_claim(
    make_stub_market: StubMarketFactory, all_logs: LogCollector
) -> None:
    market = await make_stub_market(stub=StubService(balance=10))
    market.endpoint.flow.settler.queue.max_entries = 1
    market.stub.faults["settle"] = DOWN
    async with httpx.AsyncClient(timeout=30) as http:
        for _ in range(2):
            assert (await post(http, market.url, make_token(PAYER))).status_code == 200
    assert len(market.endpoint.flow.settler.queue) == 1
    # one settle is still owed (claimed); the dropped one is not
    assert market.endpoint.flow.book.known("plan-1", PAYER) == (10, 1)
    assert "1 credits): the settle queue is full" in all_logs.text
