"""The paid endpoint beyond the state table: bad input, outages, the card, wiring choices."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest
from aiohttp import web

from svc_gateway import register
from svc_gateway.account.credentials import CredentialStore
from svc_gateway.config import ConfigError
from svc_gateway.encoding import decode_b64_json
from svc_gateway.hosts.reference import ReferenceGateway
from svc_gateway.sandbox import SandboxServer
from svc_gateway.selling import attach_paid_endpoint
from tests.support import serve_app
from tests.support.market import Market, MarketFactory, connect_error, refuse_500, unauthorized


@pytest.fixture
def sandbox(own_sandbox: SandboxServer) -> SandboxServer:
    """A sandbox of its own: a test here stops it (the service is down)."""
    return own_sandbox


async def test_bad_requests_are_refused_before_any_payment_step(
    make_market: MarketFactory, http: httpx.AsyncClient
) -> None:
    market = await make_market(faults=True, builder_config={"maxBodyBytes": 4096})
    await market.order()
    token = await market.token()
    url, paid = market.endpoint.url, {"payment-signature": token}
    json_type = {**paid, "Content-Type": "application/json"}
    text_type = {**paid, "Content-Type": "text/plain"}

    async def chunked() -> Any:
        for _ in range(10):
            yield b'{"prompt": "' + b"x" * 1000
        yield b'"}'

    cases: list[tuple[int, httpx.Response]] = [
        (405, await http.get(url, headers=paid)),
        (405, await http.put(url, json={"prompt": "hi"}, headers=paid)),
        (400, await http.post(url, content=b"not json", headers=json_type)),
        (400, await http.post(url, content=b'{"prompt": "hi"}', headers=text_type)),
        (400, await http.post(url, json={"question": "hi"}, headers=paid)),
        (400, await http.post(url, json={"prompt": 42}, headers=paid)),
        (400, await http.post(url, json={"prompt": "   "}, headers=paid)),
        (400, await http.post(url, json=["prompt"], headers=paid)),
        (400, await http.post(url, content=b"[" * 2000 + b"]" * 2000, headers=json_type)),
        (413, await http.post(url, json={"prompt": "x" * 5000}, headers=paid)),
        (413, await http.post(url, content=chunked(), headers=json_type)),
    ]
    for expected, response in cases:
        assert response.status_code == expected, (expected, response.text)
        assert response.headers["Content-Type"].startswith("application/json")
        assert response.json()["message"]
        assert "payment-required" not in response.headers
        assert "Traceback" not in response.text
    assert cases[0][1].headers["Allow"] == "POST"
    said: dict[int, list[Any]] = {expected: [] for expected, _ in cases}
    for expected, response in cases:
        said[expected].append(response.json())
    assert {"error": "Bad Request", "message": "The body is not valid JSON."} in said[400]
    assert {
        "error": "Bad Request",
        "message": 'Send Content-Type: application/json with {"prompt"}',
    } in said[400]
    assert {
        "error": "Bad Request",
        "message": 'The body must be a JSON object with a non-empty "prompt" string.',
    } in said[400]
    assert cases[-2][1].json() == {
        "error": "Payload Too Large",
        "message": "The request body is larger than 4096 bytes.",
    }
    assert market.transport is not None
    assert market.transport.calls["x402/verify"] == 0
    assert market.transport.calls["x402/settle"] == 0
    assert await market.balance() == 10


@pytest.mark.parametrize(
    ("fault", "status"), [(connect_error, 503), (refuse_500, 503), (unauthorized, 502)]
)
async def test_verify_failures_of_the_service_are_never_402(
    make_market: MarketFactory, http: httpx.AsyncClient, fault: Any, status: int
) -> None:
    market = await make_market(faults=True)
    await market.order()
    token = await market.token()
    assert market.transport is not None
    market.transport.always["x402/verify"] = fault
    response = await http.post(
        market.endpoint.url, json={"prompt": "hi"}, headers={"payment-signature": token}
    )
    assert response.status_code == status
    assert "payment-required" not in response.headers
    body = response.json()
    assert "nothing was charged" in body["message"].lower()
    if status == 503:
        assert response.headers["Retry-After"].isdigit()
        assert "retry" in body["message"].lower()
    else:
        assert "operator" in body["message"]
    assert await market.balance() == 10


async def test_service_down_is_503(market: Market, http: httpx.AsyncClient) -> None:
    await market.order()
    token = await market.token()
    ok = await http.post(
        market.endpoint.url, json={"prompt": "hi"}, headers={"payment-signature": token}
    )
    assert ok.status_code == 200  # the plan's facts are now cached
    await market.server.close()
    response = await http.post(
        market.endpoint.url, json={"prompt": "hi"}, headers={"payment-signature": token}
    )
    assert response.status_code == 503
    assert "payment-required" not in response.headers


async def test_agent_card_on_both_paths(market: Market, http: httpx.AsyncClient) -> None:
    origin = market.endpoint.url.rsplit("/svc/agent", 1)[0]
    cards = [
        (await http.get(url)).json()
        for url in (market.endpoint.card_url, origin + "/.well-known/agent.json")
    ]
    assert cards[0] == cards[1]
    card = cards[0]
    assert market.endpoint.card_url == market.endpoint.url + "/.well-known/agent.json"
    assert card == {
        "name": "Test agent",
        "description": card["description"],
        "agentId": market.agent_id,
        "planId": market.plan_id,
        "url": market.endpoint.url,
        "schemes": ["svc:erc4337"],
        "networks": ["eip155:84532"],
        "creditsPerRequest": 2,
        "x402Version": 2,
        "idempotency": {"header": "Idempotency-Key", "paymentIdentifier": True, "ttlSecs": 86400},
    }


async def test_without_a_plan_the_endpoint_answers_503_until_one_is_registered(
    make_market: MarketFactory, http: httpx.AsyncClient
) -> None:
    market = await make_market(register_agent=False)
    response = await http.post(market.endpoint.url, json={"prompt": "hi"})
    assert response.status_code == 503
    assert "no plan is configured" in response.json()["message"]
    card = await http.get(market.endpoint.card_url)
    assert card.status_code == 503
    assert card.json() == {
        "error": "Service Unavailable",
        "message": "This agent is not selling yet: no plan is configured.",
    }
    await market.register_agent()  # svc_registerAgent sets core.plan_id: picked up per request
    response = await http.post(market.endpoint.url, json={"prompt": "hi"})
    assert response.status_code == 402


async def test_require_plan_refuses_to_start_without_one(market: Market, tmp_path: Path) -> None:
    gateway = ReferenceGateway({"environment": "local", "baseUrl": market.server.base_url})
    handle = await asyncio.to_thread(
        register, gateway, store=CredentialStore(tmp_path, use_keyring=False)
    )
    try:
        with pytest.raises(ConfigError, match="needs a plan"):
            await handle.runtime.run(attach_paid_endpoint(gateway, handle.core, require_plan=True))
    finally:
        await asyncio.to_thread(handle.close)


async def test_host_credits_function_is_clamped_to_the_plan_bounds(
    make_market: MarketFactory, http: httpx.AsyncClient
) -> None:
    seen: list[dict[str, Any]] = []

    def credits(request: dict[str, Any]) -> int:
        seen.append(request)
        return len(request["prompt"])  # 11 credits asked; the plan allows exactly 2

    def configure(gateway: ReferenceGateway) -> None:
        gateway.credits_for_request = credits  # type: ignore[attr-defined]

    market = await make_market(configure_builder=configure)
    await market.order()
    response = await http.post(
        market.endpoint.url,
        json={"prompt": "eleven char"},
        headers={"payment-signature": await market.token()},
    )
    assert response.status_code == 200
    receipt = decode_b64_json(response.headers["payment-response"])
    assert receipt is not None and receipt["creditsRedeemed"] == "2"
    assert seen == [{"prompt": "eleven char"}]


async def test_config_agent_handler_and_response_objects(
    make_market: MarketFactory, http: httpx.AsyncClient
) -> None:
    market = await make_market(builder_config={"agentHandler": "builtins:dict"}, scripted=False)
    await market.order()
    response = await http.post(
        market.endpoint.url,
        json={"prompt": "echo me"},
        headers={"payment-signature": await market.token()},
    )
    assert response.status_code == 200
    assert response.json() == {"prompt": "echo me"}  # dict({"prompt": ...}), a sync handler
    assert "payment-response" in response.headers


async def test_unknown_agent_handler_is_a_config_error(market: Market, tmp_path: Path) -> None:
    gateway = ReferenceGateway(
        {
            "environment": "local",
            "baseUrl": market.server.base_url,
            "enablePaidEndpoint": True,
            "paidEndpointPort": 0,
            "agentHandler": "no_such_module_here:answer",
        }
    )
    with pytest.raises(ConfigError, match="agentHandler"):
        await asyncio.to_thread(
            register, gateway, store=CredentialStore(tmp_path, use_keyring=False)
        )


async def test_mounted_on_the_hosts_web_app(
    make_market: MarketFactory, http: httpx.AsyncClient
) -> None:
    app = web.Application()

    async def handler(request: dict[str, Any]) -> web.Response:
        response = web.json_response({"shout": request["prompt"].upper()})
        response.headers["X-Agent"] = "host"
        return response

    def configure(gateway: ReferenceGateway) -> None:
        gateway.http_app = app
        gateway.agent_handler = handler  # type: ignore[attr-defined]

    market = await make_market(register_agent=False, configure_builder=configure)
    assert market.endpoint.mounted and market.endpoint.url == "/svc/agent"
    async with serve_app(app) as origin:  # the host serves its app on its own loop (this one)
        url = f"{origin}/svc/agent"
        await market.register_agent(agent_url=url)
        await market.order()
        response = await http.post(
            url, json={"prompt": "quiet"}, headers={"payment-signature": await market.token()}
        )
        assert response.status_code == 200
        assert response.json() == {"shout": "QUIET"}
        assert response.headers["X-Agent"] == "host"
        receipt = decode_b64_json(response.headers["payment-response"])
        assert receipt is not None and receipt["remainingBalance"] == "8"
        card = (await http.get(url + "/.well-known/agent.json")).json()
        assert card["url"] == url and card["agentId"] == market.agent_id


async def test_a_host_that_serves_a_root_card_keeps_it(
    make_market: MarketFactory, http: httpx.AsyncClient
) -> None:
    app = web.Application()

    async def host_card(request: web.Request) -> web.Response:
        return web.json_response({"name": "the host's own card"})

    app.router.add_get("/.well-known/agent.json", host_card)

    def configure(gateway: ReferenceGateway) -> None:
        gateway.http_app = app

    market = await make_market(register_agent=False, configure_builder=configure)
    assert market.endpoint.mounted
    async with serve_app(app) as origin:
        url = f"{origin}/svc/agent"
        await market.register_agent(agent_url=url)
        root = (await http.get(url.removesuffix("/svc/agent") + "/.well-known/agent.json")).json()
        assert root == {"name": "the host's own card"}
        ours = (await http.get(url + "/.well-known/agent.json")).json()
        assert ours["url"] == url and ours["agentId"] == market.agent_id


async def test_public_url_names_the_endpoint_in_envelope_and_card(
    make_market: MarketFactory, http: httpx.AsyncClient
) -> None:
    public = "https://agents.example.test"
    market = await make_market(
        register_agent=False, builder_config={"paidEndpointPublicUrl": public}
    )
    endpoint = market.endpoint
    assert endpoint.url == public + "/svc/agent"
    assert endpoint.bound_url is not None and endpoint.bound_url.startswith("http://127.0.0.1:")
    await market.register_agent(agent_url=endpoint.url)
    response = await http.post(endpoint.bound_url, json={"prompt": "hi"})
    envelope = decode_b64_json(response.headers["payment-required"])
    assert envelope is not None and envelope["resource"]["url"] == public + "/svc/agent"
    card = (await http.get(endpoint.bound_url + "/.well-known/agent.json")).json()
    assert card["url"] == public + "/svc/agent"


async def test_a_running_host_app_cannot_take_the_routes(market: Market, tmp_path: Path) -> None:
    app = web.Application()
    runner = web.AppRunner(app)
    await runner.setup()  # freezes the app, as a host that already serves it has
    gateway = ReferenceGateway(
        {
            "environment": "local",
            "baseUrl": market.server.base_url,
            "enablePaidEndpoint": True,
            "planId": market.plan_id,
        },
        http_app=app,
    )
    try:
        with pytest.raises(ConfigError, match="already running"):
            store = CredentialStore(tmp_path, use_keyring=False)
            await asyncio.to_thread(register, gateway, store=store)
    finally:
        await runner.cleanup()


async def test_a_paid_request_asks_asyncio_for_its_running_loop_once(
    make_market: MarketFactory, http: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Asking asyncio for the running loop, or for the current task without naming the loop, is
    a ``getpid`` system call (its fork check): invisible to an instruction count, a microsecond
    or two under load. The way in asks once a request and hands the loop to the flow, which
    hands it to its deadlines and its client lookups."""
    market = await make_market()
    await market.order()
    paid = {"payment-signature": await market.token()}
    warm = await http.post(market.endpoint.url, json={"prompt": "warm"}, headers=paid)
    assert warm.status_code == 200
    asked: list[str] = []
    real_loop, real_task = asyncio.get_running_loop, asyncio.current_task

    def by_plugin(what: str) -> None:
        module = str(sys._getframe(2).f_globals.get("__name__", ""))
        if module.startswith("svc_gateway"):
            asked.append(f"{module}: {what}")

    def get_running_loop() -> asyncio.AbstractEventLoop:
        by_plugin("get_running_loop()")
        return real_loop()

    def current_task(loop: asyncio.AbstractEventLoop | None = None) -> asyncio.Task[Any] | None:
        if loop is None:
            by_plugin("current_task()")
        return real_task(loop)

    monkeypatch.setattr(asyncio, "get_running_loop", get_running_loop)
    monkeypatch.setattr(asyncio, "current_task", current_task)
    response = await http.post(market.endpoint.url, json={"prompt": "hi"}, headers=paid)
    assert response.status_code == 200 and "payment-response" in response.headers
    assert asked == ["svc_gateway.selling.ways_in.http: get_running_loop()"]
