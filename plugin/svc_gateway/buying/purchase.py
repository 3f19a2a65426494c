"""svc_queryAgent steps 3-5: which agent answers at the URL, whether it registered that URL, and
which plan pays (the card is read, never trusted on its own)."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from ..account.core import PluginCore
from ..chat.failure import ToolFailure
from ..chat.plans import plan_payment_type
from ..interop.agent_card import ID_LIMIT, CardRejected, FoundCard, check_card
from ..safe_text import one_line
from ..service.errors import NotFound
from ..service.models import SCHEME_CARD, SCHEME_CRYPTO
from .addresses import DEFAULT_PORTS
from .answers import Purchase
from .request import AgentQuery

HTTP_VERB = "POST"


def _normalise(url: str) -> str:
    parts = urlsplit(url.strip())
    scheme = parts.scheme.lower()
    host = (parts.hostname or "").lower()
    try:
        port = parts.port
    except ValueError:
        return "invalid:" + url  # matches nothing well-formed
    netloc = host if port in (None, DEFAULT_PORTS.get(scheme)) else f"{host}:{port}"
    if ":" in host:
        netloc = f"[{host}]" if port in (None, DEFAULT_PORTS.get(scheme)) else f"[{host}]:{port}"
    path = parts.path.rstrip("/") or "/"
    return f"{scheme}://{netloc}{path}" + (f"?{parts.query}" if parts.query else "")


def _endpoint_items(document: dict[str, Any]) -> list[Any]:
    """Endpoint entries wherever the agent object carries them."""
    places: list[Any] = [document.get("endpoints")]
    for outer, inner in (
        ("agentApiAttributes", None),
        ("api", None),
        ("registry", None),
        ("metadata", "agent"),
    ):
        section = document.get(outer)
        if isinstance(section, dict) and inner is not None:
            section = section.get(inner)
        if isinstance(section, dict):
            places.append(section.get("endpoints"))
    return [item for place in places if isinstance(place, list) for item in place]


def registered_endpoints(document: dict[str, Any]) -> list[tuple[str, str]]:
    """``(verb, url)`` pairs from ``{"POST": url}`` entries (and the ``{verb, url}`` form)."""
    found: list[tuple[str, str]] = []
    for item in _endpoint_items(document):
        if not isinstance(item, dict):
            continue
        if isinstance(item.get("url"), str) and isinstance(item.get("verb"), str):
            found.append((item["verb"].upper(), item["url"]))
        elif len(item) == 1:
            ((verb, url),) = item.items()
            if isinstance(verb, str) and isinstance(url, str):
                found.append((verb.upper(), url))
    return found


def registered_tools(document: dict[str, Any], server: str) -> list[str]:
    """The logical URIs the agent registered for tools of ``server`` (``…/tools/<name>`` or
    ``…/tools/*``), in registration order."""
    prefix = f"mcp://{server}/tools/"
    found = [url for _v, url in registered_endpoints(document) if url.startswith(prefix)]
    return [url for url in dict.fromkeys(found) if len(url) > len(prefix)]


def agent_plan_ids(document: dict[str, Any]) -> list[str]:
    registry = document.get("registry")
    raw: object = registry.get("plans") if isinstance(registry, dict) else None
    if not isinstance(raw, list):
        raw = document.get("plans")
    ids: list[str] = []
    for item in raw if isinstance(raw, list) else []:
        if isinstance(item, dict):
            item = item.get("planId") or item.get("id")
        if isinstance(item, str | int) and not isinstance(item, bool) and str(item):
            ids.append(str(item))
    return list(dict.fromkeys(ids))


def is_registered(url: str, endpoints: list[tuple[str, str]], agent_id: str) -> bool:
    wanted = _normalise(url)
    for verb, registered in endpoints:
        if verb == HTTP_VERB and _normalise(registered.replace(":agentId", agent_id)) == wanted:
            return True
    return False


async def agent_document(core: PluginCore, agent_id: str) -> dict[str, Any]:
    """The service's record of the agent (its registered endpoints and plans); an agent it
    does not know is refused before anything is paid."""
    try:
        return await core.public_client().get_agent_document(agent_id)
    except NotFound:
        raise ToolFailure(
            "unknown_agent",
            f"The service knows no agent {agent_id}; nothing was paid",
            "Check agentId (or ask the agent's owner for its id).",
        ) from None


def _choose_plan(
    core: PluginCore, given: str | None, card_plan: str | None, sold: list[str], agent_id: str
) -> str:
    if given:
        return given
    for candidate in (core.plan_id, card_plan):
        if candidate and candidate in sold:
            return candidate
    if len(sold) == 1:
        return sold[0]
    if not sold:
        raise ToolFailure(
            "missing_plan_id",
            f"Agent {agent_id} sells no plan, so there is nothing to pay it with",
            "Ask the agent's owner which plan to buy, then pass planId.",
        )
    raise ToolFailure(
        "missing_plan_id",
        f"Agent {agent_id} sells {len(sold)} plans; say which one to pay with: "
        + ", ".join(one_line(plan, ID_LIMIT) for plan in sold[:10]),
        "Pass planId with one of these plans (svc_orderPlan buys one if you have none).",
    )


async def decide_purchase(core: PluginCore, p: AgentQuery, found: FoundCard | None) -> Purchase:
    """Steps 3-5 of the module docstring: refuse (``ToolFailure``) or say what to buy with."""
    card = found.card if found is not None else {}
    named = card.get("agentId") if isinstance(card.get("agentId"), str) else None
    agent_id = p.agent_id or named or core.agent_id  # a card naming another: check_card refuses
    unknown = ToolFailure(
        "unknown_agent",
        f"Cannot tell which agent answers at {p.agent_url}: no agentId was given and the "
        "agent card names none; nothing was paid",
        "Pass agentId (the id the agent registered with the service), or check agentUrl.",
    )
    guessed = not (p.agent_id or named)  # only the configured agent: used if it is its URL
    if not agent_id:
        raise unknown
    try:
        document = await agent_document(core, agent_id)
    except ToolFailure:
        if guessed:
            raise unknown from None
        raise
    endpoints = registered_endpoints(document)
    if not is_registered(p.agent_url, endpoints, agent_id):
        if guessed:
            raise unknown
        urls = (one_line(url, 300) for verb, url in endpoints if verb == HTTP_VERB)
        listed = ", ".join(urls)[:500]
        raise ToolFailure(
            "agent_url_not_registered",
            f"{p.agent_url} is not one of the endpoints agent {agent_id} registered with the "
            "service, so paying it could hand a token to someone else; nothing was paid",
            (
                f"The agent's registered POST endpoints: {listed}. Use one of them."
                if listed
                else "The agent registered no endpoint; ask its owner to register the URL."
            ),
        )
    card_plan = card.get("planId") if isinstance(card.get("planId"), str) else None
    plan_id = _choose_plan(core, p.plan_id, card_plan, agent_plan_ids(document), agent_id)
    payment_type = await plan_payment_type(core, plan_id, p.payment_type)
    scheme = SCHEME_CARD if payment_type == "fiat" else SCHEME_CRYPTO
    try:
        verdict = check_card(
            found, agent_id=agent_id, plan_id=plan_id, scheme=scheme, agent_url=p.agent_url
        )
    except CardRejected as exc:
        raise ToolFailure(exc.code, exc.message, exc.hint) from None
    return Purchase(agent_id, plan_id, payment_type, list(verdict.warnings))
