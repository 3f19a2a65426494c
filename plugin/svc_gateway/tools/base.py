"""How a tool is declared and run: a pydantic params model plus one async function.

The params model's JSON Schema is what the host shows the model. :func:`to_spec` wraps the
function so that bad params, service errors and bugs all become error *results*; nothing
raises into the host.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError

from ..config import ConfigError
from ..core import PluginCore
from ..errors import ServiceError
from ..host import ToolResult, ToolSpec
from ..pricing import PriceError
from ..redact import get_logger
from ..runtime import RuntimeClosed

log = get_logger("svc_gateway.tools")

P = TypeVar("P", bound=BaseModel)


class Params(BaseModel):
    """Base of every tool's parameters: unknown keys are an error the model can fix."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True, str_strip_whitespace=True)


class ToolFailure(Exception):
    """A tool's own refusal: becomes an error result with this code, message and hint."""

    def __init__(self, code: str, message: str, hint: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.hint = hint


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


def describe_validation(error: ValidationError) -> str:
    parts = []
    for item in error.errors(include_url=False, include_input=False):
        field = ".".join(str(p) for p in item["loc"]) or "params"
        message = str(item["msg"]).removeprefix("Value error, ")
        parts.append(f"{field}: {message}")
    return "; ".join(parts)


async def execute(core: PluginCore, spec: Tool[Any], raw: dict[str, Any] | None) -> ToolResult:
    """Validate, run, and turn every failure into an error result."""
    try:
        params = spec.params.model_validate(raw or {})
    except ValidationError as exc:
        return ToolResult.error(
            "invalid_params",
            f"Invalid parameters for {spec.name}: {describe_validation(exc)}",
            "Fix the named field(s) and call the tool again.",
        )
    try:
        return ToolResult.ok(await spec.run(core, params))
    except ToolFailure as exc:
        return ToolResult.error(exc.code, exc.message, exc.hint)
    except ServiceError as exc:
        return ToolResult.error(exc.code, exc.message, exc.hint)
    except (PriceError, ConfigError) as exc:
        return ToolResult.error("invalid_params", str(exc), "Fix the value and call again.")
    except Exception:
        log.exception("tool %s failed", spec.name)
        return ToolResult.error(
            "internal_error",
            f"{spec.name} failed unexpectedly",
            "Try again; if it keeps failing, report it with the gateway log.",
        )


def to_spec(core: PluginCore, spec: Tool[Any]) -> ToolSpec:
    """A host-facing ToolSpec whose handler can be awaited from any loop or thread."""

    async def handler(raw: dict[str, Any]) -> ToolResult:
        try:
            return await core.runtime.run(execute(core, spec, raw))
        except RuntimeClosed:
            return ToolResult.error(
                "plugin_closed",
                "The svc plugin has been shut down",
                "Restart the gateway to use the payments tools again.",
            )

    return ToolSpec(spec.name, spec.description, spec.schema(), handler)


def require_plan(core: PluginCore, plan_id: str | None) -> str:
    plan = plan_id or core.plan_id
    if not plan:
        raise ToolFailure(
            "missing_plan_id",
            "No planId was given and no default plan is configured",
            "Pass planId, or set planId in the plugin config (svc_listPlans lists your plans).",
        )
    return plan


def require_agent(core: PluginCore, agent_id: str | None) -> str | None:
    return agent_id or core.agent_id
