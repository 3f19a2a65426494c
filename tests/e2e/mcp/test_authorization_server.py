"""The paid MCP server's one authorization server when the service misbehaves: its documents
are read from the service and kept a while, and what cannot be read or asked is a 503 saying
so, never a document of the MCP server's own making. The service here is an aiohttp stand-in
that answers what each test sets (faults the sandbox does not produce); the happy path against
the sandbox is in test_wiring.py and tests/e2e/mcp_oauth."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
from aiohttp import web

from svc_gateway.selling.ways_in.mcp.authorization import (
    AS_METADATA,
    MAX_DOCUMENT_BYTES,
    TTL_SECS,
    ServiceAuthorization,
    Unavailable,
)
from svc_gateway.selling.ways_in.mcp.serve import build_app
from tests.support import serve_app

from .conftest import McpMarket


@dataclass
class Service:
    """The authorization server stand-in: the metadata body and status, the register answer."""

    origin: str = ""
    body: bytes = b""
    status: int = 200
    registered: list[bytes] = field(default_factory=list)
    reads: int = 0

    def document(self, **fields: Any) -> None:
        self.body = json.dumps({"issuer": self.origin, **fields}).encode()


@pytest.fixture
async def service() -> AsyncIterator[Service]:
    stand_in = Service()

    async def metadata(_request: web.Request) -> web.Response:
        stand_in.reads += 1
        return web.Response(body=stand_in.body, status=stand_in.status)

    async def register(request: web.Request) -> web.Response:
        stand_in.registered.append(await request.read())
        raise ConnectionResetError  # the service drops the connection

    app = web.Application()
    app.router.add_get(AS_METADATA, metadata)
    app.router.add_post("/oauth/register", register)
    async with serve_app(app) as origin:
        stand_in.origin = origin
        stand_in.document(registration_endpoint=origin + "/oauth/register")
        yield stand_in


async def test_the_services_document_is_kept_for_a_while_then_read_again(
    service: Service,
) -> None:
    now = [0.0]
    authorization = ServiceAuthorization(lambda: service.origin, clock=lambda: now[0])
    first = await authorization.document(AS_METADATA)
    assert first["issuer"] == service.origin
    now[0] = TTL_SECS - 1
    assert await authorization.document(AS_METADATA) == first and service.reads == 1
    now[0] = TTL_SECS + 1
    service.document(registration_endpoint="ftp://nowhere")  # read again: a new document
    assert (await authorization.document(AS_METADATA))["registration_endpoint"] == "ftp://nowhere"
    with pytest.raises(Unavailable, match="no registration endpoint"):
        await authorization.register(b"{}")
    assert service.reads == 2 and service.registered == []


@pytest.mark.parametrize(
    ("status", "body", "why"),
    [
        (500, b"{}", "HTTP 500"),
        (200, b"{not json", "not JSON"),
        (200, b"[1, 2]", "not a JSON object"),
        (200, b" " * (MAX_DOCUMENT_BYTES + 1), "too large"),
    ],
)
async def test_a_document_that_cannot_be_read_is_unavailable_and_not_kept(
    service: Service, status: int, body: bytes, why: str
) -> None:
    service.status, service.body = status, body
    authorization = ServiceAuthorization(lambda: service.origin)
    with pytest.raises(Unavailable, match=why):
        await authorization.document(AS_METADATA)
    service.status = 200
    service.document()
    assert (await authorization.document(AS_METADATA))["issuer"] == service.origin


async def test_a_registration_the_service_drops_or_cannot_take_is_unavailable(
    service: Service,
) -> None:
    authorization = ServiceAuthorization(lambda: service.origin)
    with pytest.raises(Unavailable):
        await authorization.register(b'{"redirect_uris": ["http://127.0.0.1:9/cb"]}')
    assert service.registered == [b'{"redirect_uris": ["http://127.0.0.1:9/cb"]}']
    async with serve_app(web.Application()) as gone:
        pass  # a port that was just closed: nothing listens there
    service.document(registration_endpoint=gone + "/oauth/register")
    with pytest.raises(Unavailable, match="ClientConnectorError"):
        await ServiceAuthorization(lambda: service.origin).register(b"{}")


async def test_an_unreachable_service_gets_503s_and_the_info_names_it_only(
    mcp_market: McpMarket,
) -> None:
    app = build_app(mcp_market.server, host="127.0.0.1")
    async with serve_app(web.Application()) as gone:
        pass  # a port that was just closed: nothing listens there
    app.authorization = ServiceAuthorization(lambda: gone)
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as http:
        discovery = await http.get("/.well-known/oauth-authorization-server")
        openid = await http.get("/.well-known/openid-configuration")
        registered = await http.post("/register", json={"redirect_uris": ["http://x/cb"]})
        preflight = await http.options("/register")
        info = (await http.get("/")).json()
    for answer in (discovery, openid, registered):
        assert answer.status_code == 503, answer.text
        assert answer.json()["error"] == "temporarily_unavailable"
    assert preflight.status_code == 204
    assert "POST" in preflight.headers["access-control-allow-methods"]
    assert info["oauth"]["authorization_servers"] == [gone] and "issuer" not in info["oauth"]
