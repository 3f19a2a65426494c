"""``enablePaidMcp``: the gateway's agent sold as the MCP tool ``ask``, on the plugin's own
uvicorn server or mounted at ``/mcp`` on the host's aiohttp app; the managed server's
discovery, health and registration endpoints."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any

import httpx
import pytest
from aiohttp import web

import svc_gateway
from svc_gateway.account.credentials import CredentialStore
from svc_gateway.hosts.reference import ReferenceGateway
from svc_gateway.interop.mcp_client import ClientSession
from svc_gateway.selling.ways_in.mcp import PaidMcp

from .conftest import SERVER_NAME, McpMarket


async def builder_gateway(
    market: McpMarket, tmp_path: Path, http_app: web.Application | None = None, **config: Any
) -> tuple[ReferenceGateway, svc_gateway.PluginHandle]:
    gateway = ReferenceGateway(
        {
            "environment": "local",
            "baseUrl": market.sandbox.base_url,
            "svcApiKey": market.secrets[0],
            "planId": market.plan_id,
            "agentId": market.agent_id,
            "enablePaidMcp": True,
            "paidMcpPort": 0,
            "serverName": SERVER_NAME,
            "creditsPerRequest": 3,
            **config,
        },
        http_app=http_app,
    )
    store = CredentialStore(tmp_path / "wired", use_keyring=False)
    handle = await asyncio.to_thread(svc_gateway.register, gateway, store=store)
    return gateway, handle


async def ask(market: McpMarket, url: str, prompt: str) -> dict[str, Any]:
    token, meta = await market.payment("ask")
    async with ClientSession(url, token, timeout=30) as session:
        tools = await session.list_tools()
        assert [t["name"] for t in tools] == ["ask"]
        assert tools[0]["_meta"]["svc/price"]["credits"] == "3"
        return await session.call_tool("ask", {"prompt": prompt}, meta)


async def test_enable_paid_mcp_sells_the_agent_as_the_ask_tool(
    mcp_market: McpMarket, tmp_path: Path
) -> None:
    _gateway, handle = await builder_gateway(mcp_market, tmp_path)
    try:
        paid: PaidMcp = handle.extras["paid_mcp"]
        assert paid.url.startswith("http://127.0.0.1:") and paid.url.endswith("/mcp")
        assert paid.logical_uri("ask") == mcp_market.uri("ask")
        result = await ask(mcp_market, paid.url, "three little words")
        assert result["structuredContent"]["wordCount"] == 3
        assert result["_meta"]["x402/payment-response"]["creditsRedeemed"] == "3"
        assert await mcp_market.burned() == 3
        assert paid.stats.credits_settled == 3
    finally:
        await asyncio.to_thread(handle.close)


async def test_enable_paid_mcp_logs_its_url_and_the_uri_to_register(
    mcp_market: McpMarket, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    _gateway, handle = await builder_gateway(mcp_market, tmp_path)
    try:
        url = handle.extras["paid_mcp"].url
        infos = [r.getMessage() for r in caplog.records if r.levelno == logging.INFO]
        assert f"Paid MCP:      {url} (streamable HTTP, paid tool ask)" in infos
        uri = mcp_market.uri("ask")
        assert f"Paid MCP: the agent sold must register {uri} among its endpoints" in infos
    finally:
        await asyncio.to_thread(handle.close)


async def test_mcp_mounts_on_the_hosts_aiohttp_app(mcp_market: McpMarket, tmp_path: Path) -> None:
    app = web.Application()
    _gateway, handle = await builder_gateway(mcp_market, tmp_path, http_app=app)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        paid: PaidMcp = handle.extras["paid_mcp"]
        assert paid.url == "/mcp"  # no http_base_url: only the path is known
        url = f"http://127.0.0.1:{port}/mcp"
        result = await ask(mcp_market, url, "mounted on the host")
        assert result["structuredContent"]["wordCount"] == 4
        assert await mcp_market.burned() == 3
        async with httpx.AsyncClient() as http:
            unauthorised = await http.post(url, json={})
            document = await http.get(
                f"http://127.0.0.1:{port}/.well-known/oauth-protected-resource/mcp"
            )
        assert unauthorised.status_code == 401
        assert document.json()["resource"] == url
    finally:
        await runner.cleanup()
        await asyncio.to_thread(handle.close)


async def test_managed_server_endpoints(mcp_market: McpMarket) -> None:
    base = mcp_market.url.removesuffix("/mcp")
    async with httpx.AsyncClient(base_url=base) as http:
        info = (await http.get("/")).json()
        health = await http.get("/health")
        resource = (await http.get("/.well-known/oauth-protected-resource")).json()
        authorization = (await http.get("/.well-known/oauth-authorization-server")).json()
        openid = (await http.get("/.well-known/openid-configuration")).json()
        registered = await http.post(
            "/register",
            json={"redirect_uris": ["http://localhost:3000/cb"], "client_name": "Claude"},
        )
        refused = await http.post("/register", json={"client_name": "no redirect"})
        missing = await http.get("/nowhere")
    assert info["name"] == SERVER_NAME and info["planId"] == mcp_market.plan_id
    assert info["agentId"] == mcp_market.agent_id
    assert info["oauth"]["client_id"] == mcp_market.agent_id  # SPEC.md: informational
    assert info["oauth"]["issuer"] == authorization["issuer"]
    assert info["oauth"]["registration_endpoint"] == base + "/register"
    assert info["endpoints"]["mcp"] == mcp_market.url
    assert health.status_code == 200 and health.json()["status"] == "ok"
    assert resource["resource"] == mcp_market.url
    # one authorization server: the service, whose own documents the MCP origin serves
    assert resource["authorization_servers"] == [authorization["issuer"]]
    service = mcp_market.sandbox.origin
    assert authorization["issuer"] == service
    assert authorization["registration_endpoint"] == service + "/oauth/register"
    assert authorization["grant_types_supported"] == ["authorization_code"]
    assert openid["issuer"] == service and openid["subject_types_supported"] == ["public"]
    assert registered.status_code == 201
    client = registered.json()
    assert client["client_id"].startswith("svc-oauth-client-")  # the service's registration
    assert client["redirect_uris"] == ["http://localhost:3000/cb"]
    assert "client_secret" not in client  # a public client (auth method none)
    assert refused.status_code == 400 and refused.json()["error"] == "invalid_redirect_uri"
    assert missing.status_code == 404
