"""The agent card: what a paid agent says about itself at ``/.well-known/agent.json``.

The paid endpoint serves it (:func:`build_card`); ``svc_queryAgent`` reads it before paying
(:func:`fetch_card`, :func:`check_card`) so that a token is never spent on an agent that is not
the one named, or that cannot take the plan's payment scheme.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit, urlunsplit

from ..safe_text import one_line, quoted

if TYPE_CHECKING:
    import httpx

CARD_PATH = "/.well-known/agent.json"
CARD_MAX_BYTES = 64 * 1024
#: the longest reading the (optional) card may take, within the query's deadline: an agent that
#: never serves one leaves the rest of ``requestTimeoutSecs`` to the paid request
CARD_SECS = 5.0
_PAYMENT_KEYS = ("agentId", "planId", "schemes", "x402Version")
#: the longest id (agent, plan, scheme) from an agent or the service shown in a tool's text
ID_LIMIT = 100


def build_card(
    *,
    name: str,
    description: str | None,
    agent_id: str | None,
    plan_id: str,
    url: str,
    scheme: str,
    network: str,
    credits_per_request: int,
    max_answer_bytes: int | None = None,
    idempotency_ttl_secs: float | None = None,
) -> dict[str, Any]:
    """The card the paid endpoint serves (both at ``<path>`` + CARD_PATH and at the root);
    with ``idempotency_ttl_secs``, how a retry avoids paying twice (issue 46)."""
    retries = {
        "header": "Idempotency-Key",
        "paymentIdentifier": True,  # x402's payment-identifier extension, in the payment
        "ttlSecs": idempotency_ttl_secs,
    }
    return {
        "name": name,
        "description": description or 'A paid agent: POST {"prompt": ...} with an x402 token',
        "agentId": agent_id,
        "planId": plan_id,
        "url": url,
        "schemes": [scheme],
        "networks": [network],
        "creditsPerRequest": credits_per_request,
        "x402Version": 2,
        **({"maxAnswerBytes": max_answer_bytes} if max_answer_bytes is not None else {}),
        **({"idempotency": retries} if idempotency_ttl_secs is not None else {}),
    }


def card_urls(agent_url: str) -> list[str]:
    """Where to look, in order: ``<agentUrl>/.well-known/agent.json``, then the origin's."""
    parts = urlsplit(agent_url)
    own = urlunsplit((parts.scheme, parts.netloc, parts.path.rstrip("/") + CARD_PATH, "", ""))
    root = urlunsplit((parts.scheme, parts.netloc, CARD_PATH, "", ""))
    return list(dict.fromkeys([own, root]))


class TooLarge(Exception):
    """A response body went past the size cap; ``head`` holds the first ``limit`` bytes."""

    def __init__(self, head: bytes) -> None:
        super().__init__(f"more than {len(head)} bytes")
        self.head = head


async def read_limited(response: httpx.Response, limit: int) -> bytes:
    """Read a streamed body, stopping as soon as it passes ``limit`` bytes."""
    chunks: list[bytes] = []
    size = 0
    async for chunk in response.aiter_bytes():
        size += len(chunk)
        chunks.append(chunk)
        if size > limit:
            raise TooLarge(b"".join(chunks)[:limit])
    return b"".join(chunks)


@dataclass(frozen=True)
class FoundCard:
    card: dict[str, Any]
    url: str


async def fetch_card(http: httpx.AsyncClient, agent_url: str) -> FoundCard | None:
    """The first card that answers 200 with a JSON object; ``None`` when there is none, or
    when none came within :data:`CARD_SECS`."""
    try:
        async with asyncio.timeout(CARD_SECS):
            return await _first_card(http, agent_url)
    except TimeoutError:  # this bound's own: the query's deadline is the caller's to report
        return None


async def _first_card(http: httpx.AsyncClient, agent_url: str) -> FoundCard | None:
    import httpx  # lazily: only svc_queryAgent reads cards, with its own one-off client

    for url in card_urls(agent_url):
        try:
            async with http.stream("GET", url, headers={"Accept": "application/json"}) as resp:
                if resp.status_code != 200:
                    continue
                data = json.loads(await read_limited(resp, CARD_MAX_BYTES))
        except (httpx.HTTPError, TooLarge, ValueError, RecursionError):
            continue
        if isinstance(data, dict):
            return FoundCard(data, url)
    return None


class CardRejected(Exception):
    """The card shows that paying this agent would be a mistake."""

    def __init__(self, code: str, message: str, hint: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.hint = hint


@dataclass
class CardVerdict:
    """The agent id to pay for (ours, else the card's) and anything worth telling the user."""

    agent_id: str | None
    warnings: list[str] = field(default_factory=list)


def check_card(
    found: FoundCard | None, *, agent_id: str | None, plan_id: str, scheme: str, agent_url: str
) -> CardVerdict:
    """Refuse (raise :class:`CardRejected`) on a different agentId or no usable scheme.

    No card, or a card without payment fields, is only a warning: SPEC.md says the card
    "should" confirm the agent, and verify still protects the payer (no valid token, no work).
    """
    if found is None:
        return CardVerdict(
            agent_id,
            [f"No agent card at {' or '.join(card_urls(agent_url))}: could not confirm the agent."],
        )
    card, where = found.card, found.url
    if not any(key in card for key in _PAYMENT_KEYS):
        return CardVerdict(
            agent_id, [f"The card at {where} carries no payment fields: could not confirm it."]
        )
    verdict = CardVerdict(agent_id)
    named = card.get("agentId")
    if isinstance(named, str) and named:
        if agent_id and named != agent_id:
            raise CardRejected(
                "agent_mismatch",
                f"The agent card at {where} names agent {one_line(named, ID_LIMIT)}, not "
                f"{agent_id}; nothing was paid",
                "Check agentUrl and agentId: you may be talking to a different agent.",
            )
        verdict.agent_id = named
    schemes = card.get("schemes")
    listed = [s for s in schemes if isinstance(s, str)] if isinstance(schemes, list) else []
    if scheme not in listed:
        shown = [one_line(s, ID_LIMIT) for s in listed[:10]]
        raise CardRejected(
            "scheme_not_accepted",
            f"The agent card at {where} accepts {shown or 'no payment scheme'}, not {scheme} "
            f"(the scheme of plan {plan_id}); nothing was paid",
            "Pay with a plan this agent accepts, or use paymentType fiat/crypto to match it.",
        )
    card_plan = card.get("planId")
    if isinstance(card_plan, str) and card_plan and card_plan != plan_id:
        verdict.warnings.append(
            f"The agent card names plan {one_line(card_plan, ID_LIMIT)}; you are paying with "
            f"plan {plan_id}."
        )
    card_url = card.get("url")
    if isinstance(card_url, str) and card_url and card_url.rstrip("/") != agent_url.rstrip("/"):
        verdict.warnings.append(f"The agent card gives its URL as {quoted(card_url, 300)}.")
    return verdict
