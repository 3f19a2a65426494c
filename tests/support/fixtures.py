"""Fixtures several folders use (registered for the whole suite by ``tests/conftest.py``): markets
(sandbox + builder + subscriber), stub markets, a real redis-server and log capture."""

from __future__ import annotations

import asyncio
import shutil
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from aiohttp import web

from svc_gateway import PluginHandle, register
from svc_gateway.account.credentials import CredentialStore
from svc_gateway.hosts.reference import ReferenceGateway
from svc_gateway.sandbox import SandboxServer, start_sandbox
from svc_gateway.selling import PaidEndpoint
from tests.support import LogCollector, collecting_logs, leaked_secrets
from tests.support.market import FaultProxy, Market, MarketFactory, scripted_handler
from tests.support.redis_server import RedisServer
from tests.support.stub_service import AGENT_ID, BUILDER_KEY, PLAN_ID, StubService


@pytest.fixture
async def own_sandbox() -> AsyncIterator[SandboxServer]:
    """A sandbox for this test alone (``sandbox`` unless a folder shares the session's)."""
    server = await start_sandbox()
    yield server
    await server.close()


class SharedSandbox(SandboxServer):
    """The local sandbox on a thread and loop of its own, for the whole session: tests that only
    create accounts of their own share it instead of starting one each. A test that changes the
    sandbox for everyone (stops it, injects a fault into it, moves its clock, counts what all
    accounts did) keeps the function-scoped ``sandbox`` of ``tests/conftest.py``."""

    def __init__(self) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name="shared-sandbox", daemon=True
        )
        self._thread.start()
        started = asyncio.run_coroutine_threadsafe(start_sandbox(), self._loop).result(30)
        super().__init__(started._runner, started.app, started.origin)

    async def create_account(
        self, label: str = "", api_version: str | None = None
    ) -> dict[str, str]:
        """A new account and key, made on the sandbox's own loop (its store is not shared)."""
        made = SandboxServer.create_account(self, label, api_version)
        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(made, self._loop))

    async def close(self) -> None:
        raise AssertionError("the shared sandbox serves the whole session: use `sandbox`")

    def stop(self) -> None:
        asyncio.run_coroutine_threadsafe(SandboxServer.close(self), self._loop).result(30)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(30)
        self._loop.close()


@pytest.fixture(scope="session")
def shared_sandbox() -> Iterator[SharedSandbox]:
    """One sandbox for the session (see :class:`SharedSandbox`); a folder whose tests only
    create accounts of their own uses it as ``sandbox`` (its conftest.py says so)."""
    server = SharedSandbox()
    yield server
    server.stop()


@pytest.fixture
def redis_server(tmp_path: Path) -> Iterator[RedisServer]:
    """A real redis-server on 127.0.0.1 (a free port, no persistence), killed at teardown."""
    if shutil.which("redis-server") is None:
        pytest.skip("redis-server is not installed (Debian: apt-get install redis-server)")
    server = RedisServer(tmp_path)
    server.start()
    yield server
    server.stop()


@pytest.fixture
def all_logs() -> Iterator[LogCollector]:
    """Every log line of the test, DEBUG and up (the markets check none holds a secret)."""
    with collecting_logs() as collector:
        yield collector


@pytest.fixture
async def make_market(
    sandbox: SandboxServer, tmp_path: Path, all_logs: LogCollector
) -> AsyncIterator[MarketFactory]:
    """Build markets; at teardown close them and check no key or token reached a log line."""
    markets: list[Market] = []
    handles: list[PluginHandle] = []
    proxies: list[FaultProxy] = []

    async def factory(
        *,
        register_agent: bool = True,
        credits: int = 10,
        per_request: int = 2,
        faults: bool = False,
        builder_config: dict[str, Any] | None = None,
        subscriber_config: Callable[[Market], dict[str, Any]] | None = None,
        configure_builder: Callable[[ReferenceGateway], None] | None = None,
        scripted: bool = True,
    ) -> Market:
        builder_acct = await sandbox.create_account("builder")
        subscriber_acct = await sandbox.create_account("subscriber")
        base = {"environment": "local", "baseUrl": sandbox.base_url}
        transport: FaultProxy | None = None
        if faults:
            transport = FaultProxy(sandbox.origin)
            await transport.start()
            proxies.append(transport)
        builder_gw = ReferenceGateway(
            {
                **base,
                **({"baseUrl": transport.base_url} if transport else {}),
                "svcApiKey": builder_acct["apiKey"],
                "enablePaidEndpoint": True,
                "paidEndpointPort": 0,
                "creditsPerRequest": per_request,
                **(builder_config or {}),
            }
        )
        if scripted:  # the host-supplied handler wins over config agentHandler
            builder_gw.agent_handler = scripted_handler  # type: ignore[attr-defined]
        if configure_builder is not None:
            configure_builder(builder_gw)
        n = len(markets)
        builder = await asyncio.to_thread(
            register,
            builder_gw,
            store=CredentialStore(tmp_path / f"b{n}", use_keyring=False),
        )
        handles.append(builder)
        market = Market(
            server=sandbox,
            builder_gw=builder_gw,
            builder=builder,
            endpoint=builder.extras["paid_endpoint"],
            subscriber_gw=ReferenceGateway(base),
            subscriber=builder,  # replaced below
            builder_key=builder_acct["apiKey"],
            subscriber_key=subscriber_acct["apiKey"],
            subscriber_address=subscriber_acct["address"],
            builder_address=builder_acct["address"],
            transport=transport,
            secrets=[builder_acct["apiKey"], subscriber_acct["apiKey"]],
        )
        if register_agent:
            await market.register_agent(credits, per_request)
        market.subscriber_gw = ReferenceGateway(
            {
                **base,
                # these markets test paying, not approving: confirm: true buys (approval tests
                # pass approval: human in subscriber_config)
                "approval": "model",
                **(subscriber_config(market) if subscriber_config else {}),
            }
        )
        market.subscriber = await asyncio.to_thread(
            register,
            market.subscriber_gw,
            store=CredentialStore(tmp_path / f"s{n}", use_keyring=False),
        )
        handles.append(market.subscriber)
        reply = await market.subscriber_gw.run_command("svc_login", subscriber_acct["apiKey"])
        assert reply.startswith("Logged in"), reply
        markets.append(market)
        return market

    yield factory
    for handle in reversed(handles):
        await asyncio.to_thread(handle.close)
    for proxy in proxies:
        await proxy.close()
    text = all_logs.text
    for market in markets:
        for secret in market.secrets:
            assert secret not in text, "an API key or access token reached the log"
    assert not leaked_secrets(text), "something shaped like a key or token reached the log"


@pytest.fixture
async def market(make_market: MarketFactory) -> Market:
    return await make_market()


def no_top_up(_market: Market) -> dict[str, Any]:
    """Subscriber config whose delegations cannot pay for the plan (1 cent): no top-up."""
    return {"defaultSpendingLimitCents": 1}


@pytest.fixture
async def market_without_top_up(make_market: MarketFactory) -> Market:
    """A market whose subscriber's tokens cannot top up: too few credits stay too few."""
    return await make_market(subscriber_config=no_top_up)


@pytest.fixture
async def http() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(timeout=30) as client:
        yield client


@dataclass
class StubMarket:
    """A builder gateway selling plan-1 through the stub facilitator (verify reserves nothing)."""

    stub: StubService
    gateway: ReferenceGateway
    handle: PluginHandle
    endpoint: PaidEndpoint

    @property
    def url(self) -> str:
        return self.endpoint.url


StubMarketFactory = Callable[..., Awaitable[StubMarket]]


@pytest.fixture
async def make_stub_market(
    tmp_path: Path, all_logs: LogCollector
) -> AsyncIterator[StubMarketFactory]:
    made: list[StubMarket] = []

    async def factory(
        *,
        stub: StubService | None = None,
        config: dict[str, Any] | None = None,
        handler: Any = None,
        credits: Any = None,
        store_dir: str = "stub",
        http_app: web.Application | None = None,
    ) -> StubMarket:
        service = stub or StubService()
        if not service.base_url:
            await service.start()
        gateway = ReferenceGateway(
            {
                "environment": "local",
                "baseUrl": service.base_url,
                "svcApiKey": BUILDER_KEY,
                "enablePaidEndpoint": True,
                "paidEndpointPort": 0,
                "planId": PLAN_ID,
                "agentId": AGENT_ID,
                **(config or {}),
            },
            http_app=http_app,
        )
        gateway.agent_handler = handler or scripted_handler  # type: ignore[attr-defined]
        if credits is not None:
            gateway.credits_for_request = credits  # type: ignore[attr-defined]
        handle = await asyncio.to_thread(
            register, gateway, store=CredentialStore(tmp_path / store_dir, use_keyring=False)
        )
        market = StubMarket(service, gateway, handle, handle.extras["paid_endpoint"])
        market.endpoint.flow.settler.backoff = (0.0, 0.0)  # no real sleeps in tests
        made.append(market)
        return market

    yield factory
    for market in reversed(made):
        await asyncio.to_thread(market.handle.close)
    for market in made:
        await market.stub.close()
    assert BUILDER_KEY not in all_logs.text
    assert not leaked_secrets(all_logs.text), "something shaped like a key or token was logged"
