"""Builder tools: register an agent with its plan, create a plan, list your plans."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, model_validator

from ..account.core import PluginCore
from ..chat.failure import ToolFailure
from ..chat.seller_notes import a2a_registered, keep_selling, registered_endpoints
from ..safe_text import NAME_LIMIT, one_line
from ..service.models import AgentApi, AgentMetadata, CreditsConfig, PlanMetadata, PriceConfig
from ..service.pricing import (
    USDC_ADDRESSES,
    crypto_price,
    decimals_for,
    dynamic_credits,
    expirable_credits,
    fiat_price,
    fixed_credits,
    format_price,
    free_price,
    is_dollar_amount,
    parse_amounts,
)
from .base import Params, tool
from .subscriber import describe_price

AMOUNTS_DOC = (
    "Prices, one per receiver: a list, or text separated by commas. A bare number is in the "
    "smallest unit of the plan's currency: with paymentType fiat, 1000000 = $1.00 (6 decimals); "
    "with a USDC tokenAddress, 1000000 = 1 USDC (6 decimals); with no tokenAddress the price is "
    "in the network's native token, ETH, with 18 decimals (1000000000000000000 = 1 ETH). "
    "A dollar text such as '$1.50' or '$1,000.00' needs paymentType fiat or a USDC tokenAddress"
)
TOKEN_ADDRESS_DOC = (
    "ERC20 token contract the price is paid in (e.g. USDC); omit for the network's native "
    "token (ETH, 18 decimals)"
)
RECEIVERS_DOC = "Wallet addresses paid, one per price; defaults to the logged-in account"
ADDRESS = r"^0x[a-fA-F0-9]{40}$"


def _receivers(core: PluginCore, given: list[str] | str | None, count: int) -> list[str]:
    if isinstance(given, str):
        given = [part.strip() for part in given.split(",") if part.strip()]
    if given:
        return given
    address = core.client().address
    assert address is not None  # client() raised NotLoggedIn otherwise
    return [address] * count


def _refuse_dollars_in_native_token(core: PluginCore, amounts_in: object) -> None:
    """``$`` means dollars; the native token is not a dollar token, so say which one is."""
    items = amounts_in if isinstance(amounts_in, list) else [amounts_in]
    if any(is_dollar_amount(item) for item in items) or (
        isinstance(amounts_in, str) and "$" in amounts_in
    ):
        usdc = USDC_ADDRESSES.get(core.environment, USDC_ADDRESSES["sandbox"])
        raise ToolFailure(
            "invalid_params",
            "A dollar price needs a dollar currency, but without tokenAddress the price is in "
            "the native token (ETH, 18 decimals)",
            f"To charge in USDC pass tokenAddress {usdc} (then '$1.50' = 1500000); to charge by "
            "card pass paymentType fiat; for an ETH price give a whole number of wei "
            "(1000000000000000000 = 1 ETH).",
        )


def build_price(
    core: PluginCore,
    payment_type: str,
    amounts_in: list[str | int] | str | int,
    receivers_in: list[str] | str | None,
    token_address: str | None,
) -> PriceConfig:
    fiat = payment_type == "fiat"
    if not fiat and not token_address:
        _refuse_dollars_in_native_token(core, amounts_in)
    amounts = parse_amounts(amounts_in, decimals_for(token_address, fiat))
    if sum(amounts) == 0:
        return free_price()
    receivers = _receivers(core, receivers_in, len(amounts))
    if fiat:
        if token_address:
            raise ToolFailure(
                "invalid_params",
                "tokenAddress is for crypto prices",
                "Leave tokenAddress out for a card-paid (fiat) plan.",
            )
        return fiat_price(amounts, receivers)
    return crypto_price(amounts, receivers, token_address)


def price_fields(price: PriceConfig) -> dict[str, Any]:
    """The price as a person reads it (with its unit) and as the service stores it."""
    return {
        "price": format_price(
            price.amounts,
            is_crypto=price.is_crypto,
            token_address=price.token_address,
            currency=price.currency,
        ),
        "priceAmounts": [str(a) for a in price.amounts],
    }


class RegisterAgentParams(Params):
    name: str = Field(min_length=1, max_length=200, description="Agent name")
    agent_url: str = Field(
        alias="agentUrl",
        pattern=r"^(https?|mcp)://",
        description="The agent's paid HTTP endpoint URL, or an MCP logical URI "
        "mcp://<serverName>/tools/<tool> (or /tools/* for every tool)",
    )
    plan_name: str = Field(alias="planName", min_length=1, description="Name of the new plan")
    price_amounts: list[str | int] | str | int = Field(
        alias="priceAmounts", description=AMOUNTS_DOC + '. Required: "0" for a free plan'
    )
    price_receivers: list[str] | str | None = Field(
        default=None, alias="priceReceivers", description=RECEIVERS_DOC
    )
    credits_amount: int = Field(
        alias="creditsAmount", ge=1, description="Credits a buyer gets per purchase"
    )
    token_address: str | None = Field(
        default=None,
        alias="tokenAddress",
        pattern=ADDRESS,
        description=TOKEN_ADDRESS_DOC,
    )
    payment_type: Literal["crypto", "fiat"] = Field(
        default="crypto", alias="paymentType", description="crypto price, or fiat (card) price"
    )
    description: str | None = Field(default=None, description="Agent and plan description")
    credits_per_request: int | None = Field(
        default=None,
        alias="creditsPerRequest",
        ge=1,
        description="Credits burned per request; defaults to the config's creditsPerRequest",
    )


@tool(
    "svc_registerAgent",
    "Register an agent and a credits plan that sells access to it. Returns agentId and planId, "
    "which become this gateway's defaults.",
    RegisterAgentParams,
)
async def register_agent(core: PluginCore, p: RegisterAgentParams) -> dict[str, Any]:
    per_request = p.credits_per_request or core.config.credits_per_request
    if per_request > p.credits_amount:
        raise ToolFailure(
            "invalid_params",
            "creditsPerRequest is larger than creditsAmount",
            "A purchase must cover at least one request.",
        )
    price = build_price(core, p.payment_type, p.price_amounts, p.price_receivers, p.token_address)
    endpoints = registered_endpoints(core, p.agent_url)
    ids = await core.client().register_agent_and_plan(
        AgentMetadata(name=p.name, description=p.description),
        AgentApi(endpoints=[{"POST": url} for url in endpoints], agent_definition_url=p.agent_url),
        PlanMetadata(name=p.plan_name, description=p.description),
        price,
        fixed_credits(p.credits_amount, per_request),
    )
    core.agent_id, core.plan_id = ids.agent_id, ids.plan_id
    return {
        "agentId": ids.agent_id,
        "planId": ids.plan_id,
        "agentUrl": p.agent_url,
        **price_fields(price),
        "creditsAmount": p.credits_amount,
        "creditsPerRequest": per_request,
        **keep_selling(core, ids.plan_id, ids.agent_id),
        **a2a_registered(core, endpoints),
    }


class CreatePlanParams(Params):
    name: str = Field(min_length=1, max_length=200, description="Plan name")
    description: str | None = Field(default=None, description="Plan description")
    plan_type: Literal["credits", "time"] = Field(
        default="credits",
        alias="planType",
        description="credits: pay per credit; time: access for durationSecs",
    )
    trial: bool = Field(default=False, description="Trial plan: one purchase per user")
    payment_type: Literal["crypto", "fiat"] = Field(
        default="crypto", alias="paymentType", description="crypto price, or fiat (card) price"
    )
    price_amounts: list[str | int] | str | int = Field(
        alias="priceAmounts", description=AMOUNTS_DOC + '. Required: "0" for a free plan'
    )
    price_receivers: list[str] | str | None = Field(
        default=None, alias="priceReceivers", description=RECEIVERS_DOC
    )
    token_address: str | None = Field(
        default=None,
        alias="tokenAddress",
        pattern=ADDRESS,
        description=TOKEN_ADDRESS_DOC,
    )
    credits_amount: int | None = Field(
        default=None, alias="creditsAmount", ge=1, description="Credits per purchase (credits)"
    )
    credits_per_request: int | None = Field(
        default=None, alias="creditsPerRequest", ge=1, description="Fixed credits per request"
    )
    min_credits_per_request: int | None = Field(
        default=None, alias="minCreditsPerRequest", ge=1, description="Dynamic plans: minimum"
    )
    max_credits_per_request: int | None = Field(
        default=None, alias="maxCreditsPerRequest", ge=1, description="Dynamic plans: maximum"
    )
    duration_secs: int | None = Field(
        default=None, alias="durationSecs", gt=0, description="Time plans: access duration, s"
    )
    access_limit: int | None = Field(
        default=None,
        alias="accessLimit",
        ge=1,
        description="Access limit: the most times this plan can be ordered",
    )

    @model_validator(mode="after")
    def _shape(self) -> CreatePlanParams:
        if self.plan_type == "time" and self.duration_secs is None:
            raise ValueError("a time plan needs durationSecs (e.g. 2592000 for 30 days)")
        if self.plan_type == "credits" and self.credits_amount is None:
            raise ValueError("a credits plan needs creditsAmount")
        if self.plan_type == "credits" and self.duration_secs is not None:
            raise ValueError("durationSecs is only for planType 'time'")
        return self


def build_credits(p: CreatePlanParams, default_per_request: int) -> CreditsConfig:
    if p.plan_type == "time":
        assert p.duration_secs is not None
        return expirable_credits(p.duration_secs)
    assert p.credits_amount is not None
    if p.min_credits_per_request or p.max_credits_per_request:
        low = p.min_credits_per_request or 1
        high = p.max_credits_per_request or low
        return dynamic_credits(p.credits_amount, low, high)
    return fixed_credits(p.credits_amount, p.credits_per_request or default_per_request)


@tool(
    "svc_createPlan",
    "Create a standalone payment plan: credits or time, optionally a trial; crypto (ERC20 or "
    "native token) or fiat price; optional access limit.",
    CreatePlanParams,
)
async def create_plan(core: PluginCore, p: CreatePlanParams) -> dict[str, Any]:
    credits = build_credits(p, core.config.credits_per_request)
    price = build_price(core, p.payment_type, p.price_amounts, p.price_receivers, p.token_address)
    metadata = PlanMetadata(name=p.name, description=p.description, is_trial_plan=p.trial or None)
    plan_id = await core.client().register_plan(metadata, price, credits, max_orders=p.access_limit)
    return {
        "planId": plan_id,
        "name": p.name,
        "planType": p.plan_type,
        "trial": p.trial,
        **price_fields(price),
        "isCrypto": price.is_crypto,
        "credits": credits.wire(),
        "accessLimit": p.access_limit,
    }


class ListPlansParams(Params):
    page: int = Field(default=1, ge=1, description="Page number, from 1")
    page_size: int = Field(default=10, ge=1, le=100, alias="pageSize", description="Per page")
    sort_by: Literal["created", "name"] | None = Field(
        default=None, alias="sortBy", description="Sort field"
    )
    sort_order: Literal["asc", "desc"] = Field(
        default="desc", alias="sortOrder", description="Sort direction"
    )


@tool(
    "svc_listPlans",
    "List the payment plans you own (paginated).",
    ListPlansParams,
)
async def list_plans(core: PluginCore, p: ListPlansParams) -> dict[str, Any]:
    page = await core.client().list_plans(p.page, p.page_size, p.sort_by, p.sort_order)
    plans = [
        {
            "planId": plan.id,
            "name": one_line(plan.name, NAME_LIMIT),
            "price": describe_price(plan),
            "isCrypto": plan.is_crypto,
            "type": "time" if plan.is_time_plan else "credits",
            "trial": plan.is_trial,
            "credits": str(plan.registry.credits.amount),
        }
        for plan in page.plans
    ]
    pages = max(1, -(-page.total // p.page_size))
    result: dict[str, Any] = {"plans": plans, "total": page.total, "page": p.page, "pages": pages}
    if page.total == 0:
        result["message"] = (
            "This account owns no plans: svc_listPlans lists the plans you own (sell), not "
            "plans you bought; svc_checkBalance shows your balance on a plan you bought."
        )
    return result
