"""``paid_server``: a paid MCP server with no chat host (docs' "A complete MCP seller"), and
what its registration notes say for each state of the sold agent's registration."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from svc_gateway.config import ConfigError
from svc_gateway.sandbox import SandboxServer
from svc_gateway.selling.ways_in.mcp import PaidMcp, PaidMcpServer, paid_server
from svc_gateway.service.client import ServiceClient
from svc_gateway.service.models import AgentApi, AgentMetadata, PlanMetadata
from svc_gateway.service.pricing import crypto_price, fixed_credits

from .conftest import USDC

URL = "http://127.0.0.1:8403/mcp"


@pytest.fixture
def servers() -> Iterator[list[PaidMcpServer]]:
    made: list[PaidMcpServer] = []
    yield made
    for server in made:
        server.core.runtime.close()


def settings(sandbox: SandboxServer, key: str, **more: Any) -> dict[str, Any]:
    return {"environment": "local", "baseUrl": sandbox.base_url, "svcApiKey": key, **more}


async def notes(server: PaidMcpServer) -> list[str]:
    server.tool("ask", lambda arguments: "hi")
    return await PaidMcp(server, None, URL).registration_notes()  # type: ignore[arg-type]


def test_a_server_without_the_builders_key_is_refused_with_the_setting_to_fix(
    sandbox: SandboxServer,
) -> None:
    with pytest.raises(ConfigError, match="svcApiKey"):
        paid_server({"environment": "local", "baseUrl": sandbox.base_url}, server_name="s")


async def test_the_notes_say_what_the_registration_lets_buyers_do(
    sandbox: SandboxServer, builder: dict[str, str], servers: list[PaidMcpServer]
) -> None:
    key = builder["apiKey"]
    servers.append(paid_server(settings(sandbox, key), server_name="srv"))
    (line,) = await notes(servers[-1])
    assert line.startswith("Paid MCP: not selling yet") and "mcp://srv/tools/ask" in line

    client = ServiceClient(sandbox.base_url, key)
    try:
        plan = await client.register_plan(
            PlanMetadata(name="notes"),
            crypto_price([1_000_000], [builder["address"]], USDC),
            fixed_credits(10, 1),
        )
        tools_only = await client.register_agent(
            AgentMetadata(name="tools only"),
            AgentApi(endpoints=[{"POST": "mcp://srv/tools/*"}]),
            [plan],
        )
        both = await client.register_agent(
            AgentMetadata(name="both"),
            AgentApi(endpoints=[{"POST": "mcp://srv/tools/ask"}, {"POST": URL}]),
            [plan],
        )
    finally:
        await client.aclose()

    servers.append(
        paid_server(settings(sandbox, key, planId=plan, agentId=both), server_name="srv")
    )
    assert await notes(servers[-1]) == [
        f"Paid MCP: agent {both} lists mcp://srv/tools/ask: buyers can pay"
    ]
    servers.append(
        paid_server(settings(sandbox, key, planId=plan, agentId=tools_only), server_name="srv")
    )
    listed, oauth = await notes(servers[-1])
    assert "buyers can pay" in listed
    assert f"does not list {URL}" in oauth and "invalid_target" in oauth
    servers.append(
        paid_server(settings(sandbox, key, planId=plan, agentId=both), server_name="other")
    )
    (missing,) = await notes(servers[-1])
    assert f"agent {both} does not list mcp://other/tools/ask" in missing
    servers.append(
        paid_server(settings(sandbox, key, planId=plan, agentId="did:svc:0"), server_name="srv")
    )
    (unread,) = await notes(servers[-1])
    assert "could not read agent did:svc:0" in unread and "unchecked" in unread
