"""Issue 41: the approval rules a mutation run found unpinned. What ``/svc_allow`` accepts
(exactly), whom it listens to, codes bound to the exact user, what a mandate covers (its
currency, agent, plan; the operator's USD cap not bypassed in another currency), calendar
windows in UTC with ISO weeks, and how money is rounded and written.

Mostly units of ``money``, ``mandates``, ``pending`` and ``commands.allow``; the one way into
the gate (being rewritten) is :func:`asks_for_code`. Time is a ``now`` argument, never a sleep."""

from __future__ import annotations

import calendar
import time
from collections.abc import Iterator
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import pytest

from svc_gateway.approvals.commands import allow
from svc_gateway.approvals.gate import ApprovalNeeded, Approvals
from svc_gateway.approvals.mandates import (
    ALLOW_USAGE,
    Mandate,
    MandateSyntax,
    parse_allow,
    window,
)
from svc_gateway.approvals.money import (
    PlanValue,
    cents_ceiling,
    cents_floor,
    currency_of,
    format_money,
)
from svc_gateway.approvals.opening import open_approvals
from svc_gateway.approvals.pending import PendingBook, Who
from svc_gateway.config import load_config
from svc_gateway.host import Caller, CommandContext
from svc_gateway.service.models import Plan

NOW = 1_736_000_000.0  # 2025-01-04 14:13:20 UTC
USDC = "0x036CbD53842c5426634e7929541eC2318f3dCF7e"
EURC = "0x808456652fdb597867f38412077a9182bf77359f"


def utc(text: str) -> float:
    """``2025-01-05T23:59:59`` in UTC, as a timestamp."""
    return float(calendar.timegm(time.strptime(text, "%Y-%m-%dT%H:%M:%S")))


# -- money ------------------------------------------------------------------------------------


def test_credits_are_valued_rounding_up_to_the_micro_unit() -> None:
    third = PlanValue("USD", 1_000_000, 3, is_time=False)  # 3 credits for 1 USD
    assert [third.credits_micro(n) for n in (0, 1, 2, 3, 4)] == [
        0,
        333_334,
        666_667,
        1_000_000,
        1_333_334,
    ]
    assert PlanValue("USD", 20_000_000, 20, is_time=False).credits_micro(5) == 5_000_000
    assert PlanValue("USD", 1_000_000, 0, is_time=False).credits_micro(1) == 0  # no credits
    assert PlanValue("USD", 1_000_000, 10, is_time=True).credits_micro(1) == 0  # time plan


@pytest.mark.parametrize(
    ("micro", "floor", "ceiling"),
    [
        (0, 0, 0),
        (1, 0, 1),
        (9_999, 0, 1),
        (10_000, 1, 1),
        (10_001, 1, 2),
        (1_999_999, 199, 200),
        (5_000_000, 500, 500),
        (-5, 0, 0),
    ],
)
def test_a_delegations_cents_never_round_up_past_the_mandate(
    micro: int, floor: int, ceiling: int
) -> None:
    assert cents_floor(micro) == floor
    assert cents_ceiling(micro) == ceiling


@pytest.mark.parametrize(
    ("micro", "currency", "text"),
    [
        (0, "USD", "0.00 USD"),
        (1_500_000, "USD", "1.50 USD"),
        (5_000_000, "EUR", "5.00 EUR"),
        (10_000_000, "USD", "10.00 USD"),
        (100_000_000, "USD", "100.00 USD"),
        (1_230_000, "USD", "1.23 USD"),
        (1_235_000, "USD", "1.235 USD"),
        (1_234_567, "USD", "1.234567 USD"),
        (333_334, "USD", "0.333334 USD"),
        (1_000, "USD", "0.001 USD"),
        (10, "USD", "0.00001 USD"),
    ],
)
def test_money_is_written_with_two_decimals_or_more_only_when_they_matter(
    micro: int, currency: str, text: str
) -> None:
    assert format_money(micro, currency) == text


@pytest.mark.parametrize(
    ("label", "currency"),
    [("usdc", "USD"), ("USDC", "USD"), (" usd ", "USD"), ("eurc", "EUR"), ("EUR", "EUR")],
)
def test_a_stable_token_counts_as_its_currency(label: str, currency: str) -> None:
    assert currency_of(label) == currency
    assert currency_of("gbp") == "GBP"  # anything else is itself, upper case


# -- what /svc_allow accepts --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("$5 per day", (5_000_000, "USD", "day", None, None)),
        ("5 usd a week", (5_000_000, "USD", "week", None, None)),
        ("5 EUR total for agent A", (5_000_000, "EUR", "total", "A", None)),
        ("$5 USDC per day", (5_000_000, "USD", "day", None, None)),
        ("0.000001 usdc / month for plan P-1", (1, "USD", "month", None, "P-1")),
        ("2.5 eurc in total", (2_500_000, "EUR", "total", None, None)),
    ],
)
def test_allow_reads_exactly_what_the_person_typed(
    text: str, expected: tuple[int, str, str, str | None, str | None]
) -> None:
    mandate = parse_allow(text, NOW)
    assert mandate == Mandate(mandate.id, *expected, created=NOW)
    assert len(mandate.id) == 12 and int(mandate.id, 16) >= 0


@pytest.mark.parametrize(
    "text",
    [
        "$5 EUR per day",  # a dollar sign and another currency
        "$5 EURC per day",
        "0 USD per day",
        "0.0000001 USD per day",  # finer than a millionth
        "-1 USD per day",
        "5 USD per fortnight",
        "5 USD",
        "5 USD per day please",  # trailing words
        "lots please",
        "",
    ],
)
def test_allow_refuses_anything_else_with_the_usage_line(text: str) -> None:
    with pytest.raises(MandateSyntax) as caught:
        parse_allow(text, NOW)
    assert str(caught.value) == ALLOW_USAGE


@dataclass
class SingleAccount:
    """A gateway without per-user accounts: every command speaks for its own account ``""``."""

    def chat_user(self, ctx: CommandContext) -> Caller | None:
        return None


async def test_allow_from_a_sender_the_gateway_does_not_authorise_sets_nothing() -> None:
    approvals = open_approvals(load_config({}), delivers_commands=True)
    stranger = CommandContext("5 USD per day", "mallory", "telegram", is_authorized_sender=False)
    reply = await allow(approvals, SingleAccount(), stranger)
    assert reply == "Only an authorised user of this gateway may let it spend."
    assert await approvals.ledger.fields("") == {}
    assert await approvals.ledger.fields("telegram:mallory") == {}
    # the gateway's authorised user, the same words: a mandate
    owner = CommandContext("5 USD per day", "alice", "telegram", is_authorized_sender=True)
    assert (await allow(approvals, SingleAccount(), owner)).startswith("Allowed: ")
    assert [k[:2] for k in await approvals.ledger.fields("")] == ["m:"]
    # nor may the stranger end it
    off = CommandContext("off", "mallory", "telegram", is_authorized_sender=False)
    assert (await allow(approvals, SingleAccount(), off)).startswith("Only an authorised user")
    assert [k[:2] for k in await approvals.ledger.fields("")] == ["m:"]


# -- codes bound to their user ----------------------------------------------------------------


def test_a_code_caused_by_Alice_is_not_approved_by_alice() -> None:
    book = PendingBook(ttl_secs=600, clock=lambda: NOW)
    upper = Who("", Caller("Alice", "telegram").identity)
    lower = Who("", Caller("alice", "telegram").identity)
    item = book.add(upper, "order", "p", 1_000_000, "USD", "order p")
    assert book.show(item.code, lower, authorized=True) == (
        f"No pending purchase of yours has the code {item.code}."
    )
    shown = book.show(item.code, upper, authorized=True)  # still there for Alice
    assert shown is item
    assert book.take(item.code, lower, authorized=True, confirm=item.confirm) == (
        f"No pending purchase of yours has the code {item.code}."
    )  # not with the word either
    assert book.take(item.code, upper, authorized=True, confirm=item.confirm) is item


# -- what a mandate covers --------------------------------------------------------------------


def test_a_mandate_covers_only_its_currency_agent_and_plan() -> None:
    usd = parse_allow("5 USD per day", NOW)
    assert usd.covers("A", "P", "USD") and usd.covers(None, "P", "USD")
    assert not usd.covers("A", "P", "EUR")
    agent = parse_allow("5 USD per day for agent A", NOW)
    assert agent.covers("A", "P", "USD") and agent.covers("A", "Q", "USD")
    assert not agent.covers("B", "P", "USD") and not agent.covers(None, "P", "USD")
    assert not agent.covers("a", "P", "USD")
    plan = parse_allow("5 USD per day for plan P", NOW)
    assert plan.covers("A", "P", "USD") and plan.covers(None, "P", "USD")
    assert not plan.covers("A", "Q", "USD") and not plan.covers("A", "P", "EUR")


def dollar_plan(plan_id: str = "P", token: str = USDC) -> Plan:
    """One credit a request, 1 (USD or EUR, by ``token``) a credit."""
    return Plan.model_validate(
        {
            "id": plan_id,
            "registry": {
                "price": {"isCrypto": True, "amounts": [1_000_000], "tokenAddress": token},
                "credits": {"amount": 1, "minAmount": 1, "maxAmount": 1},
            },
        }
    )


@dataclass
class Holding:
    """The one service read the gate makes to decide: the payer's balance (credits held, so no
    top-up is reserved and a query holds one request's worth)."""

    async def get_plan_balance(self, plan_id: str) -> Any:
        return SimpleNamespace(balance=1_000_000)


class GatewaysOwn:
    """The core of a single-account gateway (its own account, ``""``)."""

    identity: str | None = None

    def client(self) -> Any:
        return Holding()


async def asks_for_code(approvals: Approvals, plan: Plan, agent_id: str | None) -> bool:
    """THE one call into the gate (approvals/gate.py is being rewritten: adapt here). Whether
    one request of ``plan`` from ``agent_id`` asks the person for a code; when it does not, what
    the mandate reserved is released again."""

    async def ask(_value: PlanValue, _amount: int, _top_up: bool) -> ApprovalNeeded:
        return ApprovalNeeded({}, None)  # type: ignore[arg-type]

    try:
        ticket = await approvals.ticket(
            GatewaysOwn(), plan, agent_id, kind="query", ask=ask, caller=""
        )
    except ApprovalNeeded:
        return True
    assert ticket is not None and ticket.rid  # within a mandate
    await ticket.release()
    return False


async def human_gate(mandate: str, **config: Any) -> Approvals:
    approvals = open_approvals(load_config(config), delivers_commands=True)
    await approvals.ledger.put("", parse_allow(mandate))
    return approvals


async def test_a_mandate_pays_only_in_its_currency() -> None:
    gate = await human_gate("5 USD per day")
    assert not await asks_for_code(gate, dollar_plan(), "A")
    assert await asks_for_code(gate, dollar_plan(token=EURC), "A")


async def test_a_mandate_for_agent_A_does_not_pay_agent_B() -> None:
    gate = await human_gate("5 USD per day for agent A")
    assert not await asks_for_code(gate, dollar_plan(), "A")
    assert await asks_for_code(gate, dollar_plan(), "B")


async def test_a_mandate_for_plan_P_does_not_pay_plan_Q() -> None:
    gate = await human_gate("5 USD per day for plan P")
    assert not await asks_for_code(gate, dollar_plan("P"), "A")
    assert await asks_for_code(gate, dollar_plan("Q"), "A")


async def test_the_operators_usd_cap_is_not_bypassed_in_another_currency() -> None:
    uncapped = await human_gate("5 EUR per day")
    assert not await asks_for_code(uncapped, dollar_plan(token=EURC), "A")
    capped = await human_gate("5 EUR per day", maxUserSpendPerDay=10)
    assert await asks_for_code(capped, dollar_plan(token=EURC), "A")  # every time: a code
    dollars = await human_gate("5 USD per day", maxUserSpendPerDay=10)
    assert not await asks_for_code(dollars, dollar_plan(), "A")
    below = await human_gate("5 USD per day", maxUserSpendPerDay=0.5)  # the cap bounds it
    assert await asks_for_code(below, dollar_plan(), "A")


# -- windows ----------------------------------------------------------------------------------


@pytest.fixture
def far_east_local_time(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The process's local time 14 hours ahead of UTC: windows must not follow it."""
    monkeypatch.setenv("TZ", "UTC-14")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


@pytest.mark.usefixtures("far_east_local_time")
def test_weeks_are_iso_weeks_in_utc() -> None:
    # Monday 2024-12-30 to Friday 2025-01-03: ISO week 1 of 2025, across the new year
    assert window("week", utc("2024-12-30T00:00:00")) == "w2025-01"
    assert window("week", utc("2025-01-03T12:00:00")) == "w2025-01"
    assert window("week", utc("2025-01-05T23:59:59")) == "w2025-01"  # Sunday: the same week
    assert window("week", utc("2025-01-06T00:00:00")) == "w2025-02"  # Monday: the next
    assert window("week", utc("2024-12-29T23:59:59")) == "w2024-52"


@pytest.mark.usefixtures("far_east_local_time")
def test_days_and_months_turn_at_utc_midnight() -> None:
    last, first = utc("2025-01-31T23:59:59"), utc("2025-02-01T00:00:00")
    assert (window("day", last), window("day", first)) == ("d2025-01-31", "d2025-02-01")
    assert (window("month", last), window("month", first)) == ("m2025-01", "m2025-02")
    assert window("day", utc("2024-12-31T23:59:59")) == "d2024-12-31"
    assert window("month", utc("2024-12-31T23:59:59")) == "m2024-12"
    assert window("total", last) == window("total", first) == "total"
