"""SPEC.md "Tracing": one ``svc:x402-request`` span per gated request with ``svc:verify`` and
``svc:settlement`` children, recorded by the OpenTelemetry SDK's in-memory exporter, over real
loopback HTTP against the sandbox. No attribute holds a full token or key."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from types import SimpleNamespace
from typing import Any

import httpx
import pytest
from aiohttp import web
from opentelemetry import trace as otel_trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from svc_gateway.selling import RouteConfig, build_payment_app
from svc_gateway.selling.flow.tracing import (
    NULL_TRACE,
    NullTrace,
    abbreviate,
    add_trace_backend,
    remove_trace_backend,
    start_trace,
    use_tracer_provider,
)
from tests.e2e.test_state_table import tamper
from tests.support.market import FaultProxy, settle_success_false
from tests.support.sellers import Seller, SellerFactory, make_seller_fixture  # noqa: F401


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    use_tracer_provider(provider)
    yield exporter
    use_tracer_provider(None)
    provider.shutdown()


async def answer(request: web.Request) -> web.Response:
    return web.json_response({"ok": True})


async def serve(seller: Seller, **settings: Any) -> web.Application:
    routes = {"POST /ask": RouteConfig(plan_id=seller.fixed_plan, agent_id=seller.fixed_agent)}
    app = build_payment_app(routes, seller.settings(**settings))
    app.router.add_post("/ask", answer)
    await seller.serve(app)
    return app


def by_name(exporter: InMemorySpanExporter) -> dict[str, ReadableSpan]:
    return {span.name: span for span in exporter.get_finished_spans()}


def all_attribute_text(exporter: InMemorySpanExporter) -> str:
    return " ".join(
        f"{k}={v}" for span in exporter.get_finished_spans() for k, v in span.attributes.items()
    )


async def test_a_paid_request_records_three_spans_with_svc_attributes(
    make_seller: SellerFactory, spans: InMemorySpanExporter
) -> None:
    seller = await make_seller()
    await serve(seller)
    token = await seller.token(seller.fixed_plan, seller.fixed_agent)
    async with httpx.AsyncClient(base_url=seller.origin) as http:
        paid = await http.post("/ask", json={}, headers={"payment-signature": token})
    assert paid.status_code == 200
    found = by_name(spans)
    assert set(found) == {"svc:x402-request", "svc:verify", "svc:settlement"}
    parent, verify, settle = (
        found["svc:x402-request"],
        found["svc:verify"],
        found["svc:settlement"],
    )
    assert verify.parent is not None and verify.parent.span_id == parent.context.span_id
    assert settle.parent is not None and settle.parent.span_id == parent.context.span_id
    attrs = parent.attributes
    assert attrs["svc.plan_id"] == seller.fixed_plan
    assert attrs["svc.scheme"] == "svc:erc4337" and attrs["svc.network"] == "eip155:84532"
    assert str(attrs["svc.payer"]).lower() == seller.buyer_address.lower()
    assert attrs["svc.credits_redeemed"] == 2 and attrs["svc.balance_after"] == 8
    assert str(attrs["svc.transaction"]).startswith("0x")
    assert attrs["svc.token"] == f"{token[:4]}…{token[-4:]}"
    assert float(attrs["svc.verify_ms"]) >= 0 and float(attrs["svc.settle_ms"]) >= 0
    assert attrs["svc.outcome"] == "paid"
    for span in found.values():
        assert span.status.status_code is not StatusCode.ERROR
    text = all_attribute_text(spans)
    assert token not in text and seller.builder_key not in text


async def test_a_verification_failure_marks_parent_and_verify_failed(
    make_seller: SellerFactory, spans: InMemorySpanExporter
) -> None:
    seller = await make_seller()
    await serve(seller)
    token = await seller.token(seller.fixed_plan, seller.fixed_agent)
    async with httpx.AsyncClient(base_url=seller.origin) as http:
        refused = await http.post("/ask", json={}, headers={"payment-signature": tamper(token)})
    assert refused.status_code == 402
    found = by_name(spans)
    assert set(found) == {"svc:x402-request", "svc:verify"}
    assert found["svc:verify"].status.status_code is StatusCode.ERROR
    assert found["svc:x402-request"].status.status_code is StatusCode.ERROR
    assert found["svc:x402-request"].attributes["svc.outcome"] == "refused"


async def test_a_settle_failure_after_a_2xx_marks_only_the_settlement_span(
    make_seller: SellerFactory, spans: InMemorySpanExporter
) -> None:
    seller = await make_seller()
    proxy = FaultProxy(seller.sandbox.origin)
    await proxy.start()
    try:
        await serve(seller, baseUrl=proxy.base_url)
        token = await seller.token(seller.fixed_plan, seller.fixed_agent)
        proxy.faults["x402/settle"] = [settle_success_false]
        async with httpx.AsyncClient(base_url=seller.origin) as http:
            await http.post("/ask", json={}, headers={"payment-signature": token})
    finally:
        await proxy.close()
    found = by_name(spans)
    assert found["svc:settlement"].status.status_code is StatusCode.ERROR
    assert found["svc:verify"].status.status_code is not StatusCode.ERROR
    assert found["svc:x402-request"].status.status_code is not StatusCode.ERROR
    assert found["svc:x402-request"].attributes["svc.outcome"] == "withheld"


async def test_no_token_marks_the_request_span_failed_without_a_verify_span(
    make_seller: SellerFactory, spans: InMemorySpanExporter
) -> None:
    seller = await make_seller()
    await serve(seller)
    async with httpx.AsyncClient(base_url=seller.origin) as http:
        await http.post("/ask", json={})
    found = by_name(spans)
    assert set(found) == {"svc:x402-request"}
    assert found["svc:x402-request"].status.status_code is StatusCode.ERROR
    assert "svc.token" not in found["svc:x402-request"].attributes


def test_tokens_are_abbreviated_to_first_and_last_four() -> None:
    assert abbreviate("eyJhbGciOiJIUzI1NiJ9.payload.signature") == "eyJh…ture"
    assert abbreviate("short-token") == "…"
    assert abbreviate(None) is None and abbreviate("") is None


def test_without_a_tracer_provider_tracing_is_the_shared_null() -> None:
    assert start_trace() is NULL_TRACE  # the global provider is OpenTelemetry's no-op proxy
    with NULL_TRACE.request(), NULL_TRACE.verify(), NULL_TRACE.settlement():
        NULL_TRACE.set(plan_id="p")
        NULL_TRACE.fail("nothing happens")


def test_without_opentelemetry_installed_tracing_imports_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from svc_gateway.selling.flow import tracing

    looked_up: list[str] = []

    def find_spec(name: str) -> None:
        looked_up.append(name)

    monkeypatch.setattr(tracing, "_otel", None)
    monkeypatch.setattr(tracing.importlib.util, "find_spec", find_spec)
    assert tracing.start_trace() is NULL_TRACE
    assert tracing.start_trace() is NULL_TRACE
    assert looked_up == ["opentelemetry"]  # looked up once, then remembered


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now


def test_the_global_provider_is_looked_up_once_a_second_then_kept(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from svc_gateway.selling.flow import tracing

    clock = Clock()
    monkeypatch.setattr(tracing, "time", clock)
    monkeypatch.setattr(tracing, "_global", None)
    monkeypatch.setattr(tracing, "_unset_until", 0.0)
    real = TracerProvider()
    current: list[Any] = [otel_trace.ProxyTracerProvider()]
    asked: list[float] = []

    def get_tracer_provider() -> Any:
        asked.append(clock.now)
        return current[0]

    trace = SimpleNamespace(
        get_tracer_provider=get_tracer_provider,
        ProxyTracerProvider=otel_trace.ProxyTracerProvider,
        NoOpTracerProvider=otel_trace.NoOpTracerProvider,
    )
    assert tracing._global_provider(trace) is None  # none set: asked, then not again for 1 s
    current[0] = real
    clock.now += tracing.GLOBAL_RECHECK_SECS / 2
    assert tracing._global_provider(trace) is None
    assert asked == [1000.0]
    clock.now = 1000.0 + tracing.GLOBAL_RECHECK_SECS
    assert tracing._global_provider(trace) is real  # looked again once the second is over
    current[0] = otel_trace.NoOpTracerProvider()
    clock.now += 60
    assert tracing._global_provider(trace) is real  # a real one is kept: never asked again
    assert len(asked) == 2
    real.shutdown()


class CountingProvider(TracerProvider):
    """A tracer provider that counts the tracers asked of it."""

    def __init__(self) -> None:
        super().__init__()
        self.made = 0

    def get_tracer(self, *args: Any, **kwargs: Any) -> Any:
        self.made += 1
        return super().get_tracer(*args, **kwargs)


def test_a_provider_gives_the_paid_path_one_tracer_for_many_requests() -> None:
    provider = CountingProvider()
    use_tracer_provider(provider)
    try:
        traces = [start_trace() for _ in range(5)]
    finally:
        use_tracer_provider(None)
    assert all(trace.enabled for trace in traces)
    assert provider.made == 1  # not one per request


def test_many_providers_in_turn_each_get_their_own_spans() -> None:
    exporters = []
    for _ in range(10):  # more providers than the tracers kept: each still records its own
        exporter = InMemorySpanExporter()
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(exporter))
        use_tracer_provider(provider)
        try:
            with start_trace().request():
                pass
        finally:
            use_tracer_provider(None)
        exporters.append(exporter)
    assert [len(exporter.get_finished_spans()) for exporter in exporters] == [1] * 10


class Recording(NullTrace):
    """Another tracing backend (as the LangSmith runs are): what each hook was told."""

    enabled = True

    def __init__(self) -> None:
        self.events: list[tuple[Any, ...]] = []

    @contextmanager
    def _span(self, name: str) -> Iterator[None]:
        self.events.append(("open", name))
        yield
        self.events.append(("close", name))

    def request(self) -> Any:
        return self._span("request")

    def verify(self) -> Any:
        return self._span("verify")

    def settlement(self) -> Any:
        return self._span("settlement")

    def set(self, **attrs: Any) -> None:
        self.events.extend(("set", k, v) for k, v in attrs.items() if v is not None)

    def fail(self, reason: str, *, parent: bool = True) -> None:
        self.events.append(("fail", reason, parent))


async def test_another_backend_is_traced_beside_opentelemetry(
    make_seller: SellerFactory, spans: InMemorySpanExporter
) -> None:
    """A backend added with ``add_trace_backend`` gets every hook of a request while the
    OpenTelemetry spans are still recorded; off (``None``), only OpenTelemetry's remain."""
    made: list[Recording] = []
    switch = {"on": True}

    def backend() -> NullTrace | None:
        if not switch["on"]:
            return None
        made.append(Recording())
        return made[-1]

    add_trace_backend(backend)
    add_trace_backend(backend)  # once only
    try:
        seller = await make_seller()
        await serve(seller)
        token = await seller.token(seller.fixed_plan, seller.fixed_agent)
        async with httpx.AsyncClient(base_url=seller.origin) as http:
            await http.post("/ask", json={}, headers={"payment-signature": token})
            await http.post("/ask", json={}, headers={"payment-signature": tamper(token)})
            use_tracer_provider(None)  # OpenTelemetry off: the backend alone
            await http.post("/ask", json={}, headers={"payment-signature": token})
            switch["on"] = False
            assert start_trace() is NULL_TRACE or not start_trace().enabled
    finally:
        remove_trace_backend(backend)
        remove_trace_backend(backend)
    assert len(made) == 3
    paid, refused, alone = (recording.events for recording in made)
    opened = [event[1] for event in paid if event[0] == "open"]
    assert opened == ["request", "verify", "settlement"]
    assert ("set", "credits_redeemed", 2) in paid and ("set", "payer", seller.buyer_address) in paid
    assert any(event[0] == "fail" and event[2] for event in refused)
    assert [event[1] for event in alone if event[0] == "open"] == opened
    names = [span.name for span in spans.get_finished_spans()]
    assert names.count("svc:x402-request") == 2  # the first two requests, OpenTelemetry's too
