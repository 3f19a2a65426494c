"""LangSmith runs of the paid requests, when LangSmith's tracing switch is on
(``LANGSMITH_TRACING=true``, or a ``langsmith.tracing_context(enabled=True)``).

SPEC.md "Tracing", on LangSmith: one top-level run ``svc:x402-request`` (``chain``) per gated
request, with children ``svc:verify`` and ``svc:settlement`` (``tool``), carrying the same
``svc.*`` metadata as the OpenTelemetry spans (plan id, scheme, network, payer, credits
redeemed, balance after, transaction hash, the token abbreviated, ``svc.verify_ms`` and
``svc.settle_ms``). A verification failure marks the parent and the verify run failed; a settle
failure after the work succeeded marks only the settlement run. No key and no full token is ever
put in a run (the flow sets the token abbreviated; inputs and outputs hold no request data).

The runs go through LangSmith's own client (its background thread sends them; nothing here
blocks the loop): the cached client of the environment (``LANGSMITH_ENDPOINT``,
``LANGSMITH_API_KEY``), or the one given to :func:`use_langsmith_client`. OpenTelemetry's
spans keep working beside them (:class:`~svc_gateway.selling.flow.tracing.Traces`).
"""

from __future__ import annotations

import importlib
import importlib.util
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from ...flow.tracing import REQUEST_SPAN, SETTLE_SPAN, VERIFY_SPAN, NullTrace, add_trace_backend

__all__ = [
    "LangSmithTrace",
    "install_langsmith",
    "langsmith_trace",
    "prepare_langsmith",
    "use_langsmith_client",
]

_client: Any = None  # a client set with use_langsmith_client (else the environment's)


def use_langsmith_client(client: Any) -> None:
    """Send the paid runs with ``client`` (a ``langsmith.Client``; ``None``: the environment's)."""
    global _client
    _client = client


class LangSmithTrace(NullTrace):
    """The runs of one request; the flow calls the hooks (``set``, ``fail``, the three spans)."""

    enabled = True

    def __init__(self, run_tree: Any, client: Any) -> None:
        self._run_tree = run_tree  # langsmith.run_trees.RunTree
        self._client = client
        self._parent: Any = None
        self._child: Any = None
        self._meta: dict[str, Any] = {}
        self._child_meta: dict[str, Any] = {}
        self._error: str | None = None
        self._child_error: str | None = None

    @contextmanager
    def request(self) -> Iterator[Any]:
        options = {"client": self._client} if self._client is not None else {}
        parent = self._run_tree(name=REQUEST_SPAN, run_type="chain", inputs={}, **options)
        self._parent = parent
        parent.post()
        try:
            yield parent
        except BaseException as exc:
            self._error = self._error or type(exc).__name__
            raise
        finally:
            parent.add_metadata(self._meta)
            parent.end(outputs={"outcome": self._meta.get("svc.outcome")}, error=self._error)
            parent.patch()

    @contextmanager
    def verify(self) -> Iterator[Any]:
        yield from self._child_run(VERIFY_SPAN, "svc.verify_ms")

    @contextmanager
    def settlement(self) -> Iterator[Any]:
        yield from self._child_run(SETTLE_SPAN, "svc.settle_ms")

    def _child_run(self, name: str, timing: str) -> Iterator[Any]:
        started = time.perf_counter()
        child = self._parent.create_child(name=name, run_type="tool", inputs={})
        self._child, self._child_meta, self._child_error = child, {}, None
        child.post()
        try:
            yield child
        finally:
            elapsed = round((time.perf_counter() - started) * 1000, 3)
            self._child_meta[timing] = self._meta[timing] = elapsed
            child.add_metadata(self._child_meta)
            child.end(outputs={}, error=self._child_error)
            child.patch()
            self._child = None

    def set(self, **attrs: str | int | float | bool | None) -> None:
        """``svc.<name>`` metadata on the request run (and the open child run)."""
        for name, value in attrs.items():
            if value is None:
                continue
            self._meta[f"svc.{name}"] = value
            if self._child is not None:
                self._child_meta[f"svc.{name}"] = value

    def fail(self, reason: str, *, parent: bool = True) -> None:
        """Mark the open child run failed, and the request run too unless ``parent=False``."""
        if self._child is not None:
            self._child_error = reason
        if parent:
            self._error = reason


def langsmith_trace() -> NullTrace | None:
    """A request's LangSmith trace while LangSmith's tracing switch is on, else ``None``."""
    # (imported by name: the extra's package, which the type-checked environment may lack)
    utils = importlib.import_module("langsmith.utils")
    if not utils.tracing_is_enabled():
        return None
    return LangSmithTrace(importlib.import_module("langsmith.run_trees").RunTree, _client)


def prepare_langsmith() -> None:
    """What LangSmith's first run would do on the loop, done here (call it off the loop, in a
    thread): its runtime description runs ``platform`` subprocesses (cached after), and the
    environment's client is built once. ``langgraph dev``'s blocking-call detector caught it."""
    importlib.import_module("langsmith.env").get_runtime_environment()
    if _client is None:
        importlib.import_module("langsmith.run_trees").get_cached_client()


def install_langsmith() -> bool:
    """Add the LangSmith runs to every paid request's trace when ``langsmith`` is installed
    (once; each request still checks the switch). ``False``: not installed."""
    if importlib.util.find_spec("langsmith") is None:
        return False
    add_trace_backend(langsmith_trace)
    return True
