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
else, and the result says so), the balance is read, the prompt is POSTed, the receipt is
checked, and the service's own balance is read back.

One deadline (``requestTimeoutSecs``) bounds all of it. When it passes, or the agent answers
without an answer after the token went out, the result says what the service shows was charged
(:mod:`.query_outcome`). Steps 1-2 live in :mod:`.query_address`, 3-5 in
:mod:`.query_purchase`, reading the reply in :mod:`.query_answer`.
"""

from __future__ import annotations

import asyncio
import functools
import ssl
from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field

from ..buying.addresses import check_agent_address, check_agent_url
from ..buying.answers import MAX_ANSWER_BYTES, AgentReply, Purchase, interpret
from ..buying.charges import Step, read_balance, timed_out, with_charge
from ..buying.purchase import HTTP_VERB, decide_purchase
from ..chat.core import PluginCore
from ..encoding import decode_access_token, token_authorization
from ..interop.agent_card import FoundCard, TooLarge, fetch_card, read_limited
from ..redact import get_logger
from ..service.errors import ServiceError
from .base import Params, ToolFailure, tool

if TYPE_CHECKING:
    import httpx

log = get_logger("svc_gateway.tools.query")

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
    prompt: str = Field(
        default="",
        max_length=20000,
        description="What to ask the agent (an MCP agent: the argument of a one-argument tool)",
    )
    tool_name: str | None = Field(
        default=None,
        alias="tool",
        max_length=200,
        description="MCP agents (agentUrl ending in /mcp): the tool to call",
    )
    arguments: dict[str, Any] | None = Field(
        default=None, description="MCP agents: the tool's arguments (or pass prompt)"
    )
    list_tools: bool = Field(
        default=False,
        alias="listTools",
        description="MCP agents: list the tools and their prices instead of paying",
    )
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
        return await core.access_token(
            purchase.plan_id,
            agent_id=purchase.agent_id,
            payment_type=purchase.payment_type,
            payment_method_id=p.payment_method_id,
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
    from ..buying.mcp import is_mcp_url, query_mcp_agent

    if p.tool_name is not None or p.list_tools or is_mcp_url(p.agent_url):
        return await query_mcp_agent(core, p)
    if not p.prompt.strip():
        raise ToolFailure("invalid_params", "prompt is required", "Pass what to ask the agent.")
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
        step.done(core)
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
        step.plan_id = purchase.plan_id
        # the balance before paying, read while the token is minted (minting burns nothing)
        token, step.balance_before = await asyncio.gather(
            _mint(core, p, purchase), read_balance(core, purchase.plan_id)
        )
        step.waiting, step.token_sent = "agent", True
        try:
            reply = await post_prompt_once_more(
                http, p.agent_url, p.prompt, token, _token_version(token)
            )
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
            "token's delegation bought the plan (automatic top-up), charged to the "
            "delegation within its spending limit (defaultSpendingLimitCents)."
        )
    receipt = result.get("receipt") or {}
    claimed = receipt.get("remainingBalance")
    if claimed is not None and claimed != str(balance):
        warnings.append(
            f"The agent's receipt says {claimed} credits remain; the service says {balance}."
        )
