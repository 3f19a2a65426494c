"""svc_queryAgent for an HTTP agent: address, agent, plan, token, POST, receipt.

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
else, and the result says so), the balance is read, the prompt is POSTed with the query's
idempotency key (retried with the same key and token when its answer is lost:
:mod:`.retrying`), the receipt is checked, and the service's own balance is read back.

One deadline (``requestTimeoutSecs``) bounds all of it. When it passes, or the agent answers
without an answer after the token went out, the result says what the service shows was charged
(:mod:`.charges`). Steps 1-2 live in :mod:`.addresses`, 3-5 in :mod:`.purchase`, the token in
:mod:`.tokens`, reading the reply in :mod:`.answers`.
"""

from __future__ import annotations

import asyncio
import functools
import ssl
from collections.abc import Awaitable
from typing import TYPE_CHECKING, Any

from ..account.core import PluginCore
from ..chat.failure import ToolFailure
from ..interop.agent_card import FoundCard, fetch_card
from ..redact import get_logger
from .addresses import check_agent_address, check_agent_url
from .answers import MAX_ANSWER_BYTES, AgentReply, Purchase, interpret
from .approval import finish_ticket, query_ticket, redeemed, topped_up
from .charges import HTTPX_SLACK_SECS, Step, balance_after, read_balance, timed_out, with_charge
from .langgraph import find_assistant, is_langgraph_run, run_body
from .purchase import decide_purchase
from .request import AgentQuery
from .retrying import IDEMPOTENCY_HEADER, Retried, new_key, retry_after, with_retries
from .send import send_paid
from .tokens import mint, token_version

if TYPE_CHECKING:
    import httpx

log = get_logger("svc_gateway.tools.query")


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
    http: httpx.AsyncClient,
    url: str,
    body: dict[str, Any],
    token: str,
    *,
    key: str | None = None,
) -> AgentReply:
    """POST the request (``{"prompt"}``, or a LangGraph run; with the query's idempotency
    ``key``); read at most :data:`MAX_ANSWER_BYTES` of the answer."""
    headers = {"payment-signature": token}
    if key is not None:
        headers[IDEMPOTENCY_HEADER] = key
    return await send_paid(http, url, body, headers)


async def post_prompt_retrying(
    http: httpx.AsyncClient,
    url: str,
    body: dict[str, Any],
    token: str,
    version: int,
    *,
    key: str,
    deadline: float | None,
) -> Retried[AgentReply]:
    """:func:`post_prompt` with the query's key; with a single-use (v3) token, again with the
    same key and token when the answer is lost in flight, an attempt outlasts its share of the
    deadline, or the seller still runs the first (409): a seller that kept the answer replays
    it, one that did not settles the token once (issues 18, 46). A reusable token is sent
    once."""
    import httpx

    def attempt() -> Awaitable[AgentReply]:
        return post_prompt(http, url, body, token, key=key)

    if version < 3:
        return Retried(await attempt(), 1)
    return await with_retries(
        attempt,
        lost=lambda exc: isinstance(exc, httpx.TransportError),
        busy=lambda reply: retry_after(reply.status, reply.headers),
        deadline=deadline,
    )


async def query_http_agent(
    core: PluginCore, p: AgentQuery, until: float | None = None
) -> dict[str, Any]:
    """svc_queryAgent when ``agentUrl`` is a plain HTTP endpoint: every step of the module
    docstring, then the answer, the checked receipt and the balance read back; what it cost
    settled against the person's approval (:mod:`.approval`). ``until`` (loop time): the query's
    deadline when it started earlier (the A2A probe ran within it)."""
    step = Step()
    try:
        result = await _query(core, p, step, until)
    except BaseException:
        await finish_ticket(core, step, None)
        raise
    await finish_ticket(core, step, redeemed(result), topped_up(result))
    return result


async def _query(
    core: PluginCore, p: AgentQuery, step: Step, until: float | None
) -> dict[str, Any]:
    if not p.prompt.strip() and not (is_langgraph_run(p.agent_url) and p.arguments is not None):
        raise ToolFailure("invalid_params", "prompt is required", "Pass what to ask the agent.")
    check_agent_url(p.agent_url)
    client = core.client()  # NotLoggedIn before any traffic
    deadline = core.config.request_timeout_secs
    # ONE deadline: the A2A probe, DNS, cards, service, HEAD, the request
    scope = asyncio.timeout(deadline) if until is None else asyncio.timeout_at(until)
    try:
        async with scope:
            purchase, version, retried = await _buy(core, p, step, scope.when())
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
    reply = retried.value
    try:
        result = interpret(reply, purchase, client.address, p.agent_url)
    except ToolFailure as failure:  # a 402 or another non-2xx after the token was sent
        raise await with_charge(core, step, failure, answered=True) from None
    result["tokenVersion"] = version
    if retried.from_retry:  # the answer came from a retry (the first was lost or still ran)
        result["retries"] = retried.attempts - 1
        result["replayed"] = reply.headers.get("idempotent-replayed") == "true"
    if version < 3:
        purchase.warnings.append(
            "The service issued a reusable (v2) token instead of a single-use one bound to this "
            "URL: until it expires, whoever holds it can spend credits of this plan."
        )
    await balance_after(core, purchase.plan_id, result, step.balance_before)
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
    core: PluginCore, p: AgentQuery, step: Step, deadline: float | None
) -> tuple[Purchase, int, Retried[AgentReply]]:
    """Every step of the module docstring up to the agent's reply, each marked in ``step``;
    ``deadline`` (loop time) is the query's one deadline."""
    # httpx here, not the service client's session: one-off calls to other hosts need a
    # streamed read with a size cap; the caller's deadline bounds them (httpx's own timeout is
    # set past it, so the deadline, not a swallowed read timeout, is what ends a slow call).
    import httpx

    await check_agent_address(core, p.agent_url)
    timeout = httpx.Timeout(core.config.request_timeout_secs + HTTPX_SLACK_SECS)
    async with httpx.AsyncClient(timeout=timeout, verify=_tls(), follow_redirects=False) as http:
        step.waiting = "agent"
        found = await fetch_card(http, p.agent_url)
        step.waiting = "service"
        purchase = await decide_purchase(core, p, found)
        step.waiting = "agent"
        await check_answer_size(http, p.agent_url, found)
        body: dict[str, Any] = {"prompt": p.prompt}
        if is_langgraph_run(p.agent_url):  # LangGraph's request shape (before any token)
            body = run_body(p, p.assistant_id or await find_assistant(http, p.agent_url))
        step.waiting = "service"
        step.plan_id = purchase.plan_id
        step.ticket = ticket = await query_ticket(
            core, purchase.plan_id, purchase.agent_id, lambda: query_http_agent(core, p)
        )
        # the balance before paying, read while the token is minted (minting burns nothing)
        token, step.balance_before = await asyncio.gather(
            mint(core, p, purchase, ticket), read_balance(core, purchase.plan_id)
        )
        step.waiting, step.token_sent = "agent", True
        try:
            reply = await post_prompt_retrying(
                http,
                p.agent_url,
                body,
                token,
                token_version(token),
                key=new_key(),
                deadline=deadline,
            )
        except httpx.HTTPError as exc:
            raise ToolFailure(
                "agent_unreachable",
                f"Could not reach the agent: {type(exc).__name__}",
                "Check agentUrl and that the agent is running.",
            ) from None
    return purchase, token_version(token), reply
