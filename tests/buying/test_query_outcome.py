"""What svc_queryAgent says a failed paid request cost, word for word, for the balances the
service can report back (issue 16 #9): unknown, unchanged, lower, and higher (a top-up)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any, cast

import pytest

from svc_gateway.account.core import PluginCore
from svc_gateway.buying import charges as qo
from svc_gateway.chat.failure import ToolFailure
from svc_gateway.service.errors import ServiceError
from svc_gateway.tools import TOOLS

FAILURE = ToolFailure("agent_error", "The agent answered HTTP 502", "Retry later.")


class _Balances:
    def __init__(self, answer: int | Exception | None) -> None:
        self.answer = answer

    async def get_plan_balance(self, plan_id: str) -> Any:
        assert plan_id == "p1"
        if self.answer is None:
            await asyncio.sleep(3600)
        if isinstance(self.answer, Exception):
            raise self.answer
        return SimpleNamespace(balance=self.answer)


def core_reading(answer: int | Exception | None) -> PluginCore:
    client = _Balances(answer)
    return cast(PluginCore, SimpleNamespace(client=lambda: client))


async def charge(before: int | None, after: int | Exception, answered: bool = True) -> ToolFailure:
    step = qo.Step(token_sent=True, plan_id="p1", balance_before=before)
    return await qo.with_charge(core_reading(after), step, FAILURE, answered=answered)


async def test_one_credit_charged_is_singular_and_says_a_retry_pays_again() -> None:
    told = await charge(5, 4)
    assert told.code == "agent_error"
    assert told.message == (
        "The agent answered HTTP 502; the service shows 1 credit charged for it "
        "(balance 5 -> 4 credits)"
    )
    assert told.hint == (
        "The agent was paid and gave no answer: a retry pays again. Tell the agent's owner "
        "(the charge is in your plan's history), or use another agent."
    )


@pytest.mark.parametrize(("before", "after"), [(None, 5), (5, ServiceError("down", status=503))])
async def test_an_unknown_balance_is_never_reported_as_not_charged(
    before: int | None, after: int | Exception
) -> None:
    told = await charge(before, after)
    assert told.message == (
        "The agent answered HTTP 502; whether it was charged is not known: your balance could "
        "not be read from the service"
    )
    assert told.hint == "Check svc_checkBalance before retrying. Retry later."


async def test_a_balance_that_rose_is_a_top_up_not_a_refund() -> None:
    told = await charge(0, 8)
    assert told.message == (
        "The agent answered HTTP 502; your balance went from 0 to 8 credits: the token's "
        "delegation bought the plan again (automatic top-up) during the request, so what the "
        "request burned cannot be told from the balance"
    )
    assert "defaultSpendingLimitCents" in told.hint


async def test_unchanged_after_an_answer_is_nothing_charged_and_keeps_the_hint() -> None:
    told = await charge(5, 5)
    assert told.message.endswith("; the service shows nothing was charged (balance 5 credits)")
    assert told.hint == "Retry later."
    pending = await charge(5, 5, answered=False)
    assert "could still settle it" in pending.message
    assert pending.hint.startswith("Check svc_checkBalance in a minute before retrying.")


async def test_a_balance_read_that_hangs_gives_up_after_the_readback_bound(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(qo, "READBACK_SECS", 0.05)
    assert await qo.read_balance(core_reading(None), "p1") is None
    assert await qo.read_balance(core_reading(7), "p1") == 7


def test_the_tool_description_says_what_top_up_and_the_deadline_mean_for_a_buyer() -> None:
    """Issue 15: a buyer learns that paying can buy the plan, and what bounds it."""
    description = TOOLS["svc_queryAgent"].description
    assert "automatic top-up" in description
    assert "bounded by its spending limit (defaultSpendingLimitCents)" in description
    assert "requestTimeoutSecs bounds the whole query" in description
    assert "what the service shows was charged" in description


class _After:
    def __init__(self, balance: int) -> None:
        self.balance = balance

    async def get_plan_balance(self, plan_id: str) -> Any:
        return SimpleNamespace(balance=self.balance)


@pytest.mark.parametrize(
    ("before", "after", "warned"), [(0, 8, True), (10, 8, False), (None, 8, False)]
)
async def test_a_balance_that_rose_during_a_paid_answer_is_a_top_up_said_out_loud(
    before: int | None, after: int, warned: bool
) -> None:
    client = _After(after)
    core = cast(PluginCore, SimpleNamespace(client=lambda: client))
    result: dict[str, Any] = {}
    await qo.balance_after(core, "p1", result, before)
    assert result["balanceAfter"] == str(after)
    top_up = [w for w in result["warnings"] if "automatic top-up" in w]
    assert bool(top_up) == warned
    if warned:  # no receipt: nothing known burned, the rise is what was bought
        assert top_up[0].startswith("This request bought the plan (automatic top-up: 8 credits")
        assert "your balance went from 0 to 8 credits" in top_up[0]
        assert "defaultSpendingLimitCents" in top_up[0]  # "model" mode: the delegation's limit


@pytest.mark.parametrize(("redeemed", "bought"), [("2", 10), ("x", 8)])
async def test_a_top_up_counts_what_it_bought_and_a_person_is_told_what_they_approved(
    redeemed: str, bought: int
) -> None:
    """Issue 44: the credits bought are the rise plus what the request burned after the
    top-up (10 bought, 2 burned: 0 -> 8), and in "human" mode the warning names the person's
    approval, not defaultSpendingLimitCents; a receipt's unreadable count is taken as 0."""
    client = _After(8)
    core = cast(
        PluginCore,
        SimpleNamespace(client=lambda: client, approvals=SimpleNamespace(human=True)),
    )
    result: dict[str, Any] = {"receipt": {"creditsRedeemed": redeemed}}
    await qo.balance_after(core, "p1", result, 0)
    assert result["topUp"]["creditsBought"] == str(bought)
    (warning,) = [w for w in result["warnings"] if "automatic top-up" in w]
    assert f"automatic top-up: {bought} credits, within what you approved" in warning
    assert "defaultSpendingLimitCents" not in warning
