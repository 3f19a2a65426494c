"""How the endpoint is assembled: handlers and their answers, the card's fallbacks, the server's
own logger, and a port that is taken. What a builder sees when wiring goes wrong."""

from __future__ import annotations

import asyncio
import json
import logging
import socket
from pathlib import Path
from typing import Any

import httpx
import pytest
from aiohttp import web
from aiohttp.http_exceptions import LineTooLong
from aiohttp.payload import StringPayload

from svc_gateway import register
from svc_gateway.account.credentials import CredentialStore
from svc_gateway.config import ConfigError
from svc_gateway.hosts.reference import ReferenceGateway
from svc_gateway.selling.handlers import HandlerError, load_handler, to_answer
from svc_gateway.selling.ways_in.endpoint import ProtocolLog
from tests.support import LogCollector
from tests.support.fixtures import StubMarketFactory
from tests.support.stub_service import AGENT_ID, BUILDER_KEY, PLAN_ID, StubService, make_token

PAYER = "0x" + "aa" * 20


def test_protocol_log_quiets_malformed_requests_and_names_real_failures(
    all_logs: LogCollector,
) -> None:
    adapter = ProtocolLog(logging.getLogger("svc_gateway.paid"), {})
    adapter.exception("Error handling request", exc_info=LineTooLong(b"eyJsecret" * 20, 8190))
    try:
        raise RuntimeError("boom eyJsecretsecret")
    except RuntimeError:
        adapter.exception("Error handling request")
    info, error = all_logs.lines[-2:]
    assert info.startswith("INFO") and "LineTooLong" in info
    assert error.startswith("ERROR") and "RuntimeError" in error
    assert "eyJsecret" not in all_logs.text and "Traceback" not in all_logs.text


def test_load_handler_errors_name_what_to_fix() -> None:
    with pytest.raises(ConfigError, match="has no attribute 'nope'"):
        load_handler("json:nope")
    with pytest.raises(ConfigError, match="is not callable"):
        load_handler("json:__name__")
    with pytest.raises(ConfigError, match="cannot import module 'no_such_module_x'"):
        load_handler("no_such_module_x:f")
    assert load_handler("json:dumps") is __import__("json").dumps


def test_handler_answers_become_plain_answers() -> None:
    text = web.Response(text="héllo", content_type="text/plain", headers={"X-Agent": "1"})
    answer = to_answer(text)
    assert (answer.status, answer.body, answer.content_type) == (
        200,
        "héllo".encode(),
        "text/plain; charset=utf-8",
    )
    assert ("X-Agent", "1") in answer.headers
    assert all(k.lower() != "content-type" for k, _ in answer.headers)
    empty = to_answer(web.Response(status=204))
    assert (empty.status, empty.body) == (204, b"")
    assert to_answer((201, {"a": 1})).status == 201
    assert to_answer((True, 1)).status == 200  # a bool is no status: the pair is the body
    with pytest.raises(HandlerError, match="streaming"):
        to_answer(web.StreamResponse())
    with pytest.raises(HandlerError, match="not a final HTTP status"):
        to_answer((100, {}))
    with pytest.raises(HandlerError, match="not a final HTTP status"):
        to_answer((600, {}))
    with pytest.raises(HandlerError, match="not JSON-serialisable"):
        to_answer({"x": object()})
    streamed = web.Response()
    streamed.body = StringPayload("x")
    with pytest.raises(HandlerError, match="streaming payload"):
        to_answer(streamed)


@pytest.mark.parametrize("attr", ["agent_handler", "credits_for_request"])
def test_a_host_attribute_that_is_not_callable_is_a_config_error(tmp_path: Path, attr: str) -> None:
    gateway = ReferenceGateway(
        {
            "environment": "local",
            "baseUrl": "http://127.0.0.1:9/api/v1",
            "svcApiKey": BUILDER_KEY,
            "enablePaidEndpoint": True,
            "paidEndpointPort": 0,
            "planId": PLAN_ID,
        }
    )
    setattr(gateway, attr, "not a function")
    with pytest.raises(ConfigError, match=f"^the host's {attr} is not callable$"):
        register(gateway, store=CredentialStore(tmp_path, use_keyring=False))


def test_a_taken_port_is_a_config_error_naming_the_setting(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        gateway = ReferenceGateway(
            {
                "environment": "local",
                "baseUrl": "http://127.0.0.1:9/api/v1",
                "svcApiKey": BUILDER_KEY,
                "enablePaidEndpoint": True,
                "paidEndpointPort": port,
                "planId": PLAN_ID,
            }
        )
        with pytest.raises(ConfigError, match="choose another paidEndpointPort"):
            register(gateway, store=CredentialStore(tmp_path, use_keyring=False))


async def test_the_card_falls_back_to_a_generic_name_and_503s_on_an_outage(
    make_stub_market: StubMarketFactory,
) -> None:
    market = await make_stub_market(stub=StubService(balance=10))
    async with httpx.AsyncClient(timeout=20) as http:
        card = (await http.get(market.endpoint.card_url)).json()
        assert card["name"] == "svc paid agent"  # the stub knows no agents
        assert (card["agentId"], card["planId"]) == (AGENT_ID, PLAN_ID)
        assert card["creditsPerRequest"] == 1
        market.endpoint.flow.facts_cache.invalidate()
        market.stub.faults["plan"] = (500, {"code": "TEST.DOWN", "message": "down"})
        down = await http.get(market.endpoint.card_url)
    assert down.status_code == 503
    assert down.json() == {
        "error": "Service Unavailable",
        "message": "The payment service is unreachable; retry shortly.",
    }


async def test_a_sync_handler_runs_off_the_loop_and_is_paid(
    make_stub_market: StubMarketFactory,
) -> None:
    def sync_handler(request: dict[str, Any]) -> dict[str, Any]:
        return {"upper": request["prompt"].upper()}

    market = await make_stub_market(stub=StubService(balance=10), handler=sync_handler)
    async with httpx.AsyncClient(timeout=20) as http:
        response = await http.post(
            market.url, json={"prompt": "hi"}, headers={"payment-signature": make_token(PAYER)}
        )
    assert response.json() == {"upper": "HI"}
    assert market.stub.burned == 1


async def test_a_slow_body_is_408_and_not_charged(make_stub_market: StubMarketFactory) -> None:
    market = await make_stub_market(stub=StubService(balance=10))
    flow = market.endpoint.flow
    app_routes = [
        r.handler.__self__  # type: ignore[union-attr]
        for r in market.endpoint._runner.app.router.routes()  # type: ignore[union-attr]
        if hasattr(r.handler, "__self__")
    ]
    for owner in app_routes:  # the body deadline is the HTTP layer's; shorten it
        owner.body_timeout = 0.3
    host, port = "127.0.0.1", int(market.url.split(":")[2].split("/")[0])
    reader, writer = await asyncio.open_connection(host, port)
    writer.write(
        b"POST /svc/agent HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        b"Content-Length: 100\r\npayment-signature: " + make_token(PAYER).encode() + b"\r\n\r\n{"
    )
    status = await asyncio.wait_for(reader.readline(), 10)
    length = 0
    for _ in range(50):  # the headers, up to the blank line
        line = await asyncio.wait_for(reader.readline(), 10)
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":")[1])
        if line in (b"\r\n", b""):
            break
    body = await asyncio.wait_for(reader.readexactly(length), 10)
    writer.close()
    assert status.startswith(b"HTTP/1.1 408")
    assert json.loads(body) == {
        "error": "Request Timeout",
        "message": "The request body did not arrive in time.",
    }
    assert flow.stats.requests == 0 and market.stub.calls["verify"] == 0


async def test_endpoint_facts_a_builder_reads(make_stub_market: StubMarketFactory) -> None:
    market = await make_stub_market(config={"paidEndpointPublicUrl": "https://agent.example/x/y"})
    endpoint = market.endpoint
    assert endpoint.plan_id == PLAN_ID
    assert endpoint.url == "https://agent.example/x/y"  # a URL with a path is the endpoint
    assert endpoint.bound_url is not None and endpoint.bound_url.startswith("http://127.0.0.1:")
    assert not endpoint.mounted
    assert repr(endpoint) == "PaidEndpoint(url='https://agent.example/x/y', mounted=False)"
    await endpoint.close()
    await endpoint.close()  # closing twice is harmless


async def test_explicit_handler_and_credits_win_over_the_hosts(
    make_stub_market: StubMarketFactory,
) -> None:
    from svc_gateway.selling import attach_paid_endpoint

    market = await make_stub_market(stub=StubService(balance=10, max_amount=5))
    core = market.endpoint.flow.seller

    async def mine(request: dict[str, Any]) -> dict[str, str]:
        return {"who": "explicit"}

    async def attach() -> Any:
        await market.endpoint.flow.aclose()  # one endpoint per settle queue file (its lock)
        return await attach_paid_endpoint(
            market.gateway, core, handler=mine, credits=lambda _r: 4, plan_id=PLAN_ID
        )

    second = await asyncio.to_thread(market.handle.runtime.run_sync, attach())
    async with httpx.AsyncClient(timeout=20) as http:
        response = await http.post(
            second.url, json={"prompt": "hi"}, headers={"payment-signature": make_token(PAYER)}
        )
    assert response.json() == {"who": "explicit"}
    assert market.stub.burned == 4  # the explicit credits function priced it
    await asyncio.to_thread(market.handle.runtime.run_sync, second.aclose())  # who attached
