"""svc_queryAgent for an MCP agent: call one paid tool with the payment in ``_meta``.

The same safety rules as for HTTP agents (:mod:`.http`), in the same order, nothing minted
before every check has passed:

1. the URL: HTTPS, or plain HTTP on this machine; 2. its address: loopback, public or
   allow-listed;
3. whom to pay: ``agentId``, else the server's own info (``GET /``), else config ``agentId``;
4. the service's record of that agent must list the tool's logical URI
   ``mcp://<serverName>/tools/<tool>`` (or ``…/tools/*``), where ``serverName`` is the one
   server name the agent registered (or the name the server gives, when it registered several);
5. the plan (the parameter, else the one plan the agent sells) and its payment scheme;

then a v3 token bound to the tool's logical URI is minted and used as the session's bearer and,
decoded, as ``_meta["x402/payment"]``; the receipt in ``_meta["x402/payment-response"]`` is
checked like an HTTP receipt and the service's own balance is read back. ``listTools`` lists the
tools and their prices without paying (allowed when any tool of the server is registered; its
token is bound to ``…/tools/*`` or that tool, and never settled); a prompt without ``tool`` goes
to the server's only registered tool. One deadline (``requestTimeoutSecs``) bounds the whole
query; once the token has gone out (as the session's bearer), a query that ends without content
says what the service shows was charged (:mod:`.charges`). Text from the agent reaches the model
through :mod:`..safe_text`. No HTTP response of the session is read past
:data:`MAX_ANSWER_BYTES` (as for HTTP agents): a tool's answer over it comes back cut short,
with a warning that the request was charged; a structured answer is returned whole only within
that size.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from ..account.core import PluginCore
from ..approvals import spend
from ..chat.failure import ToolFailure
from ..chat.plans import plan_payment_type
from ..encoding import decode_access_token
from ..interop.agent_card import CARD_SECS, TooLarge, read_limited
from ..redact import get_logger
from ..safe_text import one_line, quoted
from .addresses import check_agent_address, check_agent_url
from .answers import MAX_ANSWER_BYTES, MAX_TEXT_CHARS, check_receipt
from .approval import finish_ticket, query_ticket, redeemed, topped_up
from .charges import HTTPX_SLACK_SECS, Step, balance_after, read_balance, timed_out, with_charge
from .purchase import agent_document, agent_plan_ids, registered_endpoints, registered_tools
from .request import AgentQuery
from .retrying import IDEMPOTENCY_META, new_key, with_retries
from .tokens import token_version
from .tool_listing import tool_listing

log = get_logger("svc_gateway.tools.query")

MCP_PATH = "/mcp"
INFO_MAX_BYTES = 64 * 1024


def _obj(value: object) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def is_mcp_url(url: str) -> bool:
    """An ``https://…/mcp`` endpoint (the managed server's path)."""
    return urlsplit(url).path.rstrip("/").endswith(MCP_PATH)


def mcp_server_names(document: dict[str, Any]) -> set[str]:
    """Server names of the agent's registered ``mcp://`` endpoints."""
    return {
        urlsplit(url).netloc
        for _verb, url in registered_endpoints(document)
        if url.startswith("mcp://") and urlsplit(url).netloc
    }


def covers(pattern: str, uri: str) -> bool:
    """A registered logical URI ``pattern`` (exact, or ending in ``/*``) covers ``uri``."""
    if pattern == uri:
        return True
    return pattern.endswith("/*") and uri.startswith(pattern[:-1]) and len(uri) > len(pattern) - 1


async def server_info(url: str, read_secs: float) -> dict[str, Any]:
    """The managed server's ``GET /`` (name, agentId), read up to 64 KiB within
    :data:`~..interop.agent_card.CARD_SECS`; ``{}`` when it has none."""
    import httpx

    parts = urlsplit(url)
    root = f"{parts.scheme}://{parts.netloc}{parts.path.rstrip('/')[: -len(MCP_PATH)]}/"
    try:
        async with (
            asyncio.timeout(min(read_secs, CARD_SECS)),  # optional: the call gets the rest
            httpx.AsyncClient(timeout=read_secs, follow_redirects=False) as http,
            http.stream("GET", root, headers={"Accept": "application/json"}) as reply,
        ):
            if reply.status_code != 200:
                return {}
            data = json.loads(await read_limited(reply, INFO_MAX_BYTES))
    except (httpx.HTTPError, ValueError, TooLarge, TimeoutError):
        return {}
    return _obj(data)


def _choose_server(names: set[str], info: dict[str, Any], agent_id: str) -> str:
    named = info.get("name")
    if len(names) == 1:
        return next(iter(names))
    if isinstance(named, str) and named in names:
        return named
    raise ToolFailure(
        "agent_url_not_registered",
        f"Agent {agent_id} registered no MCP server "
        + ("matching this URL" if names else "(no mcp:// endpoint)")
        + "; nothing was paid",
        "Check agentUrl and agentId: the agent must register mcp://<serverName>/tools/<tool>.",
    )


def _tool_and_uri(
    p: AgentQuery, server: str, tools: list[str], agent_id: str
) -> tuple[str | None, str]:
    """The tool to call (``None``: list them) and the logical URI its token is bound to.

    A listing is never settled: any registered tool of the server allows it (its token is bound
    to ``…/tools/*`` when that is registered, else to the first registered tool). A prompt or
    arguments without ``tool`` go to the server's only registered tool."""
    prefix = f"mcp://{server}/tools/"
    named = [url[len(prefix) :] for url in tools if not url.endswith("/*")]
    tool = p.tool_name
    asked = bool(p.prompt) or p.arguments is not None
    if tool is None and not p.list_tools and asked and len(named) == 1 and len(tools) == 1:
        tool = named[0]
    if p.list_tools or tool is None:
        if not tools:
            raise ToolFailure(
                "agent_url_not_registered",
                f"Agent {agent_id} registered no tool of MCP server {quoted(server, 100)}; "
                "nothing was paid",
                "Ask the agent's owner to register mcp://<serverName>/tools/<tool>.",
            )
        wildcard = prefix + "*"
        return None, wildcard if wildcard in tools else tools[0]
    uri = prefix + tool
    if not any(covers(url, uri) for url in tools):
        choices = ", ".join(f"tool: {json.dumps(one_line(name, 100))}" for name in named[:10])
        raise ToolFailure(
            "agent_url_not_registered",
            f"{quoted(uri, 300)} is not one of agent {agent_id}'s registered endpoints; "
            "nothing was paid",
            f"Use a tool the agent registered: {choices}."
            if choices
            else "Use a tool the agent registered (listTools shows them).",
        )
    return tool, uri


def _arguments(p: AgentQuery, tool: dict[str, Any]) -> dict[str, Any]:
    """``arguments``, else ``prompt`` as the tool's one string argument."""
    if p.arguments is not None:
        return dict(p.arguments)
    schema = _obj(tool.get("inputSchema"))
    properties = _obj(schema.get("properties"))
    required = [r for r in schema.get("required") or [] if isinstance(r, str)]
    names = required or list(properties)
    if p.prompt and len(names) == 1:
        return {names[0]: p.prompt}
    takes = ", ".join(quoted(name, 60) for name in names[:20]) or "no arguments"
    raise ToolFailure(
        "invalid_params",
        f"Tool {quoted(tool.get('name'), 100)} takes {takes}; pass arguments "
        "(prompt fills only a tool with one argument)",
        "Pass arguments as an object matching the tool's input schema (see listTools).",
    )


@dataclass(frozen=True)
class _CutShort:
    """The tool's answer outgrew :data:`MAX_ANSWER_BYTES`: the first bytes of the response."""

    head: bytes


CUT_READ = (
    f"The answer was cut short: it is larger than the {MAX_ANSWER_BYTES // 1024} KiB "
    f"svc_queryAgent reads, so only the first {MAX_TEXT_CHARS} characters of the agent's raw "
    "response are shown and its receipt was not read. The request was charged (balanceAfter "
    "shows your balance)."
)


def tool_answer(result: dict[str, Any]) -> tuple[Any, bool]:
    """The structured result when there is one (whole within :data:`MAX_ANSWER_BYTES` of JSON,
    else its JSON text cut), else the text of the content blocks (cut to
    :data:`MAX_TEXT_CHARS`); and whether anything was cut."""
    structured = result.get("structuredContent")
    if structured is not None:
        text = json.dumps(structured, ensure_ascii=False)
        if len(text.encode()) <= MAX_ANSWER_BYTES:
            return structured, False
        return text[:MAX_TEXT_CHARS], True
    texts = [
        str(block.get("text", ""))
        for block in result.get("content") or []
        if isinstance(block, dict) and block.get("type") == "text"
    ]
    text = "\n".join(texts)
    return text[:MAX_TEXT_CHARS], len(text) > MAX_TEXT_CHARS


@dataclass
class _McpStep(Step):
    """:class:`Step`, plus whether the agent answered the paid call (then it will not settle
    later: what the balance shows is final)."""

    answered: bool = False


async def query_mcp_agent(core: PluginCore, p: AgentQuery) -> dict[str, Any]:
    """svc_queryAgent when ``agentUrl`` is an MCP endpoint (or ``tool`` is given); what a paid
    call cost settled against the person's approval (:mod:`.approval`)."""
    step = _McpStep()
    try:
        result = await _query_mcp(core, p, step)
    except BaseException:
        await finish_ticket(core, step, None)
        raise
    await finish_ticket(core, step, redeemed(result), topped_up(result))
    return result


async def _query_mcp(core: PluginCore, p: AgentQuery, step: _McpStep) -> dict[str, Any]:
    check_agent_url(p.agent_url)
    client = core.client()  # NotLoggedIn before any traffic
    deadline = core.config.request_timeout_secs
    scope = asyncio.timeout(deadline)  # ONE deadline: DNS, server info, service, the session
    try:
        async with scope:
            base, result, version = await _query(core, p, step, deadline, scope.when())
            if result is None:  # listTools
                return base
            if isinstance(result, _CutShort):
                text = result.head.decode("utf-8", errors="replace")[:MAX_TEXT_CHARS]
                answer = {**base, "answer": text, "receipt": None, "warnings": [CUT_READ]}
            else:
                answer = await _interpret(result, client.address, base)
    except (TimeoutError, ToolFailure) as exc:
        # the SDK's task group may turn the deadline's cancellation into a transport error:
        # once the deadline has passed, whatever came out is a timeout
        if scope.expired() or not isinstance(exc, ToolFailure):
            failure, answered = timed_out(step, deadline, p.agent_url), False
        else:
            failure, answered = exc, step.answered
        if step.token_sent:  # the token went out and no content came back
            raise await with_charge(core, step, failure, answered=answered) from None
        raise failure from None
    finally:
        step.done(core)
    answer["tokenVersion"] = version
    await balance_after(core, step.plan_id, answer, step.balance_before)
    core.paid_for(f"agent {base.get('agentId')}", step.plan_id, answer.get("receipt"))
    if not answer["warnings"]:
        del answer["warnings"]
    log.info("paid MCP tool %s of agent %s", base.get("tool"), base.get("agentId"))
    return answer


async def _query(
    core: PluginCore, p: AgentQuery, step: _McpStep, deadline: float, until: float | None
) -> tuple[dict[str, Any], dict[str, Any] | _CutShort | None, int]:
    """Every check, the token, the session and the call: the base of the result, the tool's
    result (``None`` for a listing) and the token's version; each step marked in ``step``.
    ``until`` (loop time): the query's one deadline, which retries share (:mod:`.retrying`)."""
    from ..interop.mcp_client import ClientSession, ResponseTooLarge
    from ..interop.mcp_sdk import RpcError

    await check_agent_address(core, p.agent_url)
    step.waiting = "agent"
    info = await server_info(p.agent_url, deadline)
    step.waiting = "service"
    named = info.get("agentId") if isinstance(info.get("agentId"), str) else None
    agent_id = p.agent_id or named or core.agent_id
    if not agent_id:
        raise ToolFailure(
            "unknown_agent",
            f"Cannot tell which agent answers at {p.agent_url}; nothing was paid",
            "Pass agentId (the id the agent registered with the service).",
        )
    document = await agent_document(core, agent_id)
    server = _choose_server(mcp_server_names(document), info, agent_id)
    tool_name, uri = _tool_and_uri(p, server, registered_tools(document, server), agent_id)
    sold = agent_plan_ids(document)
    plan_id = p.plan_id or (sold[0] if len(sold) == 1 else None)
    if plan_id is None:
        raise ToolFailure(
            "missing_plan_id",
            f"Agent {agent_id} sells {len(sold)} plans; say which one to pay with: "
            + ", ".join(one_line(plan, 100) for plan in sold[:10]),
            "Pass planId (svc_orderPlan buys one if you have none).",
        )
    payment_type = await plan_payment_type(core, plan_id, p.payment_type)
    step.plan_id = plan_id
    # a listing too: its token is the session's bearer, which a server could settle once
    step.ticket = await query_ticket(core, plan_id, agent_id, lambda: query_mcp_agent(core, p))
    # the balance before paying, read while the token is minted (minting burns nothing)
    token, step.balance_before = await asyncio.gather(
        spend.token(
            core.client(),
            step.ticket,
            agent_id=agent_id,
            payment_type=payment_type,
            payment_method_id=p.payment_method_id,
            resource_url=uri,
            http_verb="POST",
        ),
        read_balance(core, plan_id),
    )
    base = {"agentId": agent_id, "planId": plan_id, "agentUrl": p.agent_url, "serverName": server}
    # the token is the session's bearer: from here on the agent holds it
    step.waiting, step.token_sent = "agent", True
    key = new_key()  # one per query: every attempt of this call carries it

    async def attempt() -> tuple[dict[str, Any], dict[str, Any] | _CutShort | None]:
        async with ClientSession(
            p.agent_url,
            token,
            timeout=deadline + HTTPX_SLACK_SECS,
            max_response_bytes=MAX_ANSWER_BYTES,
        ) as session:
            tools = await session.list_tools()
            if tool_name is None:
                return {**base, "tools": tool_listing(tools)}, None
            found = next((t for t in tools if t.get("name") == tool_name), None)
            if found is None:
                raise ToolFailure(
                    "unknown_tool",
                    f"The agent has no tool {quoted(tool_name, 100)}; it was not called",
                    "Call svc_queryAgent with listTools: true to see its tools.",
                )
            arguments = _arguments(p, found)
            meta = {"x402/payment": decode_access_token(token), IDEMPOTENCY_META: key}
            try:
                result: dict[str, Any] | _CutShort = await session.call_tool(
                    tool_name, arguments, meta
                )
            except ResponseTooLarge as exc:
                result = _CutShort(exc.head)
            step.answered = True
            return {**base, "tool": tool_name}, result

    def lost(exc: BaseException) -> bool:  # a dropped session, not an answer
        return not isinstance(exc, ResponseTooLarge | RpcError | ToolFailure)

    try:
        single = token_version(token) >= 3  # a reusable token is never sent twice
        retried = await with_retries(
            attempt, lost=lost, deadline=until if single else None, attempts=3 if single else 1
        )
    except ResponseTooLarge:  # before the tool was called: its listing, or the handshake
        raise ToolFailure(
            "answer_too_large",
            f"The MCP agent sent a response larger than the {MAX_ANSWER_BYTES // 1024} KiB "
            "svc_queryAgent reads before any tool was called",
            "Call another agent; this one lists more than svc_queryAgent can read.",
        ) from None
    except RpcError as exc:
        step.answered = True  # the server answered with an error: nothing left to settle
        raise ToolFailure(
            "agent_error",
            f"The MCP agent answered with an error ({exc.code}): {quoted(exc.message, 300)}",
            "A call that returns an error is not delivered.",
        ) from None
    except ToolFailure:
        raise
    except Exception as exc:  # the SDK's transport errors (HTTP 401/404, connection)
        raise ToolFailure(
            "agent_unreachable",
            f"Could not talk MCP to {p.agent_url}: {type(exc).__name__}",
            "Check agentUrl (an MCP endpoint ends in /mcp) and that the agent is running.",
        ) from None
    found_base, result = retried.value
    if retried.from_retry:  # the answer came from a retry (the first was lost in flight)
        found_base["retries"] = retried.attempts - 1
    return found_base, result, token_version(token)


async def _interpret(
    result: dict[str, Any], payer: str | None, base: dict[str, Any]
) -> dict[str, Any]:
    """The tool's result: an error result raises; content comes with its checked receipt."""
    meta = _obj(result.get("_meta"))
    structured = result.get("structuredContent")
    if result.get("isError"):
        if isinstance(structured, dict) and structured.get("x402Version") is not None:
            reason = quoted(structured.get("error") or "payment required", 300)
            raise ToolFailure(
                "payment_required",
                f"The agent refused the payment: {reason}; its answer was not delivered",
                f"Order plan {base['planId']} (svc_orderPlan) if you have no credits left, "
                "then call svc_queryAgent again; svc_checkBalance shows what was charged.",
            )
        raise ToolFailure(
            "agent_error",
            "The tool failed: " + quoted(tool_answer(result)[0], 300),
            "A failed tool call is not charged; check the arguments.",
        )
    content, cut = tool_answer(result)
    answer: dict[str, Any] = {**base, "answer": content}
    warnings: list[str] = []
    if cut:
        warnings.append(
            f"The answer was cut short: only its first {MAX_TEXT_CHARS} characters are shown. "
            "The request was charged."
        )
    raw = meta.get("x402/payment-response")
    if isinstance(raw, dict):
        answer["receipt"], problems = check_receipt(raw, payer)
        warnings.extend(problems)
    else:
        answer["receipt"] = None
        warnings.append("The agent sent no payment receipt (a free call, or it reports none).")
    answer["warnings"] = warnings
    return answer
