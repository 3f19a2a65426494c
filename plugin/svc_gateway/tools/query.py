"""svc_queryAgent, declared: its parameters and the tool; buying/ holds every step of paying.

An MCP agent (``agentUrl`` ending in ``/mcp``, or ``tool``/``listTools`` given) is bought from by
:mod:`..buying.mcp`, an A2A agent (its card names ``agentUrl`` as an interface) by
:mod:`..buying.a2a`, any other by :mod:`..buying.http`.
"""

from __future__ import annotations

import asyncio
from typing import Any, Literal

from pydantic import Field

from ..account.core import PluginCore
from ..buying.a2a import NotA2A, query_a2a_agent
from ..buying.answers import MAX_ANSWER_BYTES
from ..buying.http import query_http_agent
from ..buying.mcp import is_mcp_url, query_mcp_agent
from .base import Params, tool


class QueryAgentParams(Params):
    agent_url: str = Field(
        alias="agentUrl",
        pattern=r"^https?://",
        max_length=2048,
        description="The agent's paid endpoint URL, exactly as the agent registered it, or an "
        "A2A agent's address (where its agent card is: the interface the card names is paid, "
        "if the agent registered it); HTTPS unless it is on this machine",
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
    if p.tool_name is not None or p.list_tools or is_mcp_url(p.agent_url):
        return await query_mcp_agent(core, p)
    # one deadline for the whole query: the A2A probe, then the A2A or the HTTP path
    until = asyncio.get_running_loop().time() + core.config.request_timeout_secs
    try:
        return await query_a2a_agent(core, p, until)
    except NotA2A:
        return await query_http_agent(core, p, until)
