"""What a query's ticket is charged after the query (buying/approval.py's finish_ticket): the
credits redeemed, and the plan's price when a top-up happened or cannot be ruled out."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, cast

from svc_gateway.account.core import PluginCore
from svc_gateway.approvals.gate import Approvals, Ticket
from svc_gateway.approvals.ledger import LocalLedger, Slot
from svc_gateway.approvals.mandates import parse_allow, window
from svc_gateway.approvals.money import PlanValue
from svc_gateway.approvals.pending import Who
from svc_gateway.buying.approval import finish_ticket
from svc_gateway.buying.charges import Step
from svc_gateway.config import load_config
from svc_gateway.service.errors import ServiceError

NOW = 1_700_000_000.0
#: 10 credits for 4 USD: a credit is 0.40
PLAN = PlanValue("USD", 4_000_000, 10, False)


class Unreadable:
    async def get_plan_balance(self, plan_id: str) -> Any:
        raise ServiceError("down", status=503)


class Reads:
    """The service's balance after the query."""

    def __init__(self, balance: int) -> None:
        self.balance = balance

    async def get_plan_balance(self, plan_id: str) -> Any:
        return SimpleNamespace(balance=self.balance)


async def left_after(
    credits: int | None,
    topped_up: bool | None,
    before: int | None = None,
    after: int | None = None,
) -> int:
    """What a 5 USD mandate has left after a query that reserved one credit and a top-up
    (4.40) is finished with ``credits`` and ``topped_up``; the balance read just before the
    token went out (``before``) and the one read back (``after``; ``None``: not readable)."""
    approvals = Approvals(load_config({}), LocalLedger(), human=True, clock=lambda: NOW)
    mandate = parse_allow("5 USD per day", NOW)
    await approvals.ledger.put("", mandate)
    slot = Slot(mandate.id, window("day", NOW), mandate.amount_micro)
    assert (await approvals.ledger.reserve("", "r1", 4_400_000, [slot], 3600, NOW)).ok
    ticket = Ticket(approvals, Who(""), "query", "p", 400, 60, 1, PLAN, 4_400_000, 4_000_000, "r1")
    client = Unreadable() if after is None else Reads(after)
    core = cast(PluginCore, SimpleNamespace(client=lambda: client))
    step = Step(token_sent=True, plan_id="p", balance_before=before, ticket=ticket)
    await finish_ticket(core, step, credits, topped_up)
    (state,) = await approvals.mandates("")
    return state.left_micro


async def test_a_top_up_that_cannot_be_ruled_out_is_charged_to_the_mandate() -> None:
    assert await left_after(1, None) == 600_000  # 5 - (0.40 + 4.00): the top-up counted
    assert await left_after(1, False) == 4_600_000  # the balance showed none: 0.40
    assert await left_after(1, True) == 600_000
    assert await left_after(None, None) == 600_000  # nothing known: the whole reservation


async def test_the_balance_read_back_tells_whether_a_top_up_happened() -> None:
    assert await left_after(1, None, before=5, after=4) == 4_600_000  # no top-up: 0.40
    assert await left_after(1, None, before=0, after=9) == 600_000  # bought: 4.40
    # a failed query: the credits are what the service shows gone, the top-up if any
    assert await left_after(None, None, before=5, after=4) == 4_600_000
    assert await left_after(None, None, before=0, after=9) == 600_000  # not known: all of it
