"""How a tool is declared and run: a pydantic params model plus one async function.

The params model's JSON Schema is what the host shows the model. :func:`to_spec` wraps the
function so that bad params, service errors and bugs all become error *results*; nothing
raises into the host.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError

from ..account.core import PluginCore
from ..approvals.gate import CALLER, ApprovalNeeded
from ..chat.failure import ToolFailure
from ..config import ConfigError
from ..host import Caller, ToolHandler, ToolResult, ToolSpec
from ..redact import get_logger
from ..runtime import RuntimeClosed
from ..service.errors import NotFound, ServiceError
from ..service.pricing import PriceError
from ..suggest import nearest

if TYPE_CHECKING:
    from ..chat.accounts import UserAccounts

log = get_logger("svc_gateway.tools")

P = TypeVar("P", bound=BaseModel)


class Params(BaseModel):
    """Base of every tool's parameters: unknown keys are an error the model can fix."""

    model_config = ConfigDict(
        extra="forbid",
        populate_by_name=True,
        str_strip_whitespace=True,
        # models send ids as JSON numbers ({"planId": 123}): read them as their decimal text
        coerce_numbers_to_str=True,
    )


@dataclass(frozen=True)
class Tool(Generic[P]):
    name: str
    description: str
    params: type[P]
    run: Callable[[PluginCore, P], Awaitable[dict[str, Any]]]

    def schema(self) -> dict[str, Any]:
        schema = self.params.model_json_schema(by_alias=True)
        schema.pop("title", None)
        schema.setdefault("properties", {})
        return schema


TOOLS: dict[str, Tool[Any]] = {}


def tool(
    name: str, description: str, params: type[P]
) -> Callable[
    [Callable[[PluginCore, P], Awaitable[dict[str, Any]]]],
    Callable[[PluginCore, P], Awaitable[dict[str, Any]]],
]:
    """Declare a tool once: name, description, params model, function."""

    def decorate(
        fn: Callable[[PluginCore, P], Awaitable[dict[str, Any]]],
    ) -> Callable[[PluginCore, P], Awaitable[dict[str, Any]]]:
        TOOLS[name] = Tool(name, description, params, fn)
        return fn

    return decorate


#: text written for someone calling the REST API, not for a chat user: an HTTP verb and path
_API_SPEAK = re.compile(r"\b(?:GET|POST|PUT|PATCH|DELETE)\s+/|/api/v\d|/protocol/|/x402/|/meta/")
_API_ASIDE = re.compile(r"\s*\([^()]*(?:\b(?:GET|POST|PUT|PATCH|DELETE)\s+/|/api/v\d)[^()]*\)")
#: hints for service errors whose own hint is about the REST API
CHAT_HINTS: dict[str, str] = {
    "BCK.X402.0035": "The plan is paid another way: pass paymentType: fiat for a card-paid plan "
    "(or crypto for a crypto plan), or leave paymentType out to follow the plan.",
    "BCK.X402.0036": "This agent does not sell that plan: leave planId out to use the agent's own "
    "plan, or pass one of the agent's plans.",
    "BCK.PROTOCOL.0031": "That URL is not one of the agent's registered endpoints: use the URL the "
    "agent registered.",
    "BCK.APIKEY.0004": "The service refused the API key: log in again with /svc_login (create a "
    "key in the dashboard under Settings, API keys).",
    "BCK.VERSION.0001": "Set apiVersion in the plugin config to a version the service supports "
    "(for example 1.1).",
}
_STATUS_HINTS = {
    401: "Log in again with /svc_login.",
    403: "This account may not do that; use the account that owns it.",
    404: NotFound.default_hint,
}


def for_chat(exc: ServiceError) -> tuple[str, str]:
    """The error's message and hint, worded for a chat user: never a REST path or verb."""
    message, hint = exc.message, exc.hint
    if _API_SPEAK.search(message):
        message = _API_ASIDE.sub("", message)
        if _API_SPEAK.search(message):
            message = f"The service refused the request ({exc.code})"
    if exc.code in CHAT_HINTS:
        hint = CHAT_HINTS[exc.code]
    elif _API_SPEAK.search(hint):
        default = type(exc).default_hint
        hint = (
            default
            if not _API_SPEAK.search(default)
            else _STATUS_HINTS.get(exc.status or 0, "Fix what the message names and try again.")
        )
    return message, hint


#: What to say when a required field is left out, where "Field required" is not enough.
MISSING_HINTS: dict[str, str] = {
    "priceAmounts": 'required: the price (for a free plan give "0" explicitly)',
}


def field_names(params: type[BaseModel]) -> list[str]:
    """The parameter names the model sees (the aliases)."""
    return [info.alias or name for name, info in params.model_fields.items()]


def _unknown_field(field: str, known: list[str]) -> str:
    close = nearest(field, known)
    if close:
        return f"{field}: unknown field; did you mean {close}?"
    listed = ", ".join(known) if known else "none"
    return f"{field}: unknown field (the fields are: {listed})"


def describe_validation(error: ValidationError, known: list[str] | None = None) -> str:
    parts = []
    for item in error.errors(include_url=False, include_input=False):
        field = ".".join(str(p) for p in item["loc"]) or "params"
        if item["type"] == "extra_forbidden" and known is not None:
            parts.append(_unknown_field(field, known))
            continue
        message = str(item["msg"]).removeprefix("Value error, ")
        if item["type"] == "missing" and field in MISSING_HINTS:
            message = MISSING_HINTS[field]
        parts.append(f"{field}: {message}")
    return "; ".join(parts)


async def execute(
    core: PluginCore, spec: Tool[Any], raw: dict[str, Any] | None, caller: Caller | None = None
) -> ToolResult:
    """Validate, run, and turn every failure into an error result. ``caller``: the chat user
    the host named, whom a pending purchase is bound to."""
    token = CALLER.set(caller.identity if caller is not None else "")
    try:
        return await _execute(core, spec, raw)
    finally:
        CALLER.reset(token)


async def _execute(core: PluginCore, spec: Tool[Any], raw: dict[str, Any] | None) -> ToolResult:
    try:
        params = spec.params.model_validate(raw or {})
    except ValidationError as exc:
        return ToolResult.error(
            "invalid_params",
            f"Invalid parameters for {spec.name}: "
            f"{describe_validation(exc, field_names(spec.params))}",
            "Fix the named field(s) and call the tool again.",
        )
    try:
        return ToolResult.ok(await spec.run(core, params))
    except ApprovalNeeded as exc:  # nothing was paid: the person is asked
        return ToolResult.ok(exc.result)
    except ToolFailure as exc:
        return ToolResult.error(exc.code, exc.message, exc.hint)
    except ServiceError as exc:
        return ToolResult.error(exc.code, *for_chat(exc))
    except (PriceError, ConfigError) as exc:
        return ToolResult.error("invalid_params", str(exc), "Fix the value and call again.")
    except RuntimeClosed:  # a read-only tool on the host's loop, as the plugin closed
        return plugin_closed()
    except Exception:
        log.exception("tool %s failed", spec.name)
        return ToolResult.error(
            "internal_error",
            f"{spec.name} failed unexpectedly",
            "Try again; if it keeps failing, report it with the gateway log.",
        )


def plugin_closed() -> ToolResult:
    return ToolResult.error(
        "plugin_closed",
        "The svc plugin has been shut down",
        "Restart the gateway to use the payments tools again.",
    )


def tool_handler(
    core: PluginCore, spec: Tool[Any], accounts: UserAccounts | None = None
) -> ToolHandler:
    """A handler that can be awaited from any loop or thread.

    It runs the tool on the plugin loop, which owns the plugin's state and its client (the
    hop there and back is about 0.07 ms, against a service round trip of tens). With
    ``accounts`` (a hosted gateway), the call runs as the ``caller`` the host names."""

    async def handler(raw: dict[str, Any], /, caller: Caller | None = None) -> ToolResult:
        target = core if accounts is None else accounts.core_for(caller)
        try:
            return await core.runtime.run(execute(target, spec, raw, caller))
        except RuntimeClosed:
            return plugin_closed()

    return handler


def to_spec(core: PluginCore, spec: Tool[Any], accounts: UserAccounts | None = None) -> ToolSpec:
    """A host-facing ToolSpec (its schema built from the params model); see
    :func:`tool_handler`. ``register`` uses the stored catalogue instead."""
    return ToolSpec(spec.name, spec.description, spec.schema(), tool_handler(core, spec, accounts))
