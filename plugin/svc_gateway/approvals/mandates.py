"""Spending mandates: what ``/svc_allow`` says, and the window each one counts spending in.

``/svc_allow 5 USD per day`` (``per week``, ``per month``, ``total``; ``$5`` means USD), with an
optional scope: ``for agent <id>`` or ``for plan <id>``. Windows are calendar ones in UTC
(a day, an ISO week, a month) so every replica names the same window for the same moment.
"""

from __future__ import annotations

import re
import secrets
import time
from dataclasses import asdict, dataclass
from decimal import Decimal, InvalidOperation
from typing import Any, Literal

from .money import currency_of, format_money, to_micro

Period = Literal["day", "week", "month", "total"]
PERIODS: tuple[str, ...] = ("day", "week", "month", "total")

ALLOW_USAGE = (
    "Usage: /svc_allow <amount> <currency> per day|week|month, or /svc_allow <amount> "
    "<currency> total, optionally followed by 'for agent <id>' or 'for plan <id>' (e.g. "
    "/svc_allow 5 USD per day); /svc_allow alone lists your mandates, /svc_allow off ends them."
)
_ALLOW = re.compile(
    r"(?P<dollar>\$)?\s*(?P<amount>\d{1,7}(?:\.\d{1,6})?)\s*(?P<currency>[A-Za-z]{3,5})?\s+"
    r"(?:(?:per|a|/)\s*(?P<period>day|week|month)|(?P<total>total|in total))"
    r"(?:\s+for\s+(?P<scope>agent|plan)\s+(?P<target>[A-Za-z0-9:._-]{1,200}))?",
    re.IGNORECASE,
)


class MandateSyntax(ValueError):
    """``/svc_allow`` arguments that say no mandate: the message is the one-line usage."""


@dataclass(frozen=True)
class Mandate:
    """Standing consent: spend up to ``amount_micro`` of ``currency`` per ``period``."""

    id: str
    amount_micro: int
    currency: str
    period: Period
    agent_id: str | None = None
    plan_id: str | None = None
    created: float = 0.0

    def covers(self, agent_id: str | None, plan_id: str, currency: str) -> bool:
        """The mandate applies to a purchase from ``agent_id`` on ``plan_id`` in ``currency``."""
        if self.agent_id is not None and self.agent_id != agent_id:
            return False
        if self.plan_id is not None and self.plan_id != plan_id:
            return False
        return self.currency == currency

    def describe(self) -> str:
        per = "in total" if self.period == "total" else f"per {self.period}"
        scope = (
            f" for agent {self.agent_id}"
            if self.agent_id
            else f" for plan {self.plan_id}"
            if self.plan_id
            else ""
        )
        return f"{format_money(self.amount_micro, self.currency)} {per}{scope}"

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Mandate:
        period = str(data.get("period"))
        if period not in PERIODS:
            raise ValueError("unknown period")
        return cls(
            id=str(data["id"]),
            amount_micro=int(data["amount_micro"]),
            currency=str(data["currency"]),
            period=period,  # type: ignore[arg-type]
            agent_id=data.get("agent_id") or None,
            plan_id=data.get("plan_id") or None,
            created=float(data.get("created") or 0.0),
        )


def parse_allow(args: str, now: float | None = None) -> Mandate:
    """The mandate ``args`` state; :class:`MandateSyntax` (the usage line) for anything else."""
    match = _ALLOW.fullmatch(args.strip())
    if match is None:
        raise MandateSyntax(ALLOW_USAGE)
    currency = match.group("currency")
    if match.group("dollar"):
        if currency and currency_of(currency) != "USD":
            raise MandateSyntax(ALLOW_USAGE)
        currency = "USD"
    if not currency:
        raise MandateSyntax(ALLOW_USAGE)
    try:
        micro = to_micro(Decimal(match.group("amount")))
    except InvalidOperation:
        raise MandateSyntax(ALLOW_USAGE) from None
    if micro <= 0:
        raise MandateSyntax(ALLOW_USAGE)
    period = (match.group("period") or "total").lower()
    scope, target = (match.group("scope") or "").lower(), match.group("target")
    return Mandate(
        id=secrets.token_hex(6),
        amount_micro=micro,
        currency=currency_of(currency),
        period=period,  # type: ignore[arg-type]
        agent_id=target if scope == "agent" else None,
        plan_id=target if scope == "plan" else None,
        created=time.time() if now is None else now,
    )


def window(period: str, now: float) -> str:
    """The name of the window ``now`` falls in (UTC): ``d2025-01-31``, ``w2025-05``, ..."""
    moment = time.gmtime(now)
    if period == "day":
        return time.strftime("d%Y-%m-%d", moment)
    if period == "week":
        return time.strftime("w%G-%V", moment)
    if period == "month":
        return time.strftime("m%Y-%m", moment)
    return "total"


def window_word(period: str) -> str:
    return {"day": "today", "week": "this week", "month": "this month"}.get(period, "in total")
