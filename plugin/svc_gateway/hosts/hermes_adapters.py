"""Hermes adapters for tools and the balance hook: what the model gets, and ``pre_llm_call``.

A tool handler returns the JSON string Hermes shows the model and never raises; the
``pre_llm_call`` callback is synchronous, answers a cache hit on Hermes's own thread and waits for
the plugin loop at most :data:`HOOK_BUDGET_SECS`. With :class:`~.hermes_users.Senders` (a hosted
gateway), both act for the chat user Hermes named for the session.
"""

from __future__ import annotations

import asyncio
import inspect
import json
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from ..host import HookHandler, PromptContext, ToolResult, ToolSpec
from ..redact import get_logger, redact
from ..runtime import PluginRuntime, RuntimeClosed
from .hermes_users import NO_SENDER, Senders

#: The longest a prompt waits for the balance context (the plugin serves stale data or nothing
#: well inside this; this is the backstop that keeps a stuck loop from stalling a turn).
HOOK_BUDGET_SECS = 2.0

log = get_logger("svc_gateway.hosts.hermes")

# -- tools -------------------------------------------------------------------------------------


def _error_json(code: str, message: str, hint: str) -> str:
    return json.dumps({"error": {"code": code, "message": message, "hint": hint}})


def result_json(result: object) -> str:
    """The string Hermes shows the model for a tool result."""
    if isinstance(result, ToolResult):
        data: Any = result.structuredContent
        if result.isError and not (isinstance(data, Mapping) and "error" in data):
            data = {"error": data}
    elif isinstance(result, Mapping):
        data = dict(result)
    else:
        return _error_json(
            "internal",
            "The svc tool returned no result.",
            "Retry; if it keeps failing, check the gateway log.",
        )
    try:
        return json.dumps(data, ensure_ascii=False, default=str)
    except (TypeError, ValueError):
        return _error_json(
            "internal",
            "The svc tool returned a result that is not JSON.",
            "Retry; if it keeps failing, check the gateway log.",
        )


def describe_failure(what: str, error: BaseException) -> None:
    """Log a failed svc call: redacted, without a traceback (exception texts and frames may
    hold keys)."""
    log.warning("svc %s failed: %s: %s", what, type(error).__name__, redact(str(error)))


def make_tool_handler(
    spec: ToolSpec, senders: Senders | None = None
) -> Callable[..., Awaitable[str]]:
    """An async Hermes tool handler ``(args, **kwargs) -> str`` that never raises. With
    ``senders`` (a hosted gateway), it runs as the chat user Hermes named for the session."""

    async def handler(args: Any = None, **kwargs: Any) -> str:
        if args is not None and not isinstance(args, Mapping):
            return _error_json(
                "invalid_params",
                f"{spec.name} expects a JSON object of parameters.",
                "Call the tool again with an object matching its schema.",
            )
        if senders is not None and senders.unidentified(kwargs.get("session_id")):
            return _error_json(*NO_SENDER)
        caller = senders.caller(kwargs.get("session_id")) if senders is not None else None
        try:
            if caller is None:
                result = await spec.handler(dict(args or {}))
            else:
                result = await spec.handler(dict(args or {}), caller)
        except RuntimeClosed:
            return _error_json(
                "unavailable",
                "The svc plugin has been shut down.",
                "Restart the gateway to use the svc tools again.",
            )
        except Exception as error:
            describe_failure(f"tool {spec.name}", error)
            return _error_json(
                "internal",
                f"The svc plugin hit an internal error running {spec.name} "
                f"({type(error).__name__}).",
                "Retry; if it keeps failing, check the gateway log.",
            )
        return result_json(result)

    handler.__name__ = handler.__qualname__ = f"svc_tool_{spec.name}"
    return handler


def tool_schema(spec: ToolSpec) -> dict[str, Any]:
    return {"name": spec.name, "description": spec.description, "parameters": spec.parameters}


# -- the balance hook --------------------------------------------------------------------------


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


async def _collect(handlers: list[HookHandler], ctx: PromptContext) -> list[str]:
    results = await asyncio.gather(*(handler(ctx) for handler in handlers), return_exceptions=True)
    texts: list[str] = []
    for result in results:
        if isinstance(result, BaseException):
            describe_failure("before_prompt_build hook", result)
        elif isinstance(result, str) and result.strip():
            texts.append(result.strip())
    return texts


def _takes_context(peek: Callable[..., Any]) -> bool:
    try:
        return bool(inspect.signature(peek).parameters)
    except (TypeError, ValueError):
        return False


def make_pre_llm_call(
    handlers: list[HookHandler],
    runtime: PluginRuntime,
    budget_secs: float = HOOK_BUDGET_SECS,
    senders: Senders | None = None,
) -> Callable[..., dict[str, str] | None]:
    """A synchronous ``pre_llm_call`` callback: never raises, never waits beyond the budget.
    With ``senders`` it remembers who each session belongs to (tools only get the session)."""

    peeks = [peek for h in handlers if callable(peek := getattr(h, "peek", None))]
    with_context = [_takes_context(peek) for peek in peeks]
    fast = len(peeks) == len(handlers)

    def pre_llm_call(**kwargs: Any) -> dict[str, str] | None:
        if senders is not None:
            senders.remember(
                kwargs.get("session_id"), kwargs.get("sender_id"), kwargs.get("platform")
            )
        prompt = PromptContext(
            sender_id=_text(kwargs.get("sender_id")),
            channel=_text(kwargs.get("platform")),
            session_id=_text(kwargs.get("session_id")),
            user_message=_text(kwargs.get("user_message")),
        )
        if fast:  # a cache hit: answered on this thread, no hop to the plugin loop
            try:
                found = [
                    peek(prompt) if takes else peek()
                    for peek, takes in zip(peeks, with_context, strict=True)
                ]
            except Exception as error:
                describe_failure("pre_llm_call hook", error)
                return None
            if all(item is None or isinstance(item, str) for item in found):
                text = "\n".join(t.strip() for t in found if isinstance(t, str) and t.strip())
                return {"context": text} if text else None
        try:
            texts = runtime.run_sync(_collect(handlers, prompt), timeout=budget_secs)
        except TimeoutError:
            log.info(
                "svc balance context took longer than %.1f s; prompt sent without it", budget_secs
            )
            return None
        except Exception as error:
            describe_failure("pre_llm_call hook", error)
            return None
        text = "\n".join(texts)
        return {"context": text} if text else None

    pre_llm_call.__name__ = pre_llm_call.__qualname__ = "svc_pre_llm_call"
    return pre_llm_call
