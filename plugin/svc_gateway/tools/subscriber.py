"""Subscriber tools: balance, access token, orders (quote first), payment methods."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any, Literal

from pydantic import Field, WithJsonSchema

from ..account.core import PluginCore
from ..approvals import spend
from ..chat.failure import ToolFailure
from ..chat.plans import plan_payment_type, require_agent, require_plan
from ..encoding import decode_access_token, token_authorization
from ..safe_text import NAME_LIMIT, one_line, plural, quoted
from ..service.errors import ServiceError
from ..service.models import Plan
from ..service.pricing import format_price
from .approval import ask_to_order, order_ticket, person_approves, token_ticket
from .base import Params, tool

PLAN_ID = Field(default=None, description="Plan id; defaults to the configured planId")


class CheckBalanceParams(Params):
    plan_id: str | None = Field(
        default=None, alias="planId", description="Plan id; defaults to the configured planId"
    )
    address: str | None = Field(
        default=None,
        description="Wallet address to check; defaults to the logged-in account",
        pattern=r"^0x[a-fA-F0-9]{40}$",
    )


@tool(
    "svc_checkBalance",
    "Remaining credits on a payment plan, and whether the account is subscribed to it.",
    CheckBalanceParams,
)
async def check_balance(core: PluginCore, p: CheckBalanceParams) -> dict[str, Any]:
    plan_id = require_plan(core, p.plan_id)
    if core.identity is not None and p.address is not None:
        own = core.session.address if core.session else None
        if own is None or p.address.lower() != own.lower():
            raise ToolFailure(
                "not_your_account",
                "On this gateway each user sees only their own balance",
                "Leave address out to check your own balance.",
            )
    session = core.session
    client = core.client() if p.address is None else core.public_client()
    balance = await client.get_plan_balance(plan_id, p.address)
    if p.address is None:
        core.balance_read(plan_id, balance, session)  # the balance context shows it
    return {
        "planId": plan_id,
        "planName": one_line(balance.plan_name, NAME_LIMIT) if balance.plan_name else None,
        "address": balance.holder_address or p.address or client.address,
        "balance": str(balance.balance),
        "isSubscriber": balance.is_subscriber,
    }


class AccessTokenParams(Params):
    plan_id: str | None = Field(
        default=None, alias="planId", description="Plan id; defaults to the configured planId"
    )
    agent_id: str | None = Field(
        default=None, alias="agentId", description="Agent the token is for (recommended)"
    )
    payment_type: Literal["crypto", "fiat"] | None = Field(
        default=None,
        alias="paymentType",
        description="crypto (svc:erc4337) or fiat (svc:card-delegation, a card-paid plan); "
        "defaults to the plan's own kind",
    )
    payment_method_id: str | None = Field(
        default=None,
        alias="paymentMethodId",
        description="Card to use for fiat; defaults to the first enrolled card",
    )


@tool(
    "svc_getAccessToken",
    "Get an x402 access token for a plan (crypto or card). The token is a bearer credential "
    "for the agent's payment-signature header; do not show it to anyone else.",
    AccessTokenParams,
)
async def get_access_token(core: PluginCore, p: AccessTokenParams) -> dict[str, Any]:
    plan_id = require_plan(core, p.plan_id)
    agent_id = require_agent(core, p.agent_id)
    client = core.client()  # NotLoggedIn before any traffic
    payment_type = await plan_payment_type(core, plan_id, p.payment_type)
    plan = await core.public_client().get_plan(plan_id)
    ticket = await token_ticket(core, plan, agent_id, payment_type)
    try:
        token = await spend.token(
            client,
            ticket,
            agent_id=agent_id,
            payment_type=payment_type,
            payment_method_id=p.payment_method_id,
        )
    except BaseException:
        await ticket.release()
        raise
    await ticket.settle(None)  # when it is spent is not seen here: all it can spend counts
    decoded = decode_access_token(token) or {}
    accepted = decoded.get("accepted") if isinstance(decoded.get("accepted"), dict) else {}
    assert isinstance(accepted, dict)
    return {
        "accessToken": token,
        "planId": plan_id,
        "agentId": agent_id,
        "scheme": accepted.get("scheme"),
        "network": accepted.get("network"),
        "expiresAt": _expiry(decoded),
        "header": "payment-signature",
    }


CONFIRM_DOC = (
    "false (default) returns a quote; JSON true (nothing else) places the order and spends money"
)
NOT_CONFIRMED = "confirm must be JSON true, without quotes, to buy"


def _expiry(decoded: dict[str, Any]) -> str | None:
    """When the token stops working: the authorization's ``validBefore`` (a JWT's ``exp`` for a
    token in that form), as ISO 8601 UTC; ``None`` when the token names no time."""
    raw = token_authorization(decoded).get("validBefore", decoded.get("exp"))
    try:
        secs = int(str(raw))
    except ValueError:
        return None
    try:
        return datetime.fromtimestamp(secs, tz=UTC).isoformat().replace("+00:00", "Z")
    except (OverflowError, OSError, ValueError):
        return None


class OrderParams(Params):
    plan_id: str | None = Field(
        default=None, alias="planId", description="Plan id; defaults to the configured planId"
    )
    # Any value is accepted so that "yes", 1 or "on" give a quote (as documented) instead of an
    # error; only JSON true buys. The model still sees a boolean.
    confirm: Annotated[
        Any, WithJsonSchema({"type": "boolean", "default": False, "description": CONFIRM_DOC})
    ] = Field(default=False)

    @property
    def confirmed(self) -> bool:
        return self.confirm is True

    @property
    def almost_confirmed(self) -> bool:
        """Something other than true and false: the caller probably meant to buy."""
        return self.confirm is not True and self.confirm not in (False, None)


def describe_price(plan: Plan) -> str:
    """The plan's price with its unit, formatted here (never the service's own text)."""
    price = plan.registry.price
    return format_price(
        list(price.amounts),
        is_crypto=plan.is_crypto,
        token_address=price.token_address,
        currency=plan.metadata.plan.currency,
    )


async def quote(core: PluginCore, plan: Plan, tool_name: str, p: OrderParams) -> dict[str, Any]:
    """The quote, with what the account already holds on the plan (read, never bought)."""
    result = _quote(core, plan, tool_name)
    why = ""
    if p.almost_confirmed:
        why = f": {NOT_CONFIRMED} (confirm was {one_line(repr(p.confirm), 40)})"
    message = f"Nothing was bought{why}. To buy, call {tool_name} again with confirm: true."
    if person_approves(core):
        message += " The user then approves the purchase themselves with a code."
    session = core.session
    try:
        held = await core.client().get_plan_balance(plan.id)
    except ServiceError:
        held = None
    if held is not None:
        core.balance_read(plan.id, held, session)
        result["quote"]["balanceHeld"] = str(held.balance)
        result["quote"]["subscribed"] = held.is_subscriber
        if held.balance > 0:
            message += (
                " You already have active access on this plan."
                if plan.is_time_plan
                else f" You already hold {plural(held.balance, 'credit')} on this plan."
            )
    result["message"] = message
    return result


def _quote(core: PluginCore, plan: Plan, tool_name: str) -> dict[str, Any]:
    credits = plan.registry.credits
    grants = (
        f"access for {credits.duration_secs} s"
        if plan.is_time_plan
        else plural(credits.amount, "credit")
    )
    return {
        "confirmRequired": True,
        "quote": {
            "planId": plan.id,
            "planName": one_line(plan.name, NAME_LIMIT),
            "price": describe_price(plan),
            "grants": grants,
            "credits": str(credits.amount),
            "trial": plan.is_trial,
            "environment": core.environment,
        },
        "message": f"Nothing was bought. To buy, call {tool_name} again with confirm: true.",
        "topUp": TOP_UP_HUMAN
        if person_approves(core)
        else "Paying for a query can also buy this plan: a token backed by a delegation may "
        "order it at settle when credits run short (automatic top-up), charged to the "
        "delegation and bounded by its spending limit (defaultSpendingLimitCents).",
    }


TOP_UP_HUMAN = (
    "A paid query never buys this plan without the user's consent: it may top up only within "
    "a spending mandate the user set (/svc_allow) or a purchase they approved with a code."
)


async def _plan_to_order(core: PluginCore, plan_id: str | None, *, by_card: bool) -> Plan:
    """The plan to quote or buy, refused when the other order tool is the right one."""
    plan = await core.client().get_plan(require_plan(core, plan_id))
    if plan.price_total > 0 and plan.is_crypto == by_card:
        kind, other = (
            ("in crypto", "svc_orderPlan") if by_card else ("by card", "svc_orderFiatPlan")
        )
        raise ToolFailure(
            "crypto_plan" if by_card else "fiat_plan",
            f"Plan {quoted(plan.name, NAME_LIMIT)} is paid {kind}",
            f"Use {other} for this plan.",
        )
    return plan


@tool(
    "svc_orderPlan",
    "Buy a crypto payment plan. Without confirm it only returns a quote; it spends money "
    "only when called with confirm: true.",
    OrderParams,
)
async def order_plan(core: PluginCore, p: OrderParams) -> dict[str, Any]:
    plan = await _plan_to_order(core, p.plan_id, by_card=False)
    if not p.confirmed:
        return await quote(core, plan, "svc_orderPlan", p)
    if person_approves(core):
        return ask_to_order(core, plan, by_card=False, place=lambda: place_order(core, plan))
    return await place_order(core, plan)


async def place_order(core: PluginCore, plan: Plan) -> dict[str, Any]:
    """Buy ``plan`` now (``"model"`` approval, or the person's approved code)."""
    plan_id = plan.id
    client = core.client()
    result = await spend.order(client, order_ticket(core, plan_id, by_card=False))
    core.spent(plan_id)
    balance = await client.get_plan_balance(plan_id)
    return {
        "ordered": True,
        "planId": plan_id,
        "planName": one_line(plan.name, NAME_LIMIT),
        "price": describe_price(plan),
        "txHash": result.tx_hash,
        "balance": str(balance.balance),
    }


@tool(
    "svc_orderFiatPlan",
    "Buy a card-paid plan: returns a checkout URL the user opens to pay. Without confirm it "
    "only returns a quote.",
    OrderParams,
)
async def order_fiat_plan(core: PluginCore, p: OrderParams) -> dict[str, Any]:
    plan = await _plan_to_order(core, p.plan_id, by_card=True)
    if not p.confirmed:
        return await quote(core, plan, "svc_orderFiatPlan", p)
    if person_approves(core):
        return ask_to_order(core, plan, by_card=True, place=lambda: place_fiat_order(core, plan))
    return await place_fiat_order(core, plan)


async def place_fiat_order(core: PluginCore, plan: Plan) -> dict[str, Any]:
    """The checkout of a card plan (``"model"`` approval, or the person's approved code)."""
    plan_id = plan.id
    ticket = order_ticket(core, plan_id, by_card=True)
    checkout = await spend.fiat_order(core.client(), ticket)
    core.spent(plan_id)
    return {
        "checkoutUrl": checkout.checkout_url,
        "planId": plan_id,
        "planName": one_line(plan.name, NAME_LIMIT),
        "price": describe_price(plan),
        "message": "Open the checkout URL to pay; credits arrive once payment completes.",
    }


class NoParams(Params):
    pass


@tool(
    "svc_listPaymentMethods",
    "List the cards enrolled on the account (brand, last four digits, expiry).",
    NoParams,
)
async def list_payment_methods(core: PluginCore, p: NoParams) -> dict[str, Any]:
    methods = await core.client().list_payment_methods()
    cards = [
        {
            "paymentMethodId": m.id,
            "brand": m.brand,
            "last4": m.last4,
            "expiry": m.expiry,
            "alias": m.alias,
            "provider": m.provider,
        }
        for m in methods
        if m.is_card
    ]
    result: dict[str, Any] = {"cards": cards, "count": len(cards)}
    if not cards:
        result["hint"] = "No card enrolled; add one in the dashboard or pay with crypto."
    return result
