"""Which plan, agent and payment type a paying tool uses: its parameter, else config or the plan."""

from __future__ import annotations

from ..account.core import PluginCore
from ..safe_text import NAME_LIMIT, quoted
from ..service.errors import ServiceError
from ..service.models import SCHEME_CARD
from .failure import ToolFailure


def require_plan(core: PluginCore, plan_id: str | None) -> str:
    plan = plan_id or core.plan_id
    if not plan:
        raise ToolFailure(
            "missing_plan_id",
            "No planId was given and no default plan is configured",
            "Pass planId (an agent's 402 answer or card names its plan), or set planId in the "
            "plugin config (svc_listPlans lists the plans you sell).",
        )
    return plan


def require_agent(core: PluginCore, agent_id: str | None) -> str | None:
    return agent_id or core.agent_id


async def plan_payment_type(core: PluginCore, plan_id: str, given: str | None) -> str:
    """The parameter, else the plan's own kind, else config ``paymentType``. The plan wins over
    config because the service refuses a card token for a crypto plan and vice versa; a
    parameter that contradicts the plan is refused here, before anything is minted."""
    try:
        plan = await core.public_client().get_plan(plan_id)
    except ServiceError:
        return given or core.config.payment_type
    kind = "fiat" if plan.scheme == SCHEME_CARD else "crypto"
    if given and given != kind and plan.price_total > 0:
        paid = "by card" if kind == "fiat" else "in crypto"
        raise ToolFailure(
            "payment_type_mismatch",
            f"Plan {quoted(plan.name, NAME_LIMIT)} is paid {paid}, "
            f"but paymentType {given} was given",
            f"Pass paymentType: {kind} (or leave paymentType out to follow the plan).",
        )
    return kind
