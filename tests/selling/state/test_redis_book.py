"""The shared admission book against a real redis-server: two books are two replicas."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
import redis.asyncio as aioredis

from svc_gateway.selling.state import redis_book
from svc_gateway.selling.state.book import Admission, Refusal
from svc_gateway.selling.state.redis_book import RedisAdmissionBook
from svc_gateway.selling.state.redis_store import connect_client
from svc_gateway.selling.state.shared import StateUnavailable
from tests.support.redis_server import RedisServer

PLAN = "plan-1"
PAYER = "0xAbC"


class Service:
    """The service's balance endpoint as the book sees it: a figure, and the reads counted."""

    def __init__(self, balance: int) -> None:
        self.balance = balance
        self.reads = 0
        self.gate: asyncio.Event | None = None
        self.reading = asyncio.Event()

    async def read(self, plan_id: str, payer: str) -> int:
        assert (plan_id, payer) == (PLAN, PAYER.lower())
        self.reads += 1
        self.reading.set()
        figure = self.balance
        if self.gate is not None:
            await self.gate.wait()
        return figure


class Books:
    def __init__(self, server: RedisServer) -> None:
        self.server = server
        self.clients: list[aioredis.Redis] = []

    def book(self, service: Service, **kwargs: float) -> RedisAdmissionBook:
        client = connect_client(self.server.url)
        self.clients.append(client)
        options: dict[str, float] = {"claim_ttl_secs": 60.0, "owed_ttl_secs": 600.0, **kwargs}
        return RedisAdmissionBook(client, service.read, where="test", **options)  # type: ignore[arg-type]


@pytest.fixture
async def books(redis_server: RedisServer) -> AsyncIterator[Books]:
    made = Books(redis_server)
    yield made
    for client in made.clients:
        await client.aclose()


async def test_two_replicas_admit_exactly_the_balance_between_them(books: Books) -> None:
    service = Service(5)
    a, b = books.book(service), books.book(service)
    results = await asyncio.gather(*(book.admit(PLAN, PAYER, 1) for book in [a, b] * 5))
    admitted = [r for r in results if isinstance(r, Admission)]
    refused = [r for r in results if isinstance(r, Refusal)]
    assert len(admitted) == 5 and len(refused) == 5
    assert all(r.available == 0 for r in refused)
    assert len({r.claim_id for r in admitted}) == 5
    assert await a.known(PLAN, PAYER) == (5, 5)
    assert service.reads <= 2  # once per replica at most: later admits use the shared figure


async def test_a_release_frees_the_credits_for_the_other_replica(books: Books) -> None:
    service = Service(2)
    a, b = books.book(service), books.book(service)
    first = await a.admit(PLAN, PAYER, 2)
    assert isinstance(first, Admission)
    assert isinstance(await b.admit(PLAN, PAYER, 1), Refusal)
    await a.release(first)
    assert isinstance(await b.admit(PLAN, PAYER, 2), Admission)


async def test_a_dead_replicas_claim_expires(books: Books) -> None:
    service = Service(3)
    dead, survivor = books.book(service, claim_ttl_secs=0.3), books.book(service)
    assert isinstance(await dead.admit(PLAN, PAYER, 3), Admission)  # never closed
    refusal = await survivor.admit(PLAN, PAYER, 1)
    assert isinstance(refusal, Refusal) and refusal.available == 0
    await asyncio.sleep(0.4)
    assert isinstance(await survivor.admit(PLAN, PAYER, 3), Admission)
    assert await survivor.known(PLAN, PAYER) == (3, 3)


async def test_settle_receipts_keep_the_balance_without_reading(books: Books) -> None:
    service = Service(10)
    a, b = books.book(service), books.book(service)
    one = await a.admit(PLAN, PAYER, 4)
    assert isinstance(one, Admission)
    await a.settled(one, 4, 6)
    assert await b.known(PLAN, PAYER) == (6, 0)
    two = await b.admit(PLAN, PAYER, 6)
    assert isinstance(two, Admission)
    assert service.reads == 1
    # a receipt lower than our own settles explain: credits were spent elsewhere
    await b.settled(two, 1, 2)
    assert await a.known(PLAN, PAYER) == (2, 0)


async def test_a_refused_settle_zeroes_what_is_available_then_reads_again(books: Books) -> None:
    service = Service(5)
    a, b = books.book(service), books.book(service)
    one, two = await a.admit(PLAN, PAYER, 1), await b.admit(PLAN, PAYER, 1)
    assert isinstance(one, Admission) and isinstance(two, Admission)
    await a.refused(one)
    refusal = await b.admit(PLAN, PAYER, 1)
    assert isinstance(refusal, Refusal) and refusal.available == 0
    assert service.reads == 1  # something in flight: no read
    await b.release(two)
    service.balance = 3  # the payer bought more meanwhile
    assert isinstance(await a.admit(PLAN, PAYER, 3), Admission)
    assert service.reads == 2


async def test_a_stale_balance_is_read_again_when_nothing_is_in_flight(books: Books) -> None:
    service = Service(1)
    book = books.book(service, balance_ttl_secs=0.2)
    one = await book.admit(PLAN, PAYER, 1)
    assert isinstance(one, Admission)
    await book.release(one)
    service.balance = 7
    assert (await book.known(PLAN, PAYER)) == (1, 0)
    await asyncio.sleep(0.25)
    assert isinstance(await book.admit(PLAN, PAYER, 7), Admission)
    assert service.reads == 2


async def test_a_short_book_reads_again_when_verify_saw_enough(books: Books) -> None:
    service = Service(1)
    book = books.book(service)
    one = await book.admit(PLAN, PAYER, 1)
    assert isinstance(one, Admission)
    await book.release(one)
    service.balance = 2  # bought more: verify saw 2
    assert isinstance(await book.admit(PLAN, PAYER, 2, verified_balance=2), Admission)
    assert service.reads == 2
    assert await book.known(PLAN, PAYER) == (2, 2)


async def test_a_short_payer_is_admitted_on_verifys_word_one_request_at_a_time(
    books: Books,
) -> None:
    service = Service(0)  # no credits: the delegation tops up at settle
    a, b = books.book(service), books.book(service)
    first = await a.admit(PLAN, PAYER, 1, verified_balance=0)
    assert isinstance(first, Admission)
    second = await b.admit(PLAN, PAYER, 1)  # nothing reported, but one is in flight
    assert isinstance(second, Refusal) and second.available == -1
    await a.settled(first, 1, 4)  # topped up by 5, one burned: more than the book knew
    assert service.reads == 1
    service.balance = 4
    again = await b.admit(PLAN, PAYER, 4, verified_balance=4)  # the book reads the new figure
    assert isinstance(again, Admission) and service.reads == 2


async def test_verify_seeing_enough_does_not_admit_a_short_book_after_a_read(
    books: Books,
) -> None:
    service = Service(1)
    book = books.book(service)
    refusal = await book.admit(PLAN, PAYER, 2, verified_balance=5)  # read once, still 1
    assert isinstance(refusal, Refusal) and refusal.available == 1
    assert service.reads == 1


async def test_a_read_overlapping_a_settle_is_corrected_by_the_burn(books: Books) -> None:
    slow, quick = Service(5), Service(5)
    reader = books.book(slow, balance_ttl_secs=0.05)
    settler = books.book(quick, balance_ttl_secs=0.05)
    first = await settler.admit(PLAN, PAYER, 2)
    assert isinstance(first, Admission)
    await settler.release(first)
    await asyncio.sleep(0.06)  # stale: the next admission reads
    slow.gate = asyncio.Event()
    pending = asyncio.create_task(reader.admit(PLAN, PAYER, 5, verified_balance=5))
    await slow.reading.wait()
    # while the reader's figure (5) is on its way, another replica burns 2 of those credits
    burn = await settler.admit(PLAN, PAYER, 2)
    assert isinstance(burn, Admission)
    await settler.settled(burn, 2, 3)
    slow.gate.set()
    refusal = await pending
    assert isinstance(refusal, Refusal) and refusal.available == 3


async def test_a_read_overlapping_a_refused_settle_is_discarded(books: Books) -> None:
    slow, quick = Service(5), Service(5)
    reader = books.book(slow, balance_ttl_secs=0.05)
    settler = books.book(quick, balance_ttl_secs=0.05)
    first = await settler.admit(PLAN, PAYER, 1)
    assert isinstance(first, Admission)
    await settler.release(first)
    await asyncio.sleep(0.06)
    slow.gate = asyncio.Event()
    pending = asyncio.create_task(reader.admit(PLAN, PAYER, 5, verified_balance=5))
    await slow.reading.wait()
    # meanwhile the service refuses a settle for want of credits: the reader's 5 is stale
    doomed = await settler.admit(PLAN, PAYER, 1)
    assert isinstance(doomed, Admission)
    await settler.refused(doomed)
    slow.balance = 0
    slow.gate.set()
    slow.gate = None
    refusal = await pending
    assert isinstance(refusal, Refusal) and refusal.available == 0
    assert slow.reads == 2  # the overlapping figure was discarded and read again


async def test_restore_counts_an_owed_settle_once_across_replicas(books: Books) -> None:
    service = Service(3)
    a, b = books.book(service), books.book(service)
    owed_a = await a.restore(PLAN, PAYER, 2, "req-1")
    owed_b = await b.restore(PLAN, PAYER, 2, "req-1")  # the other replica restores it too
    assert owed_a.claim_id == owed_b.claim_id == "owed:req-1"
    assert isinstance(await a.admit(PLAN, PAYER, 1), Admission)
    assert isinstance(await b.admit(PLAN, PAYER, 1), Refusal)  # 3 - 2 owed - 1
    await b.settled(owed_b, 2, 1)
    assert await a.known(PLAN, PAYER) == (1, 1)


async def test_restore_is_unconditional(books: Books) -> None:
    service = Service(1)
    book = books.book(service)
    await book.restore(PLAN, PAYER, 5, "req-9")
    refusal = await book.admit(PLAN, PAYER, 1)
    assert isinstance(refusal, Refusal) and refusal.available == -4
    assert "0 available" in refusal.reason


async def test_redis_down_fails_admission_closed(books: Books, redis_server: RedisServer) -> None:
    service = Service(5)
    book = books.book(service)
    one = await book.admit(PLAN, PAYER, 5)
    assert isinstance(one, Admission)
    redis_server.stop()
    with pytest.raises(StateUnavailable) as caught:
        await book.admit(PLAN, PAYER, 1)
    assert "shared state store at test did not answer" in str(caught.value)
    with pytest.raises(StateUnavailable):
        await book.known(PLAN, PAYER)
    await book.release(one)  # kept, not lost
    assert "backlog=1" in repr(book)
    redis_server.start()  # empty: no persistence
    await book.settled(Admission(PLAN, PAYER.lower(), 0, "gone"), 0, None)  # flushes the backlog
    assert "backlog=0" in repr(book)


async def test_a_payer_never_read_is_unknown(books: Books) -> None:
    assert await books.book(Service(1)).known(PLAN, PAYER) is None


async def test_updates_kept_during_an_outage_are_bounded_and_reported_at_close(
    books: Books, redis_server: RedisServer, caplog: pytest.LogCaptureFixture
) -> None:
    service = Service(5)
    book = books.book(service, max_backlog=1)
    one, two = await book.admit(PLAN, PAYER, 1), await book.admit(PLAN, PAYER, 1)
    assert isinstance(one, Admission) and isinstance(two, Admission)
    redis_server.stop()
    await book.release(one)
    await book.release(two)  # the oldest kept update goes: its claim expires on its own
    assert book.dropped_updates == 1 and "backlog=1" in repr(book)
    await book.aclose()
    assert "1 admission update(s) could not reach Redis at test before shutdown" in caplog.text


async def test_a_failed_balance_read_fails_every_waiter_and_is_tried_again(
    books: Books,
) -> None:
    service = Service(3)
    failing = {"left": 1}

    async def read(plan_id: str, payer: str) -> int:
        await asyncio.sleep(0.05)
        if failing["left"]:
            failing["left"] -= 1
            raise ConnectionRefusedError("service down")
        return await service.read(plan_id, payer)

    book = books.book(service)
    book._read_balance = read
    results = await asyncio.gather(
        book.admit(PLAN, PAYER, 1), book.admit(PLAN, PAYER, 1), return_exceptions=True
    )
    assert all(isinstance(r, ConnectionRefusedError) for r in results)
    assert isinstance(await book.admit(PLAN, PAYER, 1), Admission)


async def test_a_cancelled_shared_read_lets_the_waiter_read_itself(books: Books) -> None:
    service = Service(2)
    service.gate = asyncio.Event()
    book = books.book(service)
    leader = asyncio.create_task(book.admit(PLAN, PAYER, 1))
    await service.reading.wait()
    waiter = asyncio.create_task(book.admit(PLAN, PAYER, 1))
    await asyncio.sleep(0.05)  # the waiter shares the leader's read
    leader.cancel()
    with pytest.raises(asyncio.CancelledError):
        await leader
    service.gate.set()
    assert isinstance(await waiter, Admission)
    assert service.reads == 2


async def test_a_cancelled_waiter_does_not_cancel_the_shared_read(books: Books) -> None:
    service = Service(2)
    service.gate = asyncio.Event()
    book = books.book(service)
    leader = asyncio.create_task(book.admit(PLAN, PAYER, 1))
    await service.reading.wait()
    waiter = asyncio.create_task(book.admit(PLAN, PAYER, 1))
    await asyncio.sleep(0.05)
    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter
    service.gate.set()
    assert isinstance(await leader, Admission)
    assert service.reads == 1


async def test_remembered_reads_are_bounded(books: Books, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(redis_book, "MAX_RECENT", 1)
    service = Service(1)
    book = books.book(service)

    async def read(plan_id: str, payer: str) -> int:
        return 1

    book._read_balance = read
    for payer in ("0x1", "0x2"):
        assert isinstance(await book.admit(PLAN, payer, 1), Admission)
    assert list(book._recent) == [(PLAN, "0x2")]


async def test_an_idle_payer_is_forgotten_but_not_while_a_claim_is_held(books: Books) -> None:
    service = Service(3)
    book = books.book(service, idle_secs=0.2, owed_ttl_secs=1.0)
    one = await book.admit(PLAN, PAYER, 1)
    assert isinstance(one, Admission)
    await book.release(one)
    await asyncio.sleep(0.3)
    assert await book.known(PLAN, PAYER) is None  # Redis dropped the idle account
    await book.restore(PLAN, PAYER, 1, "req-1")
    await asyncio.sleep(0.3)
    acct = book.keys(PLAN, PAYER)[0]
    assert await books.clients[0].hget(acct, "inflight") == b"1"  # kept as long as its claim


async def test_concurrent_script_calls_share_one_round_trip(books: Books) -> None:
    service = Service(100)
    book = books.book(service)
    assert isinstance(await book.admit(PLAN, PAYER, 1), Admission)  # read and loaded
    before = book._batch.pipelines
    results = await asyncio.gather(*(book.admit(PLAN, PAYER, 1) for _ in range(20)))
    assert all(isinstance(r, Admission) for r in results)
    assert book._batch.pipelines - before == 1  # twenty admissions, one pipeline
    assert await book.known(PLAN, PAYER) == (100, 21)


async def test_scripts_redis_forgot_are_loaded_again(books: Books) -> None:
    service = Service(5)
    book = books.book(service)
    assert isinstance(await book.admit(PLAN, PAYER, 1), Admission)
    await books.clients[0].script_flush()
    assert isinstance(await book.admit(PLAN, PAYER, 1), Admission)
    assert await book.known(PLAN, PAYER) == (5, 2)


async def test_a_script_error_fails_closed(books: Books) -> None:
    book = books.book(Service(5))
    with pytest.raises(StateUnavailable) as caught:
        await book.admit(PLAN, PAYER, "many")  # type: ignore[arg-type]
    assert "did not answer (ResponseError)" in str(caught.value)


async def test_a_caller_gone_before_the_answer_leaves_the_batch_intact(books: Books) -> None:
    service = Service(5)
    book = books.book(service)
    assert isinstance(await book.admit(PLAN, PAYER, 1), Admission)
    gone = asyncio.ensure_future(book.admit(PLAN, PAYER, 1))
    kept = asyncio.ensure_future(book.admit(PLAN, PAYER, 1))
    await asyncio.sleep(0)  # both calls queued in one batch
    gone.cancel()
    assert isinstance(await kept, Admission)
    await book.aclose()  # waits for the batch on its way
    in_flight = (await book.known(PLAN, PAYER) or (0, 0))[1]
    assert in_flight in (2, 3)  # the cancelled claim, if made, expires like a dead replica's


async def test_the_claims_hash_expires_with_the_account_and_the_claims_set(
    books: Books,
) -> None:
    """A replica that dies holding a claim leaves nothing behind: the claims hash (the claims'
    amounts) carries the same expiry as the account hash and the claims set, and all three are
    gone once it passes."""
    service = Service(3)
    dead = books.book(service, claim_ttl_secs=0.2, idle_secs=0.2)
    assert isinstance(await dead.admit(PLAN, PAYER, 1), Admission)  # never closed
    client = books.clients[0]
    keys = dead.keys(PLAN, PAYER)
    ttls = [await client.pttl(key) for key in keys]
    assert all(0 < ttl <= 1300 for ttl in ttls), ttls  # the claim's expiry and a second
    assert max(ttls) - min(ttls) < 100, ttls  # one expiry for the three keys
    for _ in range(100):  # bounded: 3 s
        if not await client.exists(*keys):
            break
        await asyncio.sleep(0.03)
    assert [await client.exists(key) for key in keys] == [0, 0, 0]


async def test_keys_follow_the_sellers_prefix_and_are_kept_within_a_bound(
    books: Books, monkeypatch: pytest.MonkeyPatch
) -> None:
    service = Service(5)
    seller = ["svc:seller-a:"]
    client = connect_client(books.server.url)
    books.clients.append(client)
    book = RedisAdmissionBook(
        client,
        service.read,
        where="test",
        prefix=lambda: seller[0],
        claim_ttl_secs=60.0,
        owed_ttl_secs=600.0,
    )
    first = book.keys(PLAN, PAYER)
    assert first[0] == "svc:seller-a:acct:{plan-1|0xabc}"
    seller[0] = "svc:seller-b:"  # another seller logged in: its own namespace at once
    assert book.keys(PLAN, PAYER) == (
        "svc:seller-b:acct:{plan-1|0xabc}",
        "svc:seller-b:acct:{plan-1|0xabc}:claims",
        "svc:seller-b:acct:{plan-1|0xabc}:amounts",
    )
    monkeypatch.setattr(redis_book, "KEYS_KEPT", 3)
    for n in range(10):
        book.keys(PLAN, f"0x{n}")
        assert len(book._keys) <= 3  # the names kept: bounded
