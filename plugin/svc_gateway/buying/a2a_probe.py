"""svc_queryAgent's A2A probe: is ``agentUrl`` an A2A agent, and which interface is paid.

``agentUrl`` is an A2A interface when the card at its origin's ``/.well-known/agent-card.json``
names it (:func:`a2a_interface`); it is an A2A agent's address when the card at
``<agentUrl>/.well-known/agent-card.json`` (the origin's, for an address without a path) names
a JSON-RPC interface (:func:`named_interface`): that interface is the one paid, under every rule
of :mod:`.a2a`. Anything else, or a probe that fails within :data:`PROBE_SECS`, is
:class:`NotA2A`: the HTTP path buys from it.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from ..account.core import PluginCore
from ..chat.failure import ToolFailure
from ..interop.agent_card import TooLarge, read_limited
from .addresses import check_agent_address
from .charges import Step, timed_out

if TYPE_CHECKING:
    import httpx

CARD_PATH = "/.well-known/agent-card.json"
CARD_MAX_BYTES = 64 * 1024
#: the longest the A2A probe (address check and card) may take before the HTTP path is tried
PROBE_SECS = 5.0


class NotA2A(Exception):
    """``agentUrl`` is not an interface of an A2A agent card: the HTTP path buys from it."""


def origin_of(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}"


def same_url(a: str, b: str) -> bool:
    return a.rstrip("/") == b.rstrip("/")


def a2a_interface(card: dict[str, Any], agent_url: str) -> bool:
    """The card (as JSON) names ``agent_url`` as one of its A2A 1.x JSON-RPC interfaces."""
    listed = card.get("supportedInterfaces")
    return isinstance(listed, list) and any(
        isinstance(item, dict)
        and isinstance(item.get("url"), str)
        and same_url(item["url"], agent_url)
        and item.get("protocolBinding") == "JSONRPC"
        for item in listed
    )


def named_interface(card: dict[str, Any]) -> str | None:
    """The JSON-RPC interface a card (as JSON) names for a client that starts at its address:
    the first of version 1.x (what this client speaks), else the first JSON-RPC one."""
    listed = card.get("supportedInterfaces")
    urls = [
        (str(item.get("protocolVersion") or ""), item["url"])
        for item in (listed if isinstance(listed, list) else [])
        if isinstance(item, dict)
        and item.get("protocolBinding") == "JSONRPC"
        and isinstance(item.get("url"), str)
        and item["url"]
    ]
    return next((url for version, url in urls if version.startswith("1.")), None) or next(
        (url for _version, url in urls), None
    )


@dataclass(frozen=True)
class Interface:
    """Where to pay: the JSON-RPC interface URL, and the base URL its card resolves at."""

    url: str
    card_base: str


async def _card_json(http: httpx.AsyncClient, card_url: str) -> dict[str, Any] | None:
    import httpx

    try:
        async with http.stream("GET", card_url) as reply:
            if reply.status_code != 200:
                return None
            data = json.loads(await read_limited(reply, CARD_MAX_BYTES))
    except (httpx.HTTPError, TooLarge, ValueError, RecursionError):
        return None
    return data if isinstance(data, dict) else None


async def probe(core: PluginCore, agent_url: str, secs: float, until: float) -> Interface:
    """The interface to pay: ``agent_url`` when its origin's card names it as an A2A
    interface, else the one the card at ``agent_url`` (the agent's address) names;
    :class:`NotA2A` when neither is there, or the agent's address is not allowed. A refused
    address is left to the HTTP path, which checks (and reports) it again; a DNS lookup that
    outlasts the deadline is reported here."""
    import httpx

    deadline = core.config.request_timeout_secs
    scope = asyncio.timeout_at(until)  # the query's one deadline
    try:
        async with scope:
            await check_agent_address(core, agent_url)
    except TimeoutError:  # only the scope's: a resolver's own is an OSError, a ToolFailure here
        raise timed_out(Step(), deadline, agent_url) from None  # as the HTTP path says it
    except ToolFailure:
        raise NotA2A from None  # the HTTP path checks again and reports it
    origin, base = origin_of(agent_url), agent_url.rstrip("/")
    try:
        left = max(0.0, min(secs, until - asyncio.get_running_loop().time()))
        async with asyncio.timeout(left):
            async with httpx.AsyncClient(timeout=secs, follow_redirects=False) as http:
                raw = await _card_json(http, origin + CARD_PATH)
                if raw is not None and a2a_interface(raw, agent_url):
                    return Interface(agent_url, origin)
                # an address with a path has its card below it (one expression: coverage
                # could not see an if's false arc out of the two async with blocks)
                raw = await _card_json(http, base + CARD_PATH) if base != origin else raw
    except TimeoutError:
        raise NotA2A from None
    named = named_interface(raw) if raw is not None else None
    if named is None:
        raise NotA2A
    return Interface(named, base)
