"""Fixtures: a sandbox on 127.0.0.1 (port 0) with a fake clock, driven over real HTTP."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest

from svc_gateway.sandbox import SandboxServer, start_sandbox

from .support import REQUEST_TTL, Actor, Api, FakeClock


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
async def server(clock: FakeClock) -> AsyncIterator[SandboxServer]:
    running = await start_sandbox(clock=clock, request_ttl_secs=REQUEST_TTL)
    yield running
    await running.close()


@pytest.fixture
async def http(server: SandboxServer) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=server.base_url, timeout=10) as client:
        yield client


@pytest.fixture
def api(server: SandboxServer, http: httpx.AsyncClient) -> Api:
    return Api(server, http)


@pytest.fixture
async def owner(api: Api) -> Actor:
    return await api.account("builder")


@pytest.fixture
async def buyer(api: Api) -> Actor:
    return await api.account("subscriber")
