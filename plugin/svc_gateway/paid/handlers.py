"""The agent behind the paid endpoint: how a handler is chosen, called and its answer read.

A handler takes ``{"prompt": str}`` and returns a JSON-able object (200), a ``(status, body)``
pair, or an ``aiohttp.web.Response``; it may be sync or async. Whatever it returns is turned
into a plain :class:`Answer` (bytes and headers) *before* settling, so an answer that cannot be
serialised fails the request (500, no charge) instead of being paid for and then lost.
"""

from __future__ import annotations

import asyncio
import importlib
import inspect
import json
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from ..config import ConfigError

#: ``{"prompt": str}`` → JSON-able | ``(status, body)`` | ``web.Response`` (or an awaitable of one)
AgentHandler = Callable[[dict[str, Any]], Any]
#: ``{"prompt": str}`` → credits to charge for this request (sync or async)
CreditsFn = Callable[[dict[str, Any]], "int | Awaitable[int]"]

JSON_TYPE = "application/json"
# headers a handler may not set: the endpoint owns framing and the payment headers
_RESERVED = frozenset(
    {"content-length", "content-type", "transfer-encoding", "connection", "payment-response"}
)


class HandlerError(Exception):
    """The handler broke its contract (bad status, unserialisable body); answered as 500."""


@dataclass(frozen=True)
class Answer:
    """A handler's answer as plain data, so it can cross from the plugin loop to the host's."""

    status: int
    body: bytes
    content_type: str = JSON_TYPE
    headers: tuple[tuple[str, str], ...] = ()

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300

    @classmethod
    def json(cls, status: int, data: Any, headers: Mapping[str, str] | None = None) -> Answer:
        return cls(status, encode_json(data), JSON_TYPE, tuple((headers or {}).items()))


def encode_json(data: Any) -> bytes:
    try:
        return json.dumps(data, ensure_ascii=False, separators=(",", ":")).encode()
    except (TypeError, ValueError) as exc:
        raise HandlerError(f"the answer is not JSON-serialisable ({type(exc).__name__})") from None


async def default_handler(request: dict[str, Any]) -> dict[str, Any]:
    """A small deterministic agent: facts computed from the prompt, never random data."""
    prompt = str(request.get("prompt", ""))
    words = prompt.split()
    longest = max(words, key=len) if words else ""
    return {
        "answer": (
            f"Your prompt has {len(words)} word{'s' if len(words) != 1 else ''} and "
            f"{len(prompt)} characters; its longest word is '{longest}'."
        ),
        "wordCount": len(words),
        "charCount": len(prompt),
        "echo": prompt,
    }


def load_handler(spec: str) -> AgentHandler:
    """Import ``module:function`` (config ``agentHandler``); a clear ConfigError if it fails."""
    module_name, _, attr = spec.partition(":")
    try:
        target: Any = importlib.import_module(module_name)
    except Exception as exc:  # ImportError, or the module itself failing to import
        raise ConfigError(
            f"agentHandler: cannot import module '{module_name}' ({type(exc).__name__})"
        ) from None
    for part in attr.split("."):
        target = getattr(target, part, None)
        if target is None:
            raise ConfigError(f"agentHandler: '{module_name}' has no attribute '{attr}'")
    if not callable(target):
        raise ConfigError(f"agentHandler: '{spec}' is not callable")
    handler: AgentHandler = target
    return handler


def _is_async(fn: Callable[..., Any]) -> bool:
    return inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(
        getattr(fn, "__call__", None)  # noqa: B004 - an object with an async __call__
    )


async def call_maybe_async(fn: Callable[[dict[str, Any]], Any], arg: dict[str, Any]) -> Any:
    """Await an async function; run a sync one in a worker thread so it cannot block the loop."""
    result = await fn(arg) if _is_async(fn) else await asyncio.to_thread(fn, arg)
    if inspect.isawaitable(result):
        result = await result
    return result


async def run_handler(handler: AgentHandler, prompt: str) -> Answer:
    """Call the handler and normalise its answer; its exceptions propagate to the caller."""
    return to_answer(await call_maybe_async(handler, {"prompt": prompt}))


def to_answer(result: Any) -> Answer:
    if isinstance(result, web.Response):
        return _from_response(result)
    if isinstance(result, web.StreamResponse):
        raise HandlerError("a streaming response cannot be paid for; return a Response")
    if (
        isinstance(result, tuple)
        and len(result) == 2
        and isinstance(result[0], int)
        and not isinstance(result[0], bool)
    ):
        return Answer.json(_status(result[0]), result[1])
    return Answer.json(200, result)


def _status(value: int) -> int:
    if not 200 <= value <= 599:
        raise HandlerError(f"status {value} is not a final HTTP status")
    return value


def _from_response(response: web.Response) -> Answer:
    body = response.body
    if body is None:
        raw = b""
    elif isinstance(body, bytes | bytearray):
        raw = bytes(body)
    else:
        raise HandlerError("a Response with a streaming payload cannot be paid for")
    headers = tuple((k, v) for k, v in response.headers.items() if k.lower() not in _RESERVED)
    content_type = response.content_type or "application/octet-stream"
    if response.charset and content_type.startswith("text/"):
        content_type = f"{content_type}; charset={response.charset}"
    return Answer(_status(response.status), raw, content_type, headers)
