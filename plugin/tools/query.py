"""svc_queryAgent: buy one answer from a paid agent (token, POST, receipt)."""

from __future__ import annotations

from typing import Any, Literal

import httpx
from pydantic import Field

from ..core import PluginCore
from ..encoding import decode_b64_json
from .base import Params, ToolFailure, require_agent, require_plan, tool


class QueryAgentParams(Params):
    agent_url: str = Field(
        alias="agentUrl", pattern=r"^https?://", description="The agent's paid endpoint URL"
    )
    prompt: str = Field(min_length=1, max_length=20000, description="What to ask the agent")
    plan_id: str | None = Field(
        default=None, alias="planId", description="Plan to pay with; defaults to planId"
    )
    agent_id: str | None = Field(
        default=None, alias="agentId", description="Agent id; defaults to agentId"
    )
    payment_type: Literal["crypto", "fiat"] | None = Field(
        default=None, alias="paymentType", description="crypto, or fiat to pay by card"
    )
    payment_method_id: str | None = Field(
        default=None, alias="paymentMethodId", description="Card for fiat payments"
    )


@tool(
    "svc_queryAgent",
    "Send a prompt to a paid agent, paying with an x402 access token; returns the answer and "
    "the receipt (credits redeemed, remaining balance).",
    QueryAgentParams,
)
async def query_agent(core: PluginCore, p: QueryAgentParams) -> dict[str, Any]:
    plan_id = require_plan(core, p.plan_id)
    agent_id = require_agent(core, p.agent_id)
    token = await core.client().get_access_token(
        plan_id,
        agent_id=agent_id,
        payment_type=p.payment_type or core.config.payment_type,
        payment_method_id=p.payment_method_id,
        spending_limit_cents=core.config.default_spending_limit_cents,
        duration_secs=core.config.default_delegation_duration_secs,
    )
    timeout = httpx.Timeout(core.config.request_timeout_secs)
    async with httpx.AsyncClient(timeout=timeout, transport=core.transport) as http:
        try:
            response = await http.post(
                p.agent_url, json={"prompt": p.prompt}, headers={"payment-signature": token}
            )
        except httpx.HTTPError as exc:
            raise ToolFailure(
                "agent_unreachable",
                f"Could not reach the agent: {type(exc).__name__}",
                "Check agentUrl and that the agent is running.",
            ) from None
    core.spent(plan_id)
    if response.status_code == 402:
        envelope = decode_b64_json(response.headers.get("payment-required"))
        raise ToolFailure(
            "payment_required",
            "The agent refused the payment",
            "Order the plan with svc_orderPlan (or svc_orderFiatPlan to pay by card), then retry."
            + (
                f" Accepted plans: {[a.get('planId') for a in envelope.get('accepts', [])]}"
                if envelope
                else ""
            ),
        )
    if not response.is_success:
        raise ToolFailure(
            "agent_error",
            f"The agent answered HTTP {response.status_code}",
            "No credits are charged for a failed request; try again later.",
        )
    try:
        answer: Any = response.json()
    except ValueError:
        answer = response.text[:4000]
    receipt = decode_b64_json(response.headers.get("payment-response"))
    return {"answer": answer, "receipt": receipt, "planId": plan_id, "agentId": agent_id}
