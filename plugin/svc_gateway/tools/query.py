"""svc_queryAgent: buy one answer from a paid agent (address, agent, plan, token, POST, receipt).

Order matters, and nothing is minted until every check has passed:

1. the URL: HTTPS, or plain HTTP on this machine (a token is a bearer credential);
2. the address after DNS resolution: loopback, or public, or allow-listed by config (an LLM must
   not be talked into paying a service on the private network or the cloud metadata address);
3. the agent card at the URL (optional; never trusted on its own);
4. the service's record of the agent: the URL must be one of its registered ``POST`` endpoints,
   so a card that claims someone else's agent id gets nothing;
5. the plan (the parameter, else the one plan the agent sells) and its payment scheme;
6. the answer size, when the card or a HEAD states it;

then a v3 token bound to agent + URL + verb is minted (v2 only when the service gives nothing
else, and the result says so), the prompt is POSTed, the receipt is checked, and the
service's own balance is read back.
"""

from __future__ import annotations

import asyncio
import functools
import ssl
from typing import TYPE_CHECKING, Any, Literal
from urllib.parse import urlsplit

from pydantic import Field

from ..agent_card import (
    ID_LIMIT,
    CardRejected,
    FoundCard,
    TooLarge,
    check_card,
    fetch_card,
    read_limited,
)
from ..core import PluginCore
from ..encoding import decode_access_token, token_authorization
from ..errors import NotFound, ServiceError
from ..models import SCHEME_CARD, SCHEME_CRYPTO
from ..redact import get_logger
from ..safe_text import one_line
from .base import Params, ToolFailure, plan_payment_type, tool
from .query_address import DEFAULT_PORTS, check_agent_address, check_agent_url
from .query_answer import MAX_ANSWER_BYTES, AgentReply, Purchase, interpret
from .query_outcome import Step, read_balance, timed_out, with_charge

if TYPE_CHECKING:
    import httpx

log = get_logger("svc_gateway.tools.query")

HTTP_VERB = "POST"
#: httpx's own timeouts sit this far past the query's deadline, which always ends first
_HTTPX_SLACK_SECS = 5.0


class QueryAgentParams(Params):
    agent_url: str = Field(
        alias="agentUrl",
        pattern=r"^https?://",
        max_length=2048,
        description="The agent's paid endpoint URL, exactly as the agent registered it; HTTPS "
        "unless it is on this machine",
    )
    prompt: str = Field(min_length=1, max_length=20000, description="What to ask the agent")
    plan_id: str | None = Field(
        default=None,
        alias="planId",
        description="Plan to pay with; defaults to your configured planId when the agent sells "
        "it, else the agent's only plan",
    )
    agent_id: str | None = Field(
        default=None,
        alias="agentId",
        description="Agent id to pay; defaults to the id on the agent's card, then your "
        "configured agentId when agentUrl is one of its registered endpoints",
    )
    payment_type: Literal["crypto", "fiat"] | None = Field(
        default=None,
        alias="paymentType",
        description="crypto, or fiat to pay by card; defaults to the plan's own kind",
    )
    payment_method_id: str | None = Field(
        default=None, alias="paymentMethodId", description="Card for fiat payments"
    )


# -- which agent, which plan --------------------------------------------------------------------


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


async def _agent_document(core: PluginCore, agent_id: str) -> dict[str, Any]:
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


async def decide_purchase(
    core: PluginCore, p: QueryAgentParams, found: FoundCard | None
) -> Purchase:
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
        document = await _agent_document(core, agent_id)
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


# -- the HTTP part (httpx) ----------------------------------------------------------------------


@functools.cache
def _tls() -> ssl.SSLContext:
    """One TLS context for every query: building one costs ~50 ms of blocked event loop."""
    import httpx

    return httpx.create_ssl_context()


def _too_large(size: object) -> bool:
    return isinstance(size, int | str) and str(size).isdigit() and int(size) > MAX_ANSWER_BYTES


async def check_answer_size(http: httpx.AsyncClient, url: str, found: FoundCard | None) -> None:
    """Refuse before paying when the card (``maxAnswerBytes``) or a HEAD says the answer cannot
    fit in :data:`MAX_ANSWER_BYTES`. A failing HEAD says nothing."""
    import httpx

    declared = found.card.get("maxAnswerBytes") if found is not None else None
    if not _too_large(declared):
        try:
            head = await http.head(url)
            declared = head.headers.get("content-length") if head.is_success else None
        except httpx.HTTPError:
            declared = None
    if _too_large(declared):
        raise ToolFailure(
            "answer_too_large",
            f"The agent says its answer is {declared} bytes, more than the "
            f"{MAX_ANSWER_BYTES // 1024} KiB svc_queryAgent reads; nothing was paid",
            "Ask for a shorter answer, or call the agent another way.",
        )


async def post_prompt(http: httpx.AsyncClient, url: str, prompt: str, token: str) -> AgentReply:
    """POST the prompt; read at most :data:`MAX_ANSWER_BYTES` of the answer."""
    async with http.stream(
        HTTP_VERB,
        url,
        json={"prompt": prompt},
        headers={"payment-signature": token, "Accept": "application/json"},
    ) as response:
        headers = {k.lower(): v for k, v in response.headers.items()}
        try:
            body, truncated = await read_limited(response, MAX_ANSWER_BYTES), False
        except TooLarge as exc:
            body, truncated = exc.head, True
        return AgentReply(response.status_code, headers, body, truncated)


def _token_version(token: str) -> int:
    """3 when the token carries a one-time nonce (WIRE.md §3.1), else 2."""
    nonce = token_authorization(decode_access_token(token) or {}).get("nonce")
    return 3 if isinstance(nonce, str) and nonce.strip() else 2


async def _mint(core: PluginCore, p: QueryAgentParams, purchase: Purchase) -> str:
    try:
        return await core.client().get_access_token(
            purchase.plan_id,
            agent_id=purchase.agent_id,
            payment_type=purchase.payment_type,
            payment_method_id=p.payment_method_id,
            spending_limit_cents=core.config.default_spending_limit_cents,
            duration_secs=core.config.default_delegation_duration_secs,
            resource_url=p.agent_url,
            http_verb=HTTP_VERB,
        )
    except ServiceError as exc:
        if exc.code == "BCK.PROTOCOL.0031":
            raise ToolFailure(
                "agent_url_not_registered",
                f"The service refused a token for {p.agent_url}: it is not a registered "
                f"endpoint of agent {purchase.agent_id}; nothing was paid",
                "Use the URL the agent registered.",
            ) from None
        raise


@tool(
    "svc_queryAgent",
    "Send a prompt to a paid agent and pay for the answer with a single-use access token bound "
    "to that agent and URL. Before paying it checks that the URL is one of the agent's "
    "registered endpoints and not on a private network. Returns the answer, the agent's "
    "receipt (credits redeemed) and your balance as the service reports it afterwards. "
    f"Answers are read up to {MAX_ANSWER_BYTES // 1024} KiB (1 MiB); a longer answer is cut "
    "short with a warning, or refused before paying when the agent announces its size. "
    "Paying can buy: the token is backed by a delegation, so when the plan's credits run short "
    "the service may order the plan again at settle (automatic top-up), charged to that "
    "delegation and bounded by its spending limit (defaultSpendingLimitCents). "
    "requestTimeoutSecs bounds the whole query; when the agent gives no answer after receiving "
    "the token, the result says what the service shows was charged.",
    QueryAgentParams,
)
async def query_agent(core: PluginCore, p: QueryAgentParams) -> dict[str, Any]:
    check_agent_url(p.agent_url)
    client = core.client()  # NotLoggedIn before any traffic
    deadline = core.config.request_timeout_secs
    step = Step()
    scope = asyncio.timeout(deadline)  # ONE deadline: DNS, cards, service, HEAD, the request
    try:
        async with scope:
            purchase, version, reply = await _buy(core, p, step)
    except TimeoutError:
        if not scope.expired():
            raise
        failure = timed_out(step, deadline, p.agent_url)
        if step.token_sent:
            failure = await with_charge(core, step, failure, answered=False)
        raise failure from None
    except ToolFailure as failure:
        if step.token_sent:  # the token went out and no answer came back
            raise await with_charge(core, step, failure, answered=False) from None
        raise
    finally:
        if step.token_sent:
            core.spent(step.plan_id)  # the request may have been charged whatever came back
    try:
        result = interpret(reply, purchase, client.address, p.agent_url)
    except ToolFailure as failure:  # a 402 or another non-2xx after the token was sent
        raise await with_charge(core, step, failure, answered=True) from None
    result["tokenVersion"] = version
    if version < 3:
        purchase.warnings.append(
            "The service issued a reusable (v2) token instead of a single-use one bound to this "
            "URL: until it expires, whoever holds it can spend credits of this plan."
        )
    await _balance_after(core, purchase.plan_id, result, step.balance_before)
    result.update(
        {"planId": purchase.plan_id, "agentId": purchase.agent_id, "agentUrl": p.agent_url}
    )
    warnings = [*purchase.warnings, *result.pop("warnings", [])]
    if warnings:
        result["warnings"] = warnings
    return result


async def _buy(
    core: PluginCore, p: QueryAgentParams, step: Step
) -> tuple[Purchase, int, AgentReply]:
    """Every step of the module docstring up to the agent's reply, each marked in ``step``."""
    # httpx here, not the service client's session: one-off calls to other hosts need a
    # streamed read with a size cap; the caller's deadline bounds them (httpx's own timeout is
    # set past it, so the deadline, not a swallowed read timeout, is what ends a slow call).
    import httpx

    await check_agent_address(core, p.agent_url)
    timeout = httpx.Timeout(core.config.request_timeout_secs + _HTTPX_SLACK_SECS)
    async with httpx.AsyncClient(timeout=timeout, verify=_tls(), follow_redirects=False) as http:
        step.waiting = "agent"
        found = await fetch_card(http, p.agent_url)
        step.waiting = "service"
        purchase = await decide_purchase(core, p, found)
        step.waiting = "agent"
        await check_answer_size(http, p.agent_url, found)
        step.waiting = "service"
        token = await _mint(core, p, purchase)
        step.plan_id, step.balance_before = (
            purchase.plan_id,
            await read_balance(core, purchase.plan_id),
        )
        step.waiting, step.token_sent = "agent", True
        try:
            reply = await post_prompt(http, p.agent_url, p.prompt, token)
        except httpx.HTTPError as exc:
            raise ToolFailure(
                "agent_unreachable",
                f"Could not reach the agent: {type(exc).__name__}",
                "Check agentUrl and that the agent is running.",
            ) from None
    return purchase, _token_version(token), reply


async def _balance_after(
    core: PluginCore, plan_id: str, result: dict[str, Any], before: int | None = None
) -> None:
    """The service's balance after the call: the number that counts, whatever a receipt says
    (and a rise over ``before``, read just before paying, is a top-up said out loud)."""
    warnings: list[str] = result.setdefault("warnings", [])
    balance = await read_balance(core, plan_id)  # bounded: the answer is not held back long
    if balance is None:
        result["balanceAfter"] = None
        warnings.append("Could not read your balance from the service after the call.")
        return
    result["balanceAfter"] = str(balance)
    if before is not None and balance > before:
        warnings.append(
            f"Your balance went from {before} to {balance} credits during this request: the "
            "token's delegation bought the plan again (automatic top-up), charged to the "
            "delegation within its spending limit (defaultSpendingLimitCents)."
        )
    receipt = result.get("receipt") or {}
    claimed = receipt.get("remainingBalance")
    if claimed is not None and claimed != str(balance):
        warnings.append(
            f"The agent's receipt says {claimed} credits remain; the service says {balance}."
        )
