"""The paid MCP server's registrations (tools, resources, prompts) and its answers.

Each call is sold with the payment in ``_meta["x402/payment"]`` (SPEC.md "Tool-server (MCP)
integration"), or without one with the session's bearer, an access token for the agent's plan
(what MCP's OAuth gives any client); billing goes through :func:`.billing.charge`, the SDK
through :mod:`.sdk`.

Answers (SPEC.md "Errors", MCP rows): payment required on a tool → an ``isError`` result whose
``structuredContent`` is the PaymentRequired object and ``content[0].text`` its JSON; on a
resource or prompt → a JSON-RPC error (-32003, ``data`` = the object). A settle that fails
after the work ran withholds the content: an in-band payment error (``onRedeemError``
``ignore``) or a JSON-RPC error (``propagate``). Every answer carries ``_meta["svc/credits"]``;
a paid one also ``_meta["x402/payment-response"]``.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from ....account.core import PluginCore
from ....config import ConfigError
from ....encoding import b64url_nopad, compact_json
from ....interop import mcp_sdk as sdk
from ....redact import get_logger
from ...flow.flow import PaidFlow
from ...flow.plans import PlanFacts
from ...state.idempotency import meta_key
from .paid_call import RECEIPT_META, Outcome, Verdict, charge, run_free
from .results import (
    call_any,
    error_result,
    prompt_result,
    resource_result,
    schema_problem,
    tool_result,
)

log = get_logger("svc_gateway.paid_mcp")

PAYMENT_META = "x402/payment"
CREDITS_META = "svc/credits"
PRICE_META = "svc/price"
#: the largest ``_meta["x402/payment"]`` read (it is re-encoded into a token)
MAX_PAYMENT_BYTES = 16 * 1024
Kind = Literal["tools", "resources", "prompts"]
OnRedeemError = Literal["ignore", "propagate"]
#: credits of one call: a number, or a function of the call context (``args``, ``result``,
#: ``request``) returning one, sync or async
Credits = int | Callable[[dict[str, Any]], Any]


@dataclass(frozen=True)
class Options:
    """The spec's handler options."""

    credits: Credits = 1
    plan_id: str | None = None
    max_amount: int = 1
    on_redeem_error: OnRedeemError = "ignore"

    def __post_init__(self) -> None:
        credits = self.credits
        if isinstance(credits, bool) or not (isinstance(credits, int) or callable(credits)):
            raise ConfigError("credits must be an int or a function of the call context")
        if isinstance(credits, int) and credits < 0:
            raise ConfigError("credits must not be negative")
        if isinstance(self.max_amount, bool) or not isinstance(self.max_amount, int):
            raise ConfigError("maxAmount must be an int")
        if self.max_amount < 1:
            raise ConfigError("maxAmount must be at least 1")
        if self.on_redeem_error not in ("ignore", "propagate"):
            raise ConfigError("onRedeemError must be 'ignore' or 'propagate'")

    @property
    def free(self) -> bool:
        return self.credits == 0

    @property
    def verify_amount(self) -> int:
        """What is verified and claimed before the work: the fixed price, else maxAmount."""
        return self.credits if isinstance(self.credits, int) else self.max_amount

    def over_plan(self, facts: PlanFacts) -> str | None:
        """Why these options cannot be sold on the plan ``facts`` describe: credits priced
        from the result with a ``max_amount`` above the plan's ``maxAmount`` (the ceiling
        verified and advertised would be one no call can be charged)."""
        plan_max = facts.max_amount
        if callable(self.credits) and plan_max is not None and self.max_amount > plan_max:
            return (
                f"maxAmount {self.max_amount} is above the {plan_max} credits plan "
                f"{facts.plan_id} charges per request at most"
            )
        return None


@dataclass
class Registration:
    kind: Kind
    name: str
    handler: Callable[..., Any]
    options: Options
    listing: dict[str, Any] = field(default_factory=dict)


class PaidMcpServer:
    """Tools, resources and prompts sold per call over MCP (implements :class:`sdk.Handlers`).

    ``plan_id`` is the server's plan (else the flow's: config ``planId`` or the registered
    one); ``server_name`` names the logical URIs ``mcp://<server_name>/<kind>/<name>``."""

    def __init__(
        self,
        core: PluginCore,
        flow: PaidFlow,
        *,
        server_name: str,
        plan_id: str | None = None,
        agent_id: str | None = None,
        version: str = "0.1.0",
    ) -> None:
        if not server_name or "/" in server_name or any(c.isspace() for c in server_name):
            raise ConfigError("serverName must be a non-empty name without '/' or spaces")
        self.core = core
        self.flow = flow
        self.server_name = server_name
        self.explicit_plan_id = plan_id
        self.explicit_agent_id = agent_id
        self.version = version
        self._entries: dict[tuple[Kind, str], Registration] = {}

    def plan_id(self, options: Options | None = None) -> str | None:
        return (
            (options.plan_id if options else None) or self.explicit_plan_id or self.flow.plan_id()
        )

    def agent_id(self) -> str | None:
        return self.explicit_agent_id or self.flow.agent_id()

    def logical_uri(self, kind: Kind, name: str) -> str:
        return f"mcp://{self.server_name}/{kind}/{name}"

    def logical_uris(self) -> list[str]:
        """Every registration's logical URI (what to register as the agent's endpoints)."""
        return [self.logical_uri(kind, name) for kind, name in self._entries]

    # -- registration --------------------------------------------------------------------------

    def _add(self, entry: Registration) -> None:
        key = (entry.kind, entry.name)
        if key in self._entries:
            raise ConfigError(f"{entry.kind[:-1]} {entry.name!r} is already registered")
        plan_id = self.plan_id(entry.options)
        facts = self.flow.facts_cache.peek(plan_id) if plan_id else None
        if facts is not None:  # the plan is known (read by check_plans or a call): check now
            self._refuse_over_plan(entry, facts)
        self._entries[key] = entry

    def _refuse_over_plan(self, entry: Registration, facts: PlanFacts) -> None:
        problem = entry.options.over_plan(facts)
        if problem:
            raise ConfigError(
                f"{entry.kind[:-1]} {entry.name!r}: {problem}; lower Options.max_amount to at "
                "most the plan's maxAmount"
            )

    async def check_plans(self) -> None:
        """Read the plans sold (plugin loop) and refuse a registration whose ``max_amount`` is
        above its plan's ``maxAmount`` (ConfigError); later registrations are checked against
        what was read. A plan that cannot be read now is checked on its calls once read."""
        plans = {self.plan_id(e.options) for e in self._entries.values()} | {self.plan_id()}
        for plan_id in sorted(p for p in plans if p):
            try:
                facts = await self.flow.facts(plan_id)
            except Exception as exc:
                log.warning("could not read plan %s (%s); checked per call", plan_id, exc)
                continue
            for entry in self._entries.values():
                if self.plan_id(entry.options) == plan_id:
                    self._refuse_over_plan(entry, facts)

    def tool(
        self,
        name: str,
        handler: Callable[..., Any],
        *,
        description: str = "",
        title: str | None = None,
        input_schema: dict[str, Any] | None = None,
        options: Options | None = None,
    ) -> None:
        """``handler(arguments: dict)`` → str | JSON object | content list | CallToolResult
        dict (sync or async)."""
        listing: dict[str, Any] = {
            "name": name,
            "description": description,
            "inputSchema": input_schema or {"type": "object"},
        }
        if title:
            listing["title"] = title
        self._add(Registration("tools", name, handler, options or Options(), listing))

    def resource(
        self,
        name: str,
        uri: str,
        handler: Callable[..., Any],
        *,
        description: str = "",
        title: str | None = None,
        mime_type: str = "text/plain",
        options: Options | None = None,
    ) -> None:
        """``handler(uri: str)`` → text | JSON | ``{"contents": [...]}``."""
        listing = {"name": name, "uri": uri, "description": description, "mimeType": mime_type}
        if title:
            listing["title"] = title
        self._add(Registration("resources", uri, handler, options or Options(), listing))

    def prompt(
        self,
        name: str,
        handler: Callable[..., Any],
        *,
        description: str = "",
        title: str | None = None,
        arguments: list[dict[str, Any]] | None = None,
        options: Options | None = None,
    ) -> None:
        """``handler(arguments: dict)`` → text | messages list | ``{"messages": [...]}``."""
        listing: dict[str, Any] = {
            "name": name,
            "description": description,
            "arguments": arguments or [],
        }
        if title:
            listing["title"] = title
        self._add(Registration("prompts", name, handler, options or Options(), listing))

    # -- listings ------------------------------------------------------------------------------

    def _price(self, entry: Registration) -> dict[str, Any]:
        credits = entry.options.credits
        return {
            "planId": self.plan_id(entry.options),
            "credits": str(credits) if isinstance(credits, int) else "dynamic",
            "maxAmount": str(entry.options.max_amount),
            "uri": self.logical_uri(entry.kind, entry.name),
        }

    def _listing(self, kind: Kind) -> list[dict[str, Any]]:
        return [
            {**e.listing, "_meta": {PRICE_META: self._price(e)}}
            for e in self._entries.values()
            if e.kind == kind
        ]

    async def list_tools(self) -> list[dict[str, Any]]:
        return self._listing("tools")

    async def list_resources(self) -> list[dict[str, Any]]:
        return self._listing("resources")

    async def list_prompts(self) -> list[dict[str, Any]]:
        return self._listing("prompts")

    # -- calls ---------------------------------------------------------------------------------

    def _entry(self, kind: Kind, name: str) -> Registration:
        entry = self._entries.get((kind, name))
        if entry is None:
            raise sdk.RpcError(sdk.INVALID_PARAMS_CODE, f"Unknown {kind[:-1]}: {name[:200]}")
        return entry

    def _token(self, call: sdk.Incoming) -> str | None:
        """The in-band payment (``_meta["x402/payment"]``) re-encoded as a token, else the
        session's bearer: an access token for the agent's plan, as OAuth gives every generic
        MCP client (SPEC.md lists OAuth on the MCP layer), is a way to pay of its own."""
        payment = call.meta.get(PAYMENT_META)
        if isinstance(payment, dict):
            encoded = compact_json(payment)
            if len(encoded) > MAX_PAYMENT_BYTES:
                return "!"  # refused as not a valid token, unasked
            return b64url_nopad(encoded.encode())
        if payment is not None:
            return "!"
        return call.bearer

    async def call_tool(self, name: str, call: sdk.Incoming) -> dict[str, Any]:
        entry = self._entry("tools", name)
        problem = schema_problem(entry.listing.get("inputSchema"), call.arguments)
        if problem:
            return error_result(f"Invalid arguments: {problem}. Nothing was charged.")
        outcome = await self._run(entry, call, call.arguments, tool_result)
        if outcome.verdict in (Verdict.PAID, Verdict.FREE):
            return self._with_meta(outcome.result, outcome)
        if outcome.verdict is Verdict.FAILED:
            return self._with_meta(error_result(outcome.message), outcome)
        return self._refusal(entry, outcome, in_band=True)

    async def read_resource(self, uri: str, call: sdk.Incoming) -> dict[str, Any]:
        entry = self._entry("resources", uri)
        mime = str(entry.listing.get("mimeType") or "text/plain")
        outcome = await self._run(entry, call, uri, lambda value: resource_result(uri, mime, value))
        if outcome.verdict in (Verdict.PAID, Verdict.FREE):
            return self._with_meta(outcome.result, outcome)
        return self._refusal(entry, outcome, in_band=False)

    async def get_prompt(self, name: str, call: sdk.Incoming) -> dict[str, Any]:
        entry = self._entry("prompts", name)
        outcome = await self._run(entry, call, call.arguments, prompt_result)
        if outcome.verdict in (Verdict.PAID, Verdict.FREE):
            return self._with_meta(outcome.result, outcome)
        return self._refusal(entry, outcome, in_band=False)

    async def _run(
        self,
        entry: Registration,
        call: sdk.Incoming,
        argument: Any,
        shape: Callable[[Any], dict[str, Any]],
    ) -> Outcome:
        """Bill one call on the plugin loop (where the flow lives), whichever loop serves MCP:
        ``entry.handler(argument)``, its answer shaped into the MCP result by ``shape``."""
        plan_id = self.plan_id(entry.options)
        if plan_id is None:
            raise sdk.RpcError(
                sdk.MISCONFIGURATION_CODE,
                "This server is not selling yet: no plan is configured. Nothing was charged.",
            )
        url = self.logical_uri(entry.kind, entry.name)
        returned: list[Any] = []

        async def work() -> dict[str, Any]:
            value = await call_any(entry.handler, argument)
            returned.append(value)
            return shape(value)

        if entry.options.free:
            return await self.core.runtime.run(run_free(self.flow, plan_id, work))
        credits = entry.options.credits
        facts = self.flow.facts_cache.peek(plan_id)
        problem = entry.options.over_plan(facts) if facts is not None else None
        if problem:  # registered before the plan could be read: refused, nothing charged
            log.error("%s %s is not sold: %s", entry.kind[:-1], entry.name, problem)
            raise sdk.RpcError(
                sdk.MISCONFIGURATION_CODE,
                "This call's price is misconfigured on the server; nothing was charged.",
            )

        async def price() -> int:
            assert callable(credits)
            context = {
                "args": call.arguments,
                "result": returned[-1],
                "request": {"logicalUrl": url, "kind": entry.kind, "name": entry.name},
            }
            value = await call_any(credits, context)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise TypeError("the credits function must return an int >= 0")
            return value

        return await self.core.runtime.run(
            charge(
                self.flow,
                plan_id=plan_id,
                agent_id=self.agent_id(),
                token=self._token(call),
                url=url,
                arguments=call.arguments if entry.kind != "resources" else {"uri": argument},
                verify_amount=entry.options.verify_amount,
                work=work,
                price=None if isinstance(credits, int) else price,
                idempotency_key=meta_key(call.meta),
            )
        )

    def _credits_meta(self, outcome: Outcome, success: bool) -> dict[str, Any]:
        return {
            "success": success,
            "txHash": outcome.transaction,
            "creditsRedeemed": str(outcome.credits),
            "planId": outcome.plan_id,
            "subscriberAddress": outcome.payer or "",
        }

    def _with_meta(self, result: dict[str, Any], outcome: Outcome) -> dict[str, Any]:
        meta: dict[str, Any] = {}
        if outcome.verdict is Verdict.PAID:
            meta[RECEIPT_META] = outcome.receipt
        meta[CREDITS_META] = self._credits_meta(outcome, outcome.verdict is not Verdict.FAILED)
        return {**result, "_meta": meta}

    def _refusal(self, entry: Registration, outcome: Outcome, *, in_band: bool) -> dict[str, Any]:
        """Payment required, settle failed or service unavailable: never the content."""
        if outcome.verdict is Verdict.UNAVAILABLE:
            raise sdk.RpcError(
                sdk.INTERNAL_ERROR_CODE,
                outcome.message,
                {"retryAfter": outcome.retry_after} if outcome.retry_after else None,
            )
        if outcome.verdict is Verdict.FAILED:
            raise sdk.RpcError(sdk.INTERNAL_ERROR_CODE, outcome.message)
        envelope = outcome.envelope or {}
        settle_failed = outcome.verdict is Verdict.UNSETTLED
        if settle_failed and entry.options.on_redeem_error == "propagate":
            raise sdk.RpcError(sdk.MISCONFIGURATION_CODE, outcome.message, envelope)
        if not in_band:
            raise sdk.RpcError(sdk.PAYMENT_REQUIRED_CODE, outcome.message, envelope)
        result = {
            "content": [{"type": "text", "text": json.dumps(envelope)}],
            "structuredContent": envelope,
            "isError": True,
        }
        return {**result, "_meta": {CREDITS_META: self._credits_meta(outcome, False)}}
