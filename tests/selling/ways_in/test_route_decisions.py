"""What the route map and the middleware decide once rather than per request: a plain
resource's entry, each route's sale fields and fixed price, and a handler's content type."""

from __future__ import annotations

from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from aiohttp.typedefs import Handler

from svc_gateway.selling import RouteConfig
from svc_gateway.selling.handlers import to_answer
from svc_gateway.selling.ways_in import routes as routes_module
from svc_gateway.selling.ways_in.routes import Route, RouteMap, parse_route


async def ok(_request: web.Request) -> web.Response:
    return web.json_response({})


class Probe:
    """A served ``app`` whose middleware asks ``table`` about each request aiohttp routed."""

    def __init__(self, app: web.Application, table: RouteMap) -> None:
        self.table, self.found = table, []
        app.middlewares.append(self.middleware)
        self.client = TestClient(TestServer(app))

    @web.middleware
    async def middleware(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        self.found.append(self.table.dispatched(request.method, request))
        if request.method == "HEAD":  # as the payment middleware: a HEAD sold as its GET
            self.found.append(self.table.dispatched("GET", request))
        return await handler(request)

    async def ask(self, method: str, path: str) -> list[Route | None]:
        self.found = []
        async with self.client.request(method, path):
            pass
        return self.found


@pytest.fixture
def app() -> web.Application:
    app = web.Application()
    app.router.add_post("/agent", ok)
    app.router.add_get("/report", ok)  # aiohttp adds HEAD to it
    app.router.add_post("/docs/{doc_id}", ok)
    return app


async def test_a_plain_resources_entry_is_decided_once_per_method(
    app: web.Application, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[str] = []
    real = routes_module.dispatched

    def counting(request: web.Request) -> Any:
        seen.append(f"{request.method} {request.path}")
        return real(request)

    monkeypatch.setattr(routes_module, "dispatched", counting)
    probe = Probe(
        app, RouteMap({"POST /agent": {"plan_id": "p1"}, "GET /report": {"plan_id": "p2"}})
    )
    async with probe.client:
        [first] = await probe.ask("POST", "/agent")
        [again] = await probe.ask("POST", "/agent")
        assert first is again is not None and first.key == "POST /agent"
        assert seen == ["POST /agent"]  # the second request reused the first's decision
        # a HEAD is not the GET's entry as such; the middleware's second look sells it as the GET
        [head, as_get] = await probe.ask("HEAD", "/report")
        assert head is None and as_get is not None and as_get.key == "GET /report"
        assert await probe.ask("HEAD", "/report") == [None, as_get]
        assert seen == ["POST /agent", "HEAD /report", "HEAD /report"]  # once per method


async def test_a_resource_with_a_variable_is_matched_on_each_requests_value(
    app: web.Application,
) -> None:
    table = RouteMap(
        {"POST /docs/special": {"plan_id": "p1"}, "POST /docs/{id}": {"plan_id": "p2"}}
    )
    probe = Probe(app, table)
    async with probe.client:
        [special] = await probe.ask("POST", "/docs/special")
        [other] = await probe.ask("POST", "/docs/other")
        assert special is not None and special.config.plan_id == "p1"
        assert other is not None and other.config.plan_id == "p2"
        assert await probe.ask("POST", "/docs/special") == [special]


async def test_an_unrouted_request_is_never_an_entry(app: web.Application) -> None:
    probe = Probe(app, RouteMap({"POST /agent": {"plan_id": "p1"}}))
    async with probe.client:
        assert await probe.ask("POST", "/nowhere") == [None]  # the router's 404
        assert await probe.ask("PUT", "/agent") == [None]  # the router's 405
        assert await probe.ask("PUT", "/agent") == [None]
        [agent] = await probe.ask("POST", "/agent")
        assert agent is not None and agent.key == "POST /agent"


def test_a_routes_sale_carries_its_config_and_its_fixed_price() -> None:
    config = RouteConfig(
        plan_id="plan-9",
        credits=4,
        agent_id="agent-2",
        network="eip155:84532",
        scheme="svc:card-delegation",
        description="a report",
        mime_type="text/csv",
    )
    route = parse_route("GET /report", config)
    assert route.sale() == {
        "plan_id": "plan-9",
        "agent_id": "agent-2",
        "scheme": "svc:card-delegation",
        "network": "eip155:84532",
        "description": "a report",
        "mime_type": "text/csv",
        "route": "GET /report",
    }
    assert route.fixed_credits == 4
    assert parse_route("GET /free", RouteConfig(plan_id="p", credits=0)).fixed_credits == 0
    priced = parse_route("GET /x", RouteConfig(plan_id="p", credits=lambda _request: 2))
    assert priced.fixed_credits is None


def test_a_text_answer_keeps_its_charset_and_a_json_answer_its_bare_type() -> None:
    text = to_answer(web.Response(text="héllo", content_type="text/plain", charset="latin-1"))
    assert text.content_type == "text/plain; charset=latin-1"
    assert to_answer(web.Response(text="hi")).content_type == "text/plain; charset=utf-8"
    assert to_answer(web.json_response({"a": 1})).content_type == "application/json"
    assert to_answer(web.Response(body=b"\x00")).content_type == "application/octet-stream"


async def test_the_decisions_kept_are_bounded_and_start_afresh_when_full(
    app: web.Application, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(routes_module, "PLAIN_KEPT", 1)
    table = RouteMap({"POST /agent": {"plan_id": "p1"}, "GET /report": {"plan_id": "p2"}})
    probe = Probe(app, table)
    async with probe.client:
        [agent] = await probe.ask("POST", "/agent")
        [report, _] = await probe.ask("HEAD", "/report")  # a second entry: the table was full
        assert len(table._by_resource) == 1
        assert await probe.ask("POST", "/agent") == [agent]  # decided again, the same
        assert agent is not None and agent.key == "POST /agent" and report is None


def test_a_text_answer_without_a_charset_keeps_its_bare_type() -> None:
    answer = to_answer(web.Response(body=b"plain", content_type="text/plain"))
    assert answer.content_type == "text/plain"
    assert answer.body == b"plain"
