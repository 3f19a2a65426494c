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
import ipaddress
import json
import re
import socket
import ssl
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal
from urllib.parse import urlsplit

from pydantic import Field

from ..agent_card import CardRejected, FoundCard, TooLarge, check_card, fetch_card, read_limited
from ..core import PluginCore
from ..encoding import decode_access_token, decode_b64_json, is_address, token_authorization
from ..errors import NotFound, ServiceError
from ..models import SCHEME_CARD, SCHEME_CRYPTO
from ..redact import get_logger
from .base import Params, ToolFailure, plan_payment_type, tool

if TYPE_CHECKING:
    import httpx

log = get_logger("svc_gateway.tools.query")

#: the largest agent answer read; past it the read stops and the answer is returned cut short
MAX_ANSWER_BYTES = 1024 * 1024
#: the longest text answer returned to the model (a JSON answer within the limit is whole)
MAX_TEXT_CHARS = 20_000
HTTP_VERB = "POST"
_LOOPBACK_NAMES = ("localhost", "localhost.")
_DEFAULT_PORTS = {"http": 80, "https": 443}
_NUMBER = re.compile(r"\d{1,78}")

IpAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
Resolver = Callable[[str, int], Awaitable[list[str]]]


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
        description="Agent id to pay; defaults to the id on the agent's card, then agentId",
    )
    payment_type: Literal["crypto", "fiat"] | None = Field(
        default=None,
        alias="paymentType",
        description="crypto, or fiat to pay by card; defaults to the plan's own kind",
    )
    payment_method_id: str | None = Field(
        default=None, alias="paymentMethodId", description="Card for fiat payments"
    )


# -- where a token may go ---------------------------------------------------------------------


def is_loopback_host(host: str | None) -> bool:
    """127.0.0.0/8, ::1 and localhost: traffic that never leaves this machine."""
    if not host:
        return False
    if host.lower() in _LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_agent_url(url: str) -> None:
    """Refuse plain HTTP to a remote host (the token is a bearer credential) and URLs that
    carry a password or cannot be parsed."""
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError on a bad port
    except ValueError:
        raise ToolFailure(
            "invalid_params", "agentUrl is not a valid URL", "Pass the agent's full https:// URL."
        ) from None
    if parts.username is not None or parts.password is not None:
        raise ToolFailure(
            "invalid_params",
            "agentUrl carries a user name or password",
            "Pass the agent's URL without credentials in it.",
        )
    if parts.scheme == "https" and parts.hostname:
        return
    if parts.scheme == "http" and is_loopback_host(parts.hostname):
        return
    raise ToolFailure(
        "insecure_agent_url",
        f"Refusing to send a payment token to {parts.scheme}://{parts.hostname or '?'}: plain "
        "HTTP would expose it (a bearer credential) to anyone on the network",
        "Use the agent's https:// URL (plain http is allowed only for 127.0.0.1/localhost).",
    )


async def resolve_host(host: str, port: int) -> list[str]:
    """Every address ``host`` resolves to (an IP literal resolves to itself)."""
    infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return [str(info[4][0]) for info in infos]


#: the resolver svc_queryAgent uses; a test may swap it to make a name resolve elsewhere
resolver: Resolver = resolve_host


def _allowed(address: IpAddress, host: str, allow: list[str]) -> bool:
    for entry in allow:
        if entry == host.lower().rstrip("."):
            return True
        try:
            if address in ipaddress.ip_network(entry, strict=False):
                return True
        except ValueError:
            continue
    return False


async def check_agent_address(core: PluginCore, url: str) -> None:
    """Refuse an agent whose host resolves to a private, link-local, unspecified or otherwise
    non-public address; loopback and ``allowedAgentHosts`` are allowed."""
    parts = urlsplit(url)
    host = (parts.hostname or "").strip("[]")
    port = parts.port or _DEFAULT_PORTS.get(parts.scheme, 443)
    try:
        addresses = await resolver(host, port)
    except (OSError, UnicodeError):
        raise ToolFailure(
            "agent_unreachable",
            f"Could not resolve the agent's host {host}; nothing was paid",
            "Check the host name in agentUrl.",
        ) from None
    allow = core.config.allowed_agent_hosts
    for text in addresses or ["0.0.0.0"]:
        try:
            address: IpAddress = ipaddress.ip_address(text)  # a scope id (%eth0) is kept
        except ValueError:
            address = ipaddress.ip_address("0.0.0.0")  # unreadable: refused below
        if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
            address = address.ipv4_mapped
        if address.is_loopback or _allowed(address, host, allow):
            continue
        if not address.is_global or address.is_multicast:
            raise ToolFailure(
                "private_agent_address",
                f"Refusing to pay an agent at {host}: it resolves to {address}, a private, "
                "link-local or unspecified address; nothing was paid",
                "Agents on this machine (127.0.0.1) and on the public internet are allowed; to "
                "pay one on a private network, the operator adds its host or range to "
                "allowedAgentHosts in the plugin config.",
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
    netloc = host if port in (None, _DEFAULT_PORTS.get(scheme)) else f"{host}:{port}"
    if ":" in host:
        netloc = f"[{host}]" if port in (None, _DEFAULT_PORTS.get(scheme)) else f"[{host}]:{port}"
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


@dataclass
class Purchase:
    """What the checks settled on: whom to pay, with which plan, and what to tell the user."""

    agent_id: str
    plan_id: str
    payment_type: str
    warnings: list[str] = field(default_factory=list)


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
        + ", ".join(sold[:10]),
        "Pass planId with one of these plans (svc_orderPlan buys one if you have none).",
    )


async def decide_purchase(
    core: PluginCore, p: QueryAgentParams, found: FoundCard | None
) -> Purchase:
    """Steps 3-5 of the module docstring: refuse (``ToolFailure``) or say what to buy with."""
    card = found.card if found is not None else {}
    named = card.get("agentId") if isinstance(card.get("agentId"), str) else None
    agent_id = p.agent_id or named or core.agent_id  # a card naming another: check_card refuses
    if not agent_id:
        raise ToolFailure(
            "unknown_agent",
            f"Cannot tell which agent answers at {p.agent_url}: no agentId was given and the "
            "agent card names none; nothing was paid",
            "Pass agentId (the id the agent registered with the service).",
        )
    document = await _agent_document(core, agent_id)
    endpoints = registered_endpoints(document)
    if not is_registered(p.agent_url, endpoints, agent_id):
        listed = ", ".join(url for verb, url in endpoints if verb == HTTP_VERB)[:500]
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


@dataclass
class AgentReply:
    status: int
    headers: dict[str, str]
    body: bytes
    truncated: bool


async def post_prompt(
    http: httpx.AsyncClient, url: str, prompt: str, token: str, answered: list[int] | None = None
) -> AgentReply:
    """POST the prompt; read at most :data:`MAX_ANSWER_BYTES` of the answer. The status goes
    into ``answered`` as soon as the response headers arrive."""
    async with http.stream(
        HTTP_VERB,
        url,
        json={"prompt": prompt},
        headers={"payment-signature": token, "Accept": "application/json"},
    ) as response:
        if answered is not None:
            answered.append(response.status_code)
        headers = {k.lower(): v for k, v in response.headers.items()}
        try:
            body, truncated = await read_limited(response, MAX_ANSWER_BYTES), False
        except TooLarge as exc:
            body, truncated = exc.head, True
        return AgentReply(response.status_code, headers, body, truncated)


async def post_prompt_once_more(
    http: httpx.AsyncClient, url: str, prompt: str, token: str, version: int
) -> AgentReply:
    """:func:`post_prompt`; when the connection drops before any answer arrived with a
    single-use (v3) token, once more with the same token: a seller that settled it replays the
    answer it paid for, one that did not is paid once (issue 18)."""
    import httpx

    answered: list[int] = []
    try:
        return await post_prompt(http, url, prompt, token, answered)
    except httpx.TransportError:
        if version < 3 or answered:
            raise
        log.info("the agent's answer was lost in transit; asking once more with the same token")
        return await post_prompt(http, url, prompt, token)


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
    "short with a warning, or refused before paying when the agent announces its size.",
    QueryAgentParams,
)
async def query_agent(core: PluginCore, p: QueryAgentParams) -> dict[str, Any]:
    # httpx here, not the service client's session: one-off calls to other hosts need a
    # streamed read with a size cap and their own per-call timeout.
    import httpx

    check_agent_url(p.agent_url)
    client = core.client()  # NotLoggedIn before any traffic
    await check_agent_address(core, p.agent_url)
    deadline = core.config.request_timeout_secs
    async with httpx.AsyncClient(
        timeout=httpx.Timeout(deadline), verify=_tls(), follow_redirects=False
    ) as http:
        found = await fetch_card(http, p.agent_url)
        purchase = await decide_purchase(core, p, found)
        await check_answer_size(http, p.agent_url, found)
        token = await _mint(core, p, purchase)
        version = _token_version(token)
        try:
            async with asyncio.timeout(deadline):
                reply = await post_prompt_once_more(http, p.agent_url, p.prompt, token, version)
        except TimeoutError:
            raise ToolFailure(
                "agent_timeout",
                f"The agent did not answer within {deadline:g} s",
                "It may still have charged the request: check svc_checkBalance before retrying; "
                "raise requestTimeoutSecs for slow agents.",
            ) from None
        except httpx.HTTPError as exc:
            raise ToolFailure(
                "agent_unreachable",
                f"Could not reach the agent: {type(exc).__name__}",
                "Check agentUrl and that the agent is running.",
            ) from None
        finally:
            core.spent(purchase.plan_id)  # the request may have been charged whatever came back
    result = interpret(reply, purchase, client.address, p.agent_url)
    result["tokenVersion"] = version
    if version < 3:
        purchase.warnings.append(
            "The service issued a reusable (v2) token instead of a single-use one bound to this "
            "URL: until it expires, whoever holds it can spend credits of this plan."
        )
    await _balance_after(core, purchase.plan_id, result)
    core.paid_for(
        f"agent {purchase.agent_id or p.agent_url}", purchase.plan_id, result.get("receipt")
    )
    result.update(
        {"planId": purchase.plan_id, "agentId": purchase.agent_id, "agentUrl": p.agent_url}
    )
    warnings = [*purchase.warnings, *result.pop("warnings", [])]
    if warnings:
        result["warnings"] = warnings
    return result


async def _balance_after(core: PluginCore, plan_id: str, result: dict[str, Any]) -> None:
    """The service's balance after the call: the number that counts, whatever a receipt says."""
    warnings: list[str] = result.setdefault("warnings", [])
    try:
        balance = (await core.client().get_plan_balance(plan_id)).balance
    except ServiceError:
        result["balanceAfter"] = None
        warnings.append("Could not read your balance from the service after the call.")
        return
    result["balanceAfter"] = str(balance)
    receipt = result.get("receipt") or {}
    claimed = receipt.get("remainingBalance")
    if claimed is not None and claimed != str(balance):
        warnings.append(
            f"The agent's receipt says {claimed} credits remain; the service says {balance}."
        )


# -- reading the answer -------------------------------------------------------------------------


def _answer(headers: dict[str, str], body: bytes, truncated: bool) -> tuple[Any, bool]:
    """JSON when it parses (and is whole), else the text cut for the model; and whether
    anything was cut."""
    text = body.decode("utf-8", errors="replace")
    if not truncated and (
        "json" in headers.get("content-type", "") or text.lstrip().startswith(("{", "["))
    ):
        try:
            return json.loads(text), False
        except (ValueError, RecursionError):
            pass
    return text[:MAX_TEXT_CHARS], truncated or len(text) > MAX_TEXT_CHARS


def _agent_error(status: int, message: str | None, url: str) -> ToolFailure:
    said = f"The agent answered HTTP {status}" + (f": {message[:300]}" if message else "")
    if 300 <= status < 400:
        hint = (
            "The agent sent the request elsewhere; svc_queryAgent does not follow redirects with "
            "a payment token. Use the agent's registered URL directly."
        )
    elif status in (404, 405, 410):
        hint = (
            f"There is no paid endpoint at {url} (wrong path or method): check agentUrl; "
            "retrying the same URL will not help."
        )
    elif status >= 500:
        hint = "The agent failed; a failed request is not charged. Retry later" + (
            " (after a few seconds)." if status in (502, 503, 504) else "."
        )
    else:
        hint = "The agent refused this request; a refused request is not charged. Check the prompt."
    return ToolFailure("agent_error", said, hint)


def interpret(reply: AgentReply, purchase: Purchase, payer: str | None, url: str) -> dict[str, Any]:
    """An error for 402 and any other non-2xx; the answer and the checked receipt otherwise."""
    status, headers, body = reply.status, reply.headers, reply.body
    if status == 402:
        raise _payment_guidance(headers, body, purchase.plan_id, purchase.agent_id)
    if not 200 <= status < 300:
        detail, _ = _answer(headers, body, reply.truncated)
        message = detail.get("message") if isinstance(detail, dict) else None
        raise _agent_error(status, message if isinstance(message, str) else None, url)
    answer, cut = _answer(headers, body, reply.truncated)
    result: dict[str, Any] = {"answer": answer}
    warnings: list[str] = []
    if cut:
        warnings.append(
            f"The answer was cut short: only its first {MAX_TEXT_CHARS} characters are shown "
            f"(answers are read up to {MAX_ANSWER_BYTES // 1024} KiB). The request was charged."
        )
    raw = decode_b64_json(headers.get("payment-response"))
    if raw is None:
        result["receipt"] = None
        warnings.append(
            "The agent sent no payment receipt: its settlement failed or it does not report one."
        )
    else:
        result["receipt"], problems = check_receipt(raw, payer)
        warnings.extend(problems)
    result["warnings"] = warnings
    return result


def _count(value: object) -> str | None:
    """A credit count as a decimal string, or ``None`` when it is not a whole number ≥ 0."""
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 10**78:
        return str(value)
    if isinstance(value, str) and _NUMBER.fullmatch(value.strip()):
        return str(int(value.strip()))
    return None


def _shown(value: object) -> str:
    text = json.dumps(value, default=str) if not isinstance(value, str) else repr(value)
    return text if len(text) <= 40 else text[:40] + "..."


def check_receipt(raw: dict[str, Any], payer: str | None) -> tuple[dict[str, Any], list[str]]:
    """The agent's receipt with every field checked: a bad field becomes ``None`` plus a
    warning, so nothing the agent invented reaches the model as a fact."""
    problems: list[str] = []
    receipt: dict[str, Any] = {}
    success = raw.get("success")
    receipt["success"] = success if isinstance(success, bool) else None
    if success is not True:
        problems.append("The agent's receipt does not report a successful settlement.")
    for key in ("creditsRedeemed", "remainingBalance"):
        receipt[key] = _count(raw.get(key))
        if receipt[key] is None:
            problems.append(
                f"The agent's receipt gives {key} as {_shown(raw.get(key))}, not a whole number "
                "of credits; ignored."
            )
    for key in ("transaction", "network"):
        value = raw.get(key)
        ok = isinstance(value, str) and len(value) <= 200 and value.isprintable()
        receipt[key] = value if ok else None
    claimed = raw.get("payer")
    if not is_address(claimed):
        receipt["payer"] = None
        problems.append(f"The agent's receipt names payer {_shown(claimed)}, not an address.")
    elif payer is not None and str(claimed).lower() != payer.lower():
        receipt["payer"] = None
        problems.append(f"The agent's receipt names payer {claimed}, not your account {payer}.")
    else:
        receipt["payer"] = claimed
    receipt["valid"] = not problems
    return receipt, problems


def _payment_guidance(
    headers: dict[str, str], body: bytes, plan_id: str, agent_id: str | None
) -> ToolFailure:
    """Turn a 402 and its ``payment-required`` envelope into what to do next."""
    envelope = decode_b64_json(headers.get("payment-required")) or {}
    raw_accepts = envelope.get("accepts")
    accepts = (
        [a for a in raw_accepts if isinstance(a, dict)] if isinstance(raw_accepts, list) else []
    )
    plans = [str(a.get("planId")) for a in accepts if a.get("planId")]
    fiat = any(a.get("scheme") == SCHEME_CARD for a in accepts)
    detail, _ = _answer(headers, body, False)
    reason = envelope.get("error") or (detail.get("message") if isinstance(detail, dict) else None)
    if isinstance(detail, dict) and not reason:
        reason = detail.get("reason")
    order = (
        "pay by card with svc_orderFiatPlan (then paymentType fiat)"
        if fiat
        else "order it with svc_orderPlan"
    )
    accepted = ", ".join(plans[:10]) if plans else "not stated"
    hint = f"The agent accepts plan(s) {accepted}: {order}, then call svc_queryAgent again"
    if plans and plan_id not in plans:
        hint += f" with planId {plans[0]}"
    wanted = next(
        (a["extra"].get("agentId") for a in accepts if isinstance(a.get("extra"), dict)), None
    )
    if isinstance(wanted, str) and wanted and wanted != agent_id:
        hint += f" (pass agentId {wanted}: tokens are issued for one agent)"
    return ToolFailure(
        "payment_required",
        "The agent refused the payment"
        + (f": {str(reason)[:300]}" if reason else "")
        + "; nothing was charged",
        hint + ".",
    )
