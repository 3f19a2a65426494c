"""The agent behind the paid endpoint: how a handler is chosen, called and its answer read.

A handler takes ``{"prompt": str}`` and returns a JSON-able object (200), a ``(status, body)``
pair, or an ``aiohttp.web.Response``; it may be sync or async. A sync handler runs on its own
bounded pool of threads (:class:`SyncHandlerPool`), never the loop's default executor (which
resolves host names); a thread still running after its request timed out is counted, and when
every thread is stuck, the endpoint refuses new work before verifying it. One payer's requests
(:data:`HANDLER_PAYER`) hold at most half the threads (:class:`OverShare` beyond, which the paid
flow answers 503 with ``Retry-After``, nothing charged), so another payer's request still finds
one. Whatever a handler returns is turned into a plain :class:`Answer` (bytes and headers)
*before* settling, so an answer that cannot be serialised fails the request (500, no charge)
instead of being paid for and then lost.
"""

from __future__ import annotations

import asyncio
import contextvars
import importlib
import inspect
import json
import threading
from collections.abc import Awaitable, Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
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


@dataclass(frozen=True, slots=True)
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


#: ``json.dumps(..., ensure_ascii=False, separators=(",", ":"))``, its encoder made once
_ENCODE = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode


def encode_json(data: Any) -> bytes:
    try:
        return _ENCODE(data).encode()
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


#: :func:`_is_async` of the handlers seen (a few per process; a handler is asked per request)
_ASYNC: dict[Any, bool] = {}
_ASYNC_KEPT = 64


def _is_async(fn: Callable[..., Any]) -> bool:
    try:
        return _ASYNC[fn]
    except (KeyError, TypeError):  # not seen yet, or unhashable
        pass
    found = inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(
        getattr(fn, "__call__", None)  # noqa: B004 - an object with an async __call__
    )
    try:
        if len(_ASYNC) >= _ASYNC_KEPT:
            _ASYNC.clear()
        _ASYNC[fn] = found
    except TypeError:  # unhashable: asked again next time
        pass
    return found


#: threads a sync handler may occupy at once (more requests wait for one within their timeout)
HANDLER_THREADS = 8
#: the payer of the paid request running now (the paid flow sets it once verify named them)
HANDLER_PAYER: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "svc_handler_payer", default=None
)


class OverShare(Exception):
    """The payer already holds their share of the sync handler's threads (queued, running, or
    still running after their caller gave up): their next request waits, another payer's runs."""


class SyncHandlerPool:
    """A sync handler's own threads. A call whose caller gave up (timeout, cancellation) while
    its thread still runs is *overdue*: Python cannot stop a thread, so it holds its thread
    until the handler returns. :attr:`stuck` says every thread is held that way.

    Fair share: the calls of one payer (:data:`HANDLER_PAYER`) hold at most :attr:`share`
    threads, waiting, running or overdue; one more raises :class:`OverShare` before it takes a
    thread, so a payer whose slow prompts time out (uncharged) cannot starve the others."""

    def __init__(self, workers: int = HANDLER_THREADS) -> None:
        self.workers = workers
        self.overdue = 0
        self._lock = threading.Lock()
        self._executor: ThreadPoolExecutor | None = None
        self._held: dict[str, int] = {}

    @property
    def stuck(self) -> bool:
        return self.overdue >= self.workers

    @property
    def share(self) -> int:
        """Threads one payer's calls may hold at once: half of them (at least one)."""
        return max(1, self.workers // 2)

    def held_by(self, payer: str) -> int:
        with self._lock:
            return self._held.get(payer.lower(), 0)

    def _take(self, payer: str | None) -> str | None:
        key = payer.lower() if payer else None
        if key is None:
            return None
        with self._lock:
            if self._held.get(key, 0) >= self.share:
                raise OverShare(key)
            self._held[key] = self._held.get(key, 0) + 1
        return key

    def _give_back(self, key: str | None, state: dict[str, bool]) -> None:
        """Once per call (the caller holds the lock)."""
        if key is None or state["released"]:
            return
        state["released"] = True
        left = self._held.get(key, 0) - 1
        if left > 0:
            self._held[key] = left
        else:
            self._held.pop(key, None)

    async def run(self, fn: Callable[[dict[str, Any]], Any], arg: dict[str, Any]) -> Any:
        key = self._take(HANDLER_PAYER.get())
        if self._executor is None:
            self._executor = ThreadPoolExecutor(self.workers, thread_name_prefix="svc-handler")
        state = {
            "started": False,
            "finished": False,
            "given_up": False,
            "overdue": False,
            "released": False,
        }

        def job() -> Any:
            with self._lock:
                if state["given_up"]:
                    return None  # its caller left before a thread was free: never run
                state["started"] = True
            try:
                return fn(arg)
            finally:
                with self._lock:
                    state["finished"] = True
                    if state["overdue"]:
                        self.overdue -= 1
                    if state["given_up"]:  # its caller no longer waits to give it back
                        self._give_back(key, state)

        try:
            return await asyncio.get_running_loop().run_in_executor(self._executor, job)
        except asyncio.CancelledError:
            with self._lock:
                state["given_up"] = True
                if state["started"] and not state["finished"]:
                    state["overdue"] = True
                    self.overdue += 1
            raise
        finally:
            with self._lock:
                if not state["started"] or state["finished"]:
                    self._give_back(key, state)

    def shutdown(self) -> None:
        executor, self._executor = self._executor, None
        if executor is not None:
            executor.shutdown(wait=False, cancel_futures=True)


async def call_maybe_async(
    fn: Callable[[dict[str, Any]], Any],
    arg: dict[str, Any],
    pool: SyncHandlerPool | None = None,
) -> Any:
    """Await an async function; run a sync one in a worker thread so it cannot block the loop
    (``pool``'s threads when given, else the loop's default executor)."""
    if _is_async(fn):
        result = await fn(arg)
    elif pool is not None:
        result = await pool.run(fn, arg)
    else:
        result = await asyncio.to_thread(fn, arg)
    if inspect.isawaitable(result):
        result = await result
    return result


async def run_handler(
    handler: AgentHandler, prompt: str, pool: SyncHandlerPool | None = None
) -> Answer:
    """Call the handler and normalise its answer; its exceptions propagate to the caller
    (:class:`OverShare` too: the paid flow's worker answers it 503 with ``Retry-After``)."""
    return to_answer(await call_maybe_async(handler, {"prompt": prompt}, pool))


def to_answer(result: Any) -> Answer:
    if type(result) is dict:  # the usual answer: a JSON object
        return Answer(200, encode_json(result))
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
    if content_type.startswith("text/"):  # only a text type keeps its charset
        charset = response.charset
        if charset:
            content_type = f"{content_type}; charset={charset}"
    return Answer(_status(response.status), raw, content_type, headers)
