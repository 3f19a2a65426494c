"""svc_queryAgent for an MCP agent: call one paid tool with the payment in ``_meta``.

The same safety rules as for HTTP agents (:mod:`.query`), in the same order, nothing minted
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
checked like an HTTP receipt and the service's own balance is read back. ``listTools`` lists
the tools and their prices without paying (its token is bound to ``…/tools/*`` and never
settled). One deadline (``requestTimeoutSecs``) bounds the whole query.
"""

from __future__ import annotations

import asyncio
import json
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from ..agent_card import TooLarge, read_limited
from ..core import PluginCore
from ..encoding import decode_access_token
from ..errors import ServiceError
from ..redact import get_logger
from .base import ToolFailure, plan_payment_type
from .query import (
    MAX_TEXT_CHARS,
    _agent_document,
    _token_version,
    agent_plan_ids,
    check_agent_address,
    check_agent_url,
    check_receipt,
    registered_endpoints,
)

if TYPE_CHECKING:
    from .query import QueryAgentParams

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
    """The managed server's ``GET /`` (name, agentId), read up to 64 KiB; ``{}`` when it has
    none."""
    import httpx

    parts = urlsplit(url)
    root = f"{parts.scheme}://{parts.netloc}{parts.path.rstrip('/')[: -len(MCP_PATH)]}/"
    try:
        async with (
            httpx.AsyncClient(timeout=read_secs, follow_redirects=False) as http,
            http.stream("GET", root, headers={"Accept": "application/json"}) as reply,
        ):
            if reply.status_code != 200:
                return {}
            data = json.loads(await read_limited(reply, INFO_MAX_BYTES))
    except (httpx.HTTPError, ValueError, TooLarge):
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


def _arguments(p: QueryAgentParams, tool: dict[str, Any]) -> dict[str, Any]:
    """``arguments``, else ``prompt`` as the tool's one string argument."""
    if p.arguments is not None:
        return dict(p.arguments)
    schema = _obj(tool.get("inputSchema"))
    properties = _obj(schema.get("properties"))
    required = [r for r in schema.get("required") or [] if isinstance(r, str)]
    names = required or list(properties)
    if p.prompt and len(names) == 1:
        return {names[0]: p.prompt}
    raise ToolFailure(
        "invalid_params",
        f"Tool {tool.get('name')} takes {', '.join(names) or 'no arguments'}; pass arguments "
        "(prompt fills only a tool with one argument)",
        "Pass arguments as an object matching the tool's input schema (see listTools).",
    )


def _content(result: dict[str, Any]) -> Any:
    """The structured result when there is one, else the text of the content blocks."""
    if result.get("structuredContent") is not None:
        return result["structuredContent"]
    texts = [
        str(block.get("text", ""))
        for block in result.get("content") or []
        if isinstance(block, dict) and block.get("type") == "text"
    ]
    text = "\n".join(texts)
    return text[:MAX_TEXT_CHARS]


def _listing(tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for tool in tools[:100]:
        price = _obj(_obj(tool.get("_meta")).get("svc/price"))
        out.append(
            {
                "tool": str(tool.get("name", ""))[:200],
                "description": str(tool.get("description") or "")[:500],
                "inputSchema": tool.get("inputSchema"),
                "credits": price.get("credits"),
                "planId": price.get("planId"),
            }
        )
    return out


async def query_mcp_agent(core: PluginCore, p: QueryAgentParams) -> dict[str, Any]:
    """svc_queryAgent when ``agentUrl`` is an MCP endpoint (or ``tool`` is given)."""
    check_agent_url(p.agent_url)
    client = core.client()  # NotLoggedIn before any traffic
    deadline = core.config.request_timeout_secs
    sent: list[str] = []
    try:
        async with asyncio.timeout(deadline):
            return await _query(core, p, client.address, deadline, sent)
    except TimeoutError:
        failure = ToolFailure(
            "agent_timeout",
            f"The MCP agent did not answer within {deadline:g} s",
            "Check svc_checkBalance before retrying.",
        )
        raise await _with_balance(core, sent, failure) from None
    except ToolFailure as failure:
        raise await _with_balance(core, sent, failure) from None
    finally:
        if sent:
            core.spent(sent[0])


async def _with_balance(core: PluginCore, sent: list[str], failure: ToolFailure) -> ToolFailure:
    """After the payment went out and no answer came back: say what the service shows."""
    if not sent:
        return failure
    try:
        balance = (await core.client().get_plan_balance(sent[0])).balance
    except ServiceError:
        return failure
    failure.message += f". Your balance on plan {sent[0]} is now {balance} credits"
    return failure


async def _query(
    core: PluginCore, p: QueryAgentParams, payer: str | None, deadline: float, sent: list[str]
) -> dict[str, Any]:
    from ..paid_mcp.sdk import ClientSession, RpcError

    await check_agent_address(core, p.agent_url)
    info = await server_info(p.agent_url, deadline)
    named = info.get("agentId") if isinstance(info.get("agentId"), str) else None
    agent_id = p.agent_id or named or core.agent_id
    if not agent_id:
        raise ToolFailure(
            "unknown_agent",
            f"Cannot tell which agent answers at {p.agent_url}; nothing was paid",
            "Pass agentId (the id the agent registered with the service).",
        )
    document = await _agent_document(core, agent_id)
    server = _choose_server(mcp_server_names(document), info, agent_id)
    tool = p.tool_name or "*"
    uri = f"mcp://{server}/tools/{tool}"
    if not any(covers(url, uri) for _v, url in registered_endpoints(document)):
        raise ToolFailure(
            "agent_url_not_registered",
            f"{uri} is not one of agent {agent_id}'s registered endpoints; nothing was paid",
            "Use a tool the agent registered (listTools shows them).",
        )
    sold = agent_plan_ids(document)
    plan_id = p.plan_id or (sold[0] if len(sold) == 1 else None)
    if plan_id is None:
        raise ToolFailure(
            "missing_plan_id",
            f"Agent {agent_id} sells {len(sold)} plans; say which one to pay with: "
            + ", ".join(sold[:10]),
            "Pass planId (svc_orderPlan buys one if you have none).",
        )
    payment_type = await plan_payment_type(core, plan_id, p.payment_type)
    token = await core.client().get_access_token(
        plan_id,
        agent_id=agent_id,
        payment_type=payment_type,
        payment_method_id=p.payment_method_id,
        spending_limit_cents=core.config.default_spending_limit_cents,
        duration_secs=core.config.default_delegation_duration_secs,
        resource_url=uri,
        http_verb="POST",
    )
    base = {"agentId": agent_id, "planId": plan_id, "agentUrl": p.agent_url, "serverName": server}
    try:
        async with ClientSession(p.agent_url, token, timeout=deadline) as session:
            tools = await session.list_tools()
            if p.list_tools or p.tool_name is None:
                return {**base, "tools": _listing(tools)}
            found = next((t for t in tools if t.get("name") == p.tool_name), None)
            if found is None:
                raise ToolFailure(
                    "unknown_tool",
                    f"The agent has no tool {p.tool_name[:100]}; nothing was paid",
                    "Call svc_queryAgent with listTools: true to see its tools.",
                )
            arguments = _arguments(p, found)
            sent.append(plan_id)
            meta = {"x402/payment": decode_access_token(token)}
            result = await session.call_tool(p.tool_name, arguments, meta)
    except RpcError as exc:
        raise ToolFailure(
            "agent_error",
            f"The MCP agent answered with an error ({exc.code}): {exc.message[:300]}",
            "A call that returns an error is not delivered; check svc_checkBalance if unsure.",
        ) from None
    except ToolFailure:
        raise
    except Exception as exc:  # the SDK's transport errors (HTTP 401/404, connection)
        raise ToolFailure(
            "agent_unreachable",
            f"Could not talk MCP to {p.agent_url}: {type(exc).__name__}",
            "Check agentUrl (an MCP endpoint ends in /mcp) and that the agent is running.",
        ) from None
    answer = await _interpret(core, result, payer, {**base, "tool": p.tool_name})
    answer["tokenVersion"] = _token_version(token)
    return answer


async def _interpret(
    core: PluginCore, result: dict[str, Any], payer: str | None, base: dict[str, Any]
) -> dict[str, Any]:
    meta = _obj(result.get("_meta"))
    structured = result.get("structuredContent")
    if result.get("isError"):
        if isinstance(structured, dict) and structured.get("x402Version") is not None:
            reason = str(structured.get("error") or "payment required")[:300]
            raise ToolFailure(
                "payment_required",
                f"The agent refused the payment: {reason}; its answer was not delivered",
                f"Order plan {base['planId']} (svc_orderPlan) if you have no credits left, "
                "then call svc_queryAgent again; svc_checkBalance shows what was charged.",
            )
        raise ToolFailure(
            "agent_error",
            "The tool failed: " + str(_content(result))[:300],
            "A failed tool call is not charged; check the arguments.",
        )
    answer: dict[str, Any] = {**base, "answer": _content(result)}
    warnings: list[str] = []
    raw = meta.get("x402/payment-response")
    if isinstance(raw, dict):
        answer["receipt"], problems = check_receipt(raw, payer)
        warnings.extend(problems)
    else:
        answer["receipt"] = None
        warnings.append("The agent sent no payment receipt (a free call, or it reports none).")
    try:
        balance = (await core.client().get_plan_balance(base["planId"])).balance
        answer["balanceAfter"] = str(balance)
        claimed = (answer.get("receipt") or {}).get("remainingBalance")
        if claimed is not None and claimed != str(balance):
            warnings.append(
                f"The agent's receipt says {claimed} credits remain; the service says {balance}."
            )
    except ServiceError:
        answer["balanceAfter"] = None
        warnings.append("Could not read your balance from the service after the call.")
    if warnings:
        answer["warnings"] = warnings
    log.info("paid MCP tool %s of agent %s", base.get("tool"), base.get("agentId"))
    return answer
