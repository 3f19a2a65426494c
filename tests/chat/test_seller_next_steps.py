"""Issue 14: a seller is told the next step and what keeps it selling after a restart."""

from __future__ import annotations

import asyncio
import json
import logging
import subprocess
import sys
from pathlib import Path

import pytest

from svc_gateway.chat.seller_notes import startup_notes
from svc_gateway.config import ConfigError
from svc_gateway.sandbox import SandboxServer
from tests.chat.test_cli import WAIT_SECS, chat_env
from tests.conftest import USDC, HostFactory

REGISTER = {
    "name": "Seller",
    "planName": "Seller credits",
    "priceAmounts": ["1000000"],
    "tokenAddress": USDC,
    "creditsAmount": 10,
}


async def test_a_seller_without_a_plan_is_told_to_register(
    make_host: HostFactory, builder: dict[str, str], tmp_path: Path
) -> None:
    gateway, handle = await make_host(
        builder["apiKey"],
        enablePaidEndpoint=True,
        paidEndpointPort=0,
        settleQueuePath=str(tmp_path / "q.json"),
    )
    url = handle.extras["paid_endpoint"].url
    assert startup_notes(handle.core) == [
        f"Paid endpoint: not selling yet: run svc_registerAgent with agentUrl {url}"
    ]
    result = await gateway.call_tool("svc_registerAgent", {**REGISTER, "agentUrl": url})
    data = result.structuredContent
    port = int(url.split(":")[2].split("/")[0])
    assert data["keepInConfig"] == {
        "planId": data["planId"],
        "agentId": data["agentId"],
        "paidEndpointPort": port,
    }
    assert (
        f"planId {data['planId']}, agentId {data['agentId']}, paidEndpointPort {port}"
        in (data["message"])
    )
    assert "after a restart" in data["message"]
    assert data["warning"].startswith("paidEndpointPort is 0")
    assert f"set paidEndpointPort to {port}" in data["warning"]
    notes = startup_notes(handle.core)  # now selling, on a port that will not last
    assert len(notes) == 1 and "paidEndpointPort is 0" in notes[0] and str(port) in notes[0]


async def test_a_fixed_port_gets_no_warning(
    make_host: HostFactory, builder: dict[str, str], tmp_path: Path
) -> None:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    gateway, handle = await make_host(
        builder["apiKey"],
        enablePaidEndpoint=True,
        paidEndpointPort=port,
        settleQueuePath=str(tmp_path / "q.json"),
    )
    url = handle.extras["paid_endpoint"].url
    data = (
        await gateway.call_tool("svc_registerAgent", {**REGISTER, "agentUrl": url})
    ).structuredContent
    assert data["keepInConfig"]["paidEndpointPort"] == port
    assert "warning" not in data
    assert startup_notes(handle.core) == []


async def test_without_a_paid_endpoint_the_result_keeps_only_the_ids(
    make_host: HostFactory, builder: dict[str, str]
) -> None:
    gateway, _ = await make_host(builder["apiKey"])
    data = (
        await gateway.call_tool(
            "svc_registerAgent", {**REGISTER, "agentUrl": "https://agent.example/svc"}
        )
    ).structuredContent
    assert set(data["keepInConfig"]) == {"planId", "agentId"}


async def test_an_unimportable_handler_says_to_use_pythonpath(
    make_host: HostFactory, builder: dict[str, str]
) -> None:
    with pytest.raises(ConfigError) as caught:
        await make_host(
            builder["apiKey"],
            enablePaidEndpoint=True,
            paidEndpointPort=0,
            agentHandler="no_such_agent_mod.sub:answer",
        )
    message = str(caught.value)
    assert "cannot import module 'no_such_agent_mod.sub'" in message
    assert "no_such_agent_mod/sub.py" in message and "PYTHONPATH" in message


async def test_the_chat_finds_a_handler_in_its_working_directory(
    sandbox: SandboxServer, builder: dict[str, str], tmp_path: Path
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    (work / "my_agent.py").write_text(
        "def answer(request):\n    return {'answer': 'mine: ' + request['prompt']}\n"
    )
    config = {
        "environment": "local",
        "baseUrl": sandbox.base_url,
        "enablePaidEndpoint": True,
        "paidEndpointPort": 0,
        "agentHandler": "my_agent:answer",
        "settleQueuePath": str(tmp_path / "q.json"),
    }
    (work / "seller.json").write_text(json.dumps(config))
    child = await asyncio.create_subprocess_exec(
        sys.executable,
        "-P",  # like the svc-gateway console script: the working directory is not on sys.path
        "-m",
        "svc_gateway.cli",
        "chat",
        "--config",
        "seller.json",
        cwd=work,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**chat_env(tmp_path), "SVC_API_KEY": builder["apiKey"]},
    )
    out, err = await asyncio.wait_for(child.communicate(b""), WAIT_SECS)
    text = out.decode()
    assert child.returncode == 0, err.decode()
    assert f"added the working directory {work} to the module path" in text
    (line,) = [ln for ln in text.splitlines() if ln.startswith("Paid endpoint: POST ")]
    url = line.removeprefix("Paid endpoint: POST ")
    assert f"Paid endpoint: not selling yet: run svc_registerAgent with agentUrl {url}" in text


async def test_a_restart_on_port_0_with_a_plan_is_warned_about(
    make_host: HostFactory,
    builder: dict[str, str],
    plan_id: str,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO)
    await make_host(
        builder["apiKey"],
        enablePaidEndpoint=True,
        paidEndpointPort=0,
        planId=plan_id,
        settleQueuePath=str(tmp_path / "q.json"),
    )
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any("paidEndpointPort is 0" in w and "changes on every restart" in w for w in warnings)


async def test_paid_mcp_names_its_url_and_the_uri_to_register_at_start(
    sandbox: SandboxServer, builder: dict[str, str], tmp_path: Path
) -> None:
    config = {
        "environment": "local",
        "baseUrl": sandbox.base_url,
        "enablePaidMcp": True,
        "paidMcpPort": 0,
        "serverName": "svc-agent",
        "settleQueuePath": str(tmp_path / "q.json"),
    }
    (tmp_path / "seller.json").write_text(json.dumps(config))
    child = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "svc_gateway.cli",
        "chat",
        "--config",
        str(tmp_path / "seller.json"),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**chat_env(tmp_path), "SVC_API_KEY": builder["apiKey"]},
    )
    out, err = await asyncio.wait_for(child.communicate(b""), WAIT_SECS)
    text = out.decode()
    assert child.returncode == 0, err.decode()
    (line,) = [ln for ln in text.splitlines() if ln.startswith("Paid MCP:      http://")]
    assert line.endswith("/mcp (streamable HTTP, paid tool ask)")
    assert (
        "Paid MCP: not selling yet: run svc_registerAgent with agentUrl "
        "mcp://svc-agent/tools/ask" in text
    )


async def test_paid_mcp_banner_reads_the_registration_and_never_asks_for_what_is_there(
    sandbox: SandboxServer, builder: dict[str, str], tmp_path: Path
) -> None:
    """Issue 44: a chat selling a registered agent over MCP says the agent lists the tool,
    not "must register" under a line saying it did; a missing endpoint is named with the fix."""
    from svc_gateway.service.client import ServiceClient
    from svc_gateway.service.models import AgentApi, AgentMetadata, PlanMetadata
    from svc_gateway.service.pricing import crypto_price, fixed_credits

    client = ServiceClient(sandbox.base_url, builder["apiKey"])
    try:
        plan_id = await client.register_plan(
            PlanMetadata(name="MCP banner"),
            crypto_price([1_000_000], [builder["address"]], USDC),
            fixed_credits(10, 1),
        )
        listed = await client.register_agent(
            AgentMetadata(name="Listed"),
            AgentApi(endpoints=[{"POST": "mcp://svc-agent/tools/*"}]),
            [plan_id],
        )
        unlisted = await client.register_agent(
            AgentMetadata(name="Unlisted"),
            AgentApi(endpoints=[{"POST": "https://example.test/agent"}]),
            [plan_id],
        )
    finally:
        await client.aclose()

    async def banner(agent_id: str) -> str:
        config = {
            "environment": "local",
            "baseUrl": sandbox.base_url,
            "enablePaidMcp": True,
            "paidMcpPort": 0,
            "serverName": "svc-agent",
            "planId": plan_id,
            "agentId": agent_id,
            "settleQueuePath": str(tmp_path / f"{agent_id[-6:]}.json"),
        }
        (tmp_path / "seller.json").write_text(json.dumps(config))
        child = await asyncio.create_subprocess_exec(
            sys.executable,
            *("-m", "svc_gateway.cli", "chat", "--config", str(tmp_path / "seller.json")),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env={**chat_env(tmp_path), "SVC_API_KEY": builder["apiKey"]},
        )
        out, err = await asyncio.wait_for(child.communicate(b""), WAIT_SECS)
        assert child.returncode == 0, err.decode()
        return out.decode()

    text = await banner(listed)
    assert f"Paid MCP: agent {listed} lists mcp://svc-agent/tools/ask: buyers can pay" in text
    assert "must register" not in text
    text = await banner(unlisted)
    assert f"agent {unlisted} does not list mcp://svc-agent/tools/ask" in text
    assert f"PUT /protocol/agents/{unlisted}" in text
