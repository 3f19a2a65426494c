"""A host written from the contract alone (no ``CollectingGateway``): two chat users, their own
wallets, and one of the host's tools metered through ``around_tool_call``. What a gateway
author outside this project writes, against the sandbox over loopback."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

import svc_gateway
from svc_gateway.account.credentials import CredentialStore
from svc_gateway.host import (
    Caller,
    CommandContext,
    CommandSpec,
    GatewayAPI,
    ToolCallContext,
    ToolResult,
    ToolSpec,
)
from svc_gateway.sandbox import SandboxServer
from tests.hosts.hosted.test_metered_tools import GRANTED, balance, metering_plan

pytestmark = pytest.mark.asyncio


class MyHost:
    """The smallest host: keeps what the plugin registers, calls it with who is speaking."""

    def __init__(self, config: Mapping[str, Any]) -> None:
        self.plugin_config = dict(config)
        self.logger = logging.getLogger("my-host")
        self.tools: dict[str, ToolSpec] = {}
        self.commands: dict[str, CommandSpec] = {}
        self.events: dict[str, list[Any]] = {}
        self.draws = 0

    def register_tool(self, spec: ToolSpec) -> None:
        self.tools[spec.name] = spec

    def register_command(self, spec: CommandSpec) -> None:
        self.commands[spec.name] = spec

    def on(self, event: str, handler: Any) -> None:
        self.events.setdefault(event, []).append(handler)

    async def command(self, user: str, name: str, args: str = "") -> str:
        return await self.commands[name].handler(
            CommandContext(args=args, sender_id=user, channel="mychat")
        )

    async def tool(self, user: str, name: str, params: dict[str, Any]) -> ToolResult:
        return await self.tools[name].handler(params, caller=Caller(user, "mychat"))

    async def draw(self, user: str, call_id: str) -> Any:
        """The host's own tool, through the plugin's around_tool_call handler."""

        async def run() -> dict[str, Any]:
            self.draws += 1
            return {"image": f"#{self.draws}"}

        (around,) = self.events["around_tool_call"]
        ctx = ToolCallContext("draw", {"what": "cat"}, call_id, Caller(user, "mychat"))
        return await around(ctx, run)


async def test_an_own_host_meters_a_tool_for_two_users(
    sandbox: SandboxServer,
    builder: dict[str, str],
    builder_client: Any,
    tmp_path: Path,
) -> None:
    plan = await metering_plan(builder_client, builder["address"])
    host = MyHost(
        {
            "environment": "local",
            "baseUrl": sandbox.base_url,
            "svcApiKey": builder["apiKey"],
            "planId": plan,
            "perUserAccounts": True,
            "meteredTools": {"draw": 4},
            "defaultSpendingLimitCents": 1,
            "approval": "model",  # metering, not approvals, is tested here
        }
    )
    assert isinstance(host, GatewayAPI)
    handle = svc_gateway.register(host, store=CredentialStore(tmp_path, use_keyring=False))
    try:
        addresses = {}
        for user in ("ann", "ben"):
            opened = await host.command(user, "svc_login", "new")
            assert "account is open" in opened
            addresses[user] = opened.split("open: ", 1)[1].split(" ", 1)[0].lower()
        bought = await host.tool("ann", "svc_orderPlan", {"confirm": True})
        assert not bought.isError and bought.structuredContent["balance"] == str(GRANTED)
        assert await host.draw("ann", "c1") == {"image": "#1"}
        assert await host.draw("ann", "c1") == {"image": "#1"}  # the same call: not again
        blocked = await host.draw("ben", "c1")  # ben has no credits: his call is his own
        assert isinstance(blocked, ToolResult) and blocked.isError
        assert blocked.structuredContent["error"]["price"] == 4
        assert host.draws == 1
        assert await balance(builder_client, plan, addresses["ann"]) == GRANTED - 4
        assert await balance(builder_client, plan, addresses["ben"]) == 0
        assert "You paid 4 credits" in await host.command("ann", "svc_spend")
        assert "nothing" in await host.command("ben", "svc_spend")
    finally:
        await asyncio.to_thread(handle.close)
