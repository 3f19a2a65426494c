"""Spans of a paid request (SPEC.md "Tracing"), when OpenTelemetry is installed.

One span ``svc:x402-request`` per gated request, with children ``svc:verify`` and
``svc:settlement``, carrying ``svc.*`` attributes. A verification failure marks the parent
and the verify span failed; a settle failure after the work succeeded marks only the
settlement span. The token appears only abbreviated (first and last 4 characters), never a
key. ``opentelemetry-api`` is an optional extra (``otel``): without it this module imports
nothing and every call is a no-op on a shared null object.

Other tracing backends add themselves with :func:`add_trace_backend` (the ``langgraph`` extra's
LangSmith runs): each gives a trace for a request when its own switch is on, and the flow's hooks
reach every trace that is on (:class:`Traces`).
"""

from __future__ import annotations

import importlib.util
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, ExitStack, contextmanager, nullcontext
from typing import Any

REQUEST_SPAN = "svc:x402-request"
VERIFY_SPAN = "svc:verify"
SETTLE_SPAN = "svc:settlement"
TRACER_NAME = "svc_gateway.paid"

_otel: Any = None  # the opentelemetry.trace module, once looked up; False: not installed
_provider: Any = None  # a tracer provider set with use_tracer_provider (else the global one)
_global: Any = None  # the global tracer provider, once one is set (OpenTelemetry sets it once)
_unset_until = 0.0  # no global provider was set when last looked: not looked again before this
#: how often a paid request looks for a newly set global tracer provider while none is set
#: (reading it costs an environment lookup, too dear for every request)
GLOBAL_RECHECK_SECS = 1.0


def use_tracer_provider(provider: Any) -> None:
    """Send the paid spans to ``provider`` instead of OpenTelemetry's global tracer provider
    (``None``: back to the global one)."""
    global _provider
    _provider = provider


def _trace_module() -> Any:
    global _otel
    if _otel is None:
        if importlib.util.find_spec("opentelemetry") is None:
            _otel = False
        else:
            from opentelemetry import trace

            _otel = trace
    return _otel


def abbreviate(token: str | None) -> str | None:
    """First and last 4 characters of a token; short ones are not shown at all."""
    if not token:
        return None
    if len(token) < 16:
        return "…"
    return f"{token[:4]}…{token[-4:]}"


#: the null hooks' one context manager (a ``nullcontext`` holds no state: it is reusable)
_NOTHING = nullcontext()


class NullTrace:
    """Tracing off: every hook does nothing."""

    enabled = False

    def request(self) -> AbstractContextManager[Any]:
        return _NOTHING

    def verify(self) -> AbstractContextManager[Any]:
        return _NOTHING

    def settlement(self) -> AbstractContextManager[Any]:
        return _NOTHING

    def set(self, **attrs: str | int | float | bool | None) -> None:
        return None

    def fail(self, reason: str, *, parent: bool = True) -> None:
        return None


NULL_TRACE = NullTrace()


class RequestTrace(NullTrace):
    """The spans of one request; the flow calls the hooks, this class owns OpenTelemetry."""

    enabled = True

    def __init__(self, trace: Any, provider: Any) -> None:
        self._trace = trace
        self._tracer = _tracer(provider)
        self._parent: Any = None
        self._child: Any = None

    @contextmanager
    def request(self) -> Iterator[Any]:
        with self._tracer.start_as_current_span(REQUEST_SPAN, record_exception=True) as span:
            self._parent = span
            yield span

    @contextmanager
    def verify(self) -> Iterator[Any]:
        yield from self._child_span(VERIFY_SPAN, "svc.verify_ms")

    @contextmanager
    def settlement(self) -> Iterator[Any]:
        yield from self._child_span(SETTLE_SPAN, "svc.settle_ms")

    def _child_span(self, name: str, timing: str) -> Iterator[Any]:
        started = time.perf_counter()
        with self._tracer.start_as_current_span(name) as span:
            self._child = span
            try:
                yield span
            finally:
                elapsed = round((time.perf_counter() - started) * 1000, 3)
                span.set_attribute(timing, elapsed)
                self._parent.set_attribute(timing, elapsed)  # children open inside request()
                self._child = None

    def set(self, **attrs: str | int | float | bool | None) -> None:
        """``svc.<name>`` attributes on the request span (and the open child span)."""
        for name, value in attrs.items():
            if value is None:
                continue
            for span in (self._parent, self._child):
                if span is not None:
                    span.set_attribute(f"svc.{name}", value)

    def fail(self, reason: str, *, parent: bool = True) -> None:
        """Mark the open child span failed, and the request span too unless ``parent=False``."""
        status = self._trace.Status(self._trace.StatusCode.ERROR, reason)
        if self._child is not None:
            self._child.set_status(status)
        if parent and self._parent is not None:
            self._parent.set_status(status)


_tracers: dict[int, tuple[Any, Any]] = {}  # id(provider) → (provider, its tracer)


def _tracer(provider: Any) -> Any:
    """The paid path's tracer of ``provider``, made once (the SDK builds a new tracer, with its
    instrumentation scope, on every ``get_tracer``)."""
    kept = _tracers.get(id(provider))
    if kept is not None and kept[0] is provider:
        return kept[1]
    tracer = provider.get_tracer(TRACER_NAME)
    if len(_tracers) >= 8:  # a provider is set once or twice per process: a small bound
        _tracers.clear()
    _tracers[id(provider)] = (provider, tracer)
    return tracer


def _global_provider(trace: Any) -> Any:
    """OpenTelemetry's global tracer provider, or ``None`` while none is set. It can be set
    only once, so a real one is kept; while none is, it is looked up at most once a second."""
    global _global, _unset_until
    if _global is not None:
        return _global
    now = time.monotonic()
    if now < _unset_until:
        return None
    provider = trace.get_tracer_provider()
    if isinstance(provider, trace.ProxyTracerProvider | trace.NoOpTracerProvider):
        _unset_until = now + GLOBAL_RECHECK_SECS
        return None
    _global = provider
    return provider


#: more backends: each gives one request's trace, or ``None`` while its switch is off
_backends: list[Callable[[], NullTrace | None]] = []


def add_trace_backend(backend: Callable[[], NullTrace | None]) -> None:
    """Trace every paid request with ``backend`` too (added once)."""
    if backend not in _backends:
        _backends.append(backend)


def remove_trace_backend(backend: Callable[[], NullTrace | None]) -> None:
    if backend in _backends:
        _backends.remove(backend)


class Traces(NullTrace):
    """Several traces of one request (OpenTelemetry's and another backend's): each hook reaches
    all of them, each span opened in every one."""

    enabled = True

    def __init__(self, traces: list[NullTrace]) -> None:
        self._traces = traces

    @contextmanager
    def _all(self, hook: str) -> Iterator[None]:
        with ExitStack() as stack:
            for trace in self._traces:
                stack.enter_context(getattr(trace, hook)())
            yield

    def request(self) -> AbstractContextManager[Any]:
        return self._all("request")

    def verify(self) -> AbstractContextManager[Any]:
        return self._all("verify")

    def settlement(self) -> AbstractContextManager[Any]:
        return self._all("settlement")

    def set(self, **attrs: str | int | float | bool | None) -> None:
        for trace in self._traces:
            trace.set(**attrs)

    def fail(self, reason: str, *, parent: bool = True) -> None:
        for trace in self._traces:
            trace.fail(reason, parent=parent)


def start_trace() -> NullTrace:
    """The request's trace: OpenTelemetry's (:func:`otel_trace`) and those of the backends
    whose switch is on, or the shared null object when none is."""
    otel = otel_trace()
    if not _backends:
        return otel
    more = [trace for backend in _backends if (trace := backend()) is not None]
    if not more:
        return otel
    return Traces([otel, *more]) if otel.enabled else more[0] if len(more) == 1 else Traces(more)


def otel_trace() -> NullTrace:
    """A trace for one request: a real one when OpenTelemetry is installed and a tracer
    provider is set (the tracing switch: :func:`use_tracer_provider` at once, OpenTelemetry's
    global one within :data:`GLOBAL_RECHECK_SECS`), else the shared null object."""
    if _otel and _provider is None and _global is None and time.monotonic() < _unset_until:
        return NULL_TRACE  # none set, and looked up less than a second ago
    trace = _trace_module()
    if not trace:
        return NULL_TRACE
    provider = _provider or _global_provider(trace)
    if provider is None or isinstance(
        provider, trace.ProxyTracerProvider | trace.NoOpTracerProvider
    ):
        return NULL_TRACE
    return RequestTrace(trace, provider)
