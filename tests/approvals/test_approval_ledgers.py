"""Issue 41: the mandate ledger's rules, the same test against both ledgers (the in-process
:class:`LocalLedger` and :class:`RedisLedger` on a real redis-server, one Lua script): a
reservation past its expiry counts as spent, an ended mandate refuses, the cap's slot needs no
stored mandate, a reservation holds in every slot or none, a finish below the amount frees the
rest; and a Redis that refuses the ledger (a password it was not given) is ``LedgerUnavailable``.

Time is the ``now`` argument, never a sleep."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from urllib.parse import urlsplit, urlunsplit

import pytest
import redis.asyncio as aioredis

from svc_gateway.approvals.ledger import CAP_ID, LocalLedger, MandateLedger, Slot, spent_in
from svc_gateway.approvals.mandates import parse_allow, window
from svc_gateway.approvals.redis_ledger import LedgerUnavailable, RedisLedger
from tests.support.redis_server import RedisServer

ACCOUNT = "telegram:alice"
NOW = 1_736_000_000  # 2025-01-04 14:13:20 UTC: whole seconds (the Redis script keeps seconds)
TTL = 60
DAY = window("day", NOW)
LIMIT = 5_000_000  # 5 USD


@pytest.fixture(params=["local", "redis"])
async def ledger(request: pytest.FixtureRequest) -> AsyncIterator[MandateLedger]:
    """Each ledger the gateway can run with: in this process, or in a real redis-server."""
    if request.param == "local":
        yield LocalLedger()
        return
    server: RedisServer = request.getfixturevalue("redis_server")
    shared = RedisLedger(server.url)
    try:
        yield shared
    finally:
        await shared.aclose()


async def stored_mandate(ledger: MandateLedger, text: str = "5 USD per day") -> Slot:
    """A mandate put in the ledger, and its slot in today's window."""
    mandate = parse_allow(text, NOW)
    await ledger.put(ACCOUNT, mandate)
    return Slot(mandate.id, window(mandate.period, NOW), mandate.amount_micro)


def counts(fields: dict[str, str], prefix: str) -> dict[str, int]:
    """The ``prefix`` fields (``s:``, ``h:``) that are not zero, as integers."""
    found = {k: int(v) for k, v in fields.items() if k.startswith(prefix)}
    return {k: v for k, v in found.items() if v}


async def test_a_reservation_past_its_expiry_counts_as_spent_not_freed(
    ledger: MandateLedger,
) -> None:
    slot = await stored_mandate(ledger)
    assert (await ledger.reserve(ACCOUNT, "r1", 2_000_000, [slot], TTL, NOW)).ok
    # before its expiry it is held: 3 USD left
    early = await ledger.reserve(ACCOUNT, "r2", 3_000_001, [slot], TTL, NOW + TTL - 10)
    assert (early.ok, early.left_micro, early.refused_by) == (False, 3_000_000, slot.mandate_id)
    # past its expiry (its process died, nobody finished it): spent, never freed
    late = NOW + TTL + 10
    refused = await ledger.reserve(ACCOUNT, "r3", 3_000_001, [slot], TTL, late)
    assert (refused.ok, refused.left_micro) == (False, LIMIT - 2_000_000)
    fields = await ledger.fields(ACCOUNT)
    assert counts(fields, "s:") == {f"s:{slot.mandate_id}:{DAY}": 2_000_000}
    assert counts(fields, "h:") == {} and not [k for k in fields if k.startswith("r:")]
    rest = await ledger.reserve(ACCOUNT, "r4", 3_000_000, [slot], TTL, late)
    assert (rest.ok, rest.left_micro) == (True, 0)


async def test_a_reservation_for_a_mandate_ended_meanwhile_is_refused(
    ledger: MandateLedger,
) -> None:
    slot = await stored_mandate(ledger)
    assert await ledger.clear(ACCOUNT) == 1  # /svc_allow off, after the slots were read
    refused = await ledger.reserve(ACCOUNT, "r1", 1, [slot], TTL, NOW)
    assert (refused.ok, refused.refused_by) == (False, slot.mandate_id)
    fields = await ledger.fields(ACCOUNT)
    assert counts(fields, "h:") == {} and not [k for k in fields if k.startswith("r:")]


async def test_the_caps_slot_needs_no_stored_mandate(ledger: MandateLedger) -> None:
    cap = Slot(CAP_ID, DAY, 1_000_000, must_exist=False)
    first = await ledger.reserve(ACCOUNT, "r1", 400_000, [cap], TTL, NOW)
    assert (first.ok, first.left_micro) == (True, 600_000)
    await ledger.finish(ACCOUNT, "r1", 400_000)
    beyond = await ledger.reserve(ACCOUNT, "r2", 600_001, [cap], TTL, NOW)
    assert (beyond.ok, beyond.left_micro, beyond.refused_by) == (False, 600_000, CAP_ID)
    assert spent_in(await ledger.fields(ACCOUNT), CAP_ID, DAY) == 400_000
    assert not [k for k in await ledger.fields(ACCOUNT) if k.startswith("m:")]


async def test_a_reservation_one_slot_short_holds_nothing_in_any_slot(
    ledger: MandateLedger,
) -> None:
    day = await stored_mandate(ledger, "5 USD per day")
    week = await stored_mandate(ledger, "10 USD per week")
    cap = Slot(CAP_ID, DAY, 2_000_000, must_exist=False)  # the short one, last
    refused = await ledger.reserve(ACCOUNT, "r1", 2_000_001, [day, week, cap], TTL, NOW)
    assert (refused.ok, refused.left_micro, refused.refused_by) == (False, 2_000_000, CAP_ID)
    fields = await ledger.fields(ACCOUNT)
    assert counts(fields, "h:") == {} and counts(fields, "s:") == {}
    assert not [k for k in fields if k.startswith("r:")]
    # the same amount that fits is held in every slot, and the least left is answered
    fits = await ledger.reserve(ACCOUNT, "r2", 2_000_000, [day, week, cap], TTL, NOW)
    assert (fits.ok, fits.left_micro) == (True, 0)
    held = counts(await ledger.fields(ACCOUNT), "h:")
    assert held == {
        f"h:{day.mandate_id}:{day.window}": 2_000_000,
        f"h:{week.mandate_id}:{week.window}": 2_000_000,
        f"h:{CAP_ID}:{DAY}": 2_000_000,
    }


async def test_finishing_below_the_reserved_amount_frees_the_rest(ledger: MandateLedger) -> None:
    slot = await stored_mandate(ledger)
    assert (await ledger.reserve(ACCOUNT, "r1", 3_000_000, [slot], TTL, NOW)).ok
    await ledger.finish(ACCOUNT, "r1", 1_000_000)
    fields = await ledger.fields(ACCOUNT)
    assert counts(fields, "s:") == {f"s:{slot.mandate_id}:{DAY}": 1_000_000}
    assert counts(fields, "h:") == {} and "r:r1" not in fields
    beyond = await ledger.reserve(ACCOUNT, "r2", 4_000_001, [slot], TTL, NOW)
    assert (beyond.ok, beyond.left_micro) == (False, 4_000_000)
    assert (await ledger.reserve(ACCOUNT, "r3", 4_000_000, [slot], TTL, NOW)).ok
    await ledger.finish(ACCOUNT, "r1", 1_000_000)  # finished twice: counted once
    assert spent_in(await ledger.fields(ACCOUNT), slot.mandate_id, DAY) == 5_000_000


async def refusing_url(server: RedisServer, refusal: str) -> str:
    """The URL of a ledger ``server`` refuses: it wants a password (``requirepass x``, as
    ``redis-server --requirepass x``) the URL lacks or gets wrong, or the URL's user may not run
    scripts (an ACL user allowed only ``PING``)."""
    admin = aioredis.Redis.from_url(server.url)
    try:
        if refusal == "no-permission":
            await admin.execute_command(
                "ACL", "SETUSER", "pinger", "on", ">pinger-secret", "+ping", "~*"
            )
            user = "pinger:pinger-secret@"
        else:
            await admin.config_set("requirepass", "x")
            user = "" if refusal == "no-password" else ":wrong-secret@"
    finally:
        await admin.aclose()
    parts = urlsplit(server.url)
    return urlunsplit(parts._replace(netloc=user + parts.netloc))


@pytest.mark.parametrize("refusal", ["no-password", "wrong-password", "no-permission"])
async def test_a_redis_refusing_the_ledger_is_ledger_unavailable(
    redis_server: RedisServer, refusal: str
) -> None:
    refused = RedisLedger(await refusing_url(redis_server, refusal))
    slot = Slot("m1", DAY, LIMIT)
    calls: list[Callable[[], Awaitable[object]]] = [
        lambda: refused.put(ACCOUNT, parse_allow("5 USD per day", NOW)),
        lambda: refused.clear(ACCOUNT),
        lambda: refused.fields(ACCOUNT),
        lambda: refused.reserve(ACCOUNT, "r1", 1, [slot], TTL, NOW),
        lambda: refused.finish(ACCOUNT, "r1", 1),
    ]
    try:
        for call in calls:
            with pytest.raises(LedgerUnavailable) as caught:
                await call()
            assert caught.value.code == "state_unavailable"
            assert "secret" not in str(caught.value)  # the URL's password never said
    finally:
        await refused.aclose()
