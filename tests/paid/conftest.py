"""Fixtures for the paid tests: markets (sandbox + builder + subscriber) and log capture."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from svc_gateway import PluginHandle, register
from svc_gateway.hosts.reference import ReferenceGateway
from svc_gateway.login import CredentialStore
from svc_gateway.sandbox import SandboxServer

from .support import (
    FaultyTransport,
    LogCollector,
    Market,
    MarketFactory,
    leaked_secrets,
    scripted_handler,
)


@pytest.fixture
def all_logs() -> Iterator[LogCollector]:
    root = logging.getLogger()
    collector, level = LogCollector(), root.level
    root.addHandler(collector)
    root.setLevel(logging.DEBUG)
    yield collector
    root.removeHandler(collector)
    root.setLevel(level)


@pytest.fixture
async def make_market(
    sandbox: SandboxServer, tmp_path: Path, all_logs: LogCollector
) -> AsyncIterator[MarketFactory]:
    """Build markets; at teardown close them and check no key or token reached a log line."""
    markets: list[Market] = []
    handles: list[PluginHandle] = []

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
        builder_gw = ReferenceGateway(
            {
                **base,
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
        transport = FaultyTransport() if faults else None
        n = len(markets)
        builder = await asyncio.to_thread(
            register,
            builder_gw,
            transport=transport,
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
            transport=transport,
            secrets=[builder_acct["apiKey"], subscriber_acct["apiKey"]],
        )
        if register_agent:
            await market.register_agent(credits, per_request)
        market.subscriber_gw = ReferenceGateway(
            {**base, **(subscriber_config(market) if subscriber_config else {})}
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
    text = all_logs.text
    for market in markets:
        for secret in market.secrets:
            assert secret not in text, "an API key or access token reached the log"
    assert not leaked_secrets(text), "something shaped like a key or token reached the log"


@pytest.fixture
async def market(make_market: MarketFactory) -> Market:
    return await make_market()


@pytest.fixture
async def http() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(timeout=30) as client:
        yield client
