"""Issue 25's pieces on their own: what /svc_allow accepts, calendar windows, codes bound to
their user and single use, a reservation that holds in every slot or none, and a host that
cannot deliver commands running as approval "model" (and saying so)."""

from __future__ import annotations

import logging

import pytest

from svc_gateway.approvals.ledger import LocalLedger, Slot
from svc_gateway.approvals.mandates import ALLOW_USAGE, MandateSyntax, parse_allow, window
from svc_gateway.approvals.opening import NO_COMMANDS, open_approvals
from svc_gateway.approvals.pending import Pending, PendingBook, Who
from svc_gateway.config import ConfigError, load_config


@pytest.mark.parametrize(
    ("text", "micro", "currency", "period", "agent", "plan"),
    [
        ("5 USD per day", 5_000_000, "USD", "day", None, None),
        ("$2.50 per week", 2_500_000, "USD", "week", None, None),
        (
            "10 usdc per month for agent did:svc:abc",
            10_000_000,
            "USD",
            "month",
            "did:svc:abc",
            None,
        ),
        ("3 EUR total for plan 123", 3_000_000, "EUR", "total", None, "123"),
    ],
)
def test_allow_reads_amount_currency_period_and_scope(
    text: str, micro: int, currency: str, period: str, agent: str | None, plan: str | None
) -> None:
    mandate = parse_allow(text)
    assert (mandate.amount_micro, mandate.currency, mandate.period) == (micro, currency, period)
    assert (mandate.agent_id, mandate.plan_id) == (agent, plan)


@pytest.mark.parametrize(
    "text", ["5", "5 per day", "lots", "-5 USD per day", "0 USD per day", "$5 EUR per day", "5 USD"]
)
def test_malformed_allow_is_the_usage_line(text: str) -> None:
    with pytest.raises(MandateSyntax) as caught:
        parse_allow(text)
    assert str(caught.value) == ALLOW_USAGE and ALLOW_USAGE.startswith("Usage: /svc_allow")


def test_windows_are_utc_calendar_ones() -> None:
    moment = 1_700_000_000.0  # 2023-11-14 22:13:20 UTC, a Tuesday of ISO week 46
    assert [window(p, moment) for p in ("day", "week", "month", "total")] == [
        "d2023-11-14",
        "w2023-46",
        "m2023-11",
        "total",
    ]


def confirmed(book: PendingBook, code: str, who: Who, *, authorized: bool) -> Pending | str:
    """What the person does: look at the code (the plugin shows a confirmation word), then
    confirm with that word."""
    shown = book.show(code, who, authorized=authorized)
    if isinstance(shown, str):
        return shown
    return book.take(code, who, authorized=authorized, confirm=shown.confirm)


def test_a_code_works_once_for_its_own_user_until_it_expires() -> None:
    now = [1000.0]
    book = PendingBook(ttl_secs=10, clock=lambda: now[0])
    alice, bob = Who("", "t:alice"), Who("", "t:bob")
    item = book.add(alice, "order", "p", 1, "USD", "order p")
    assert isinstance(confirmed(book, item.code, bob, authorized=True), str)  # another user
    assert confirmed(book, item.code.lower(), alice, authorized=True) is item  # any case
    assert isinstance(confirmed(book, item.code, alice, authorized=True), str)  # used once
    late = book.add(alice, "order", "p", 1, "USD", "order p")
    now[0] += 11
    assert "expired" in str(confirmed(book, late.code, alice, authorized=True))
    nobody = book.add(Who(""), "order", "p", 1, "USD", "order p")  # the host named nobody
    assert isinstance(confirmed(book, nobody.code, Who("", "t:x"), authorized=False), str)


def test_a_code_buys_only_with_the_word_the_plugin_showed_the_person() -> None:
    """Issue 41, item 4: the model relays the code, so it cannot choose what the person
    approves: the purchase goes through only with the confirmation word that the plugin's own
    description of it carried; a wrong or unseen word buys nothing and must be looked up
    again."""
    book = PendingBook(ttl_secs=60, clock=lambda: 0.0)
    alice = Who("", "t:alice")
    item = book.add(alice, "order", "p", 50_000_000, "USD", "order plan 'big'")
    unseen = book.take(item.code, alice, authorized=True, confirm="ABCD")
    assert isinstance(unseen, str) and "nothing was bought" in unseen
    shown = book.show(item.code, alice, authorized=True)
    assert isinstance(shown, Pending) and len(shown.confirm) == 4
    word = shown.confirm
    wrong = "".join("A" if c != "A" else "B" for c in word)
    assert isinstance(book.take(item.code, alice, authorized=True, confirm=wrong), str)
    # a wrong word voids the one shown: the person must look at the purchase again
    assert isinstance(book.take(item.code, alice, authorized=True, confirm=word), str)
    again = book.show(item.code, alice, authorized=True)
    assert isinstance(again, Pending)
    assert book.take(item.code, alice, authorized=True, confirm=again.confirm.lower()) is item
    # dropping (/svc_deny) needs no word
    other = book.add(alice, "order", "p", 1, "USD", "order p")
    assert book.take(other.code, alice, authorized=True, confirm=None) is other


async def test_a_reservation_holds_in_every_slot_or_none() -> None:
    ledger = LocalLedger()
    day, total = Slot("m1", "d1", 5_000_000, False), Slot("m2", "total", 2_000_000, False)
    first = await ledger.reserve("a", "r1", 1_500_000, [day, total], 60, 0)
    assert first.ok and first.left_micro == 500_000
    refused = await ledger.reserve("a", "r2", 1_000_000, [day, total], 60, 0)
    assert not refused.ok and refused.refused_by == "m2"
    await ledger.finish("a", "r1", 0)  # released: nothing spent
    assert (await ledger.reserve("a", "r3", 2_000_000, [day, total], 60, 0)).ok
    # a reservation nobody finished (its process died) counts as spent once it expires
    assert not (await ledger.reserve("a", "r4", 1, [total], 60, 100)).ok


def test_a_host_that_cannot_deliver_commands_runs_as_model_and_says_so(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.WARNING):
        approvals = open_approvals(load_config({}), delivers_commands=False)
    assert approvals.human is False and NO_COMMANDS in caplog.text
    assert open_approvals(load_config({}), delivers_commands=True).human is True


def test_the_approval_settings_are_checked() -> None:
    assert load_config({}).approval == "human" and load_config({}).approval_ttl_secs == 600
    with pytest.raises(ConfigError, match="approvalTtlSecs"):
        load_config({"approvalTtlSecs": 5})
    with pytest.raises(ConfigError, match="approval"):
        load_config({"approval": "robot"})
    with pytest.raises(ConfigError, match="maxUserSpendPerDay"):
        load_config({"maxUserSpendPerDay": 0})
