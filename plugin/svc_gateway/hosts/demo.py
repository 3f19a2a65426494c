"""``svc-gateway demo``: sell and buy an agent answer end to end, offline, in one command.

A local sandbox; a BUILDER gateway that serves the paid endpoint and registers its agent and
plan; a SUBSCRIBER gateway that logs in, buys the plan (the person approves the assistant's order
with its code), allows a daily amount and queries the agent twice. Every step
goes through the same tools and commands a chat user has, over real loopback HTTP. The exit
code says whether the credits moved exactly as priced, checked from both sides: the
subscriber's balance and receipts, and the receipts the builder's endpoint settled.
"""

from __future__ import annotations

import asyncio
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .. import PluginHandle, register
from ..account.credentials import CredentialStore
from ..safe_text import credits_text
from ..selling import PaidEndpoint
from .embedded import DEMO_TOKEN
from .reference import ReferenceGateway

CREDITS_GRANTED = 10
CREDITS_PER_REQUEST = 2
PLAN_PRICE = 1_000_000  # 1 USDC-like token (6 decimals)
#: what the person lets paid answers spend without a code (3 answers x 0.20 USD here)
ALLOWANCE = "2 USD per day"
QUESTIONS = (
    "What does an x402 access token prove?",
    "Summarise verify, work and settle in one line.",
)


MCP_SERVER = "demo-agent"


def mcp_available() -> bool:
    """The mcp extra is installed (the demo then also sells and buys over MCP)."""
    from ..config import ConfigError
    from ..interop.mcp_sdk import sdk_version

    try:
        sdk_version()
    except ConfigError:
        return False
    return True


NEXT_STEPS = """\
Try next:
  svc-gateway chat          buy from a demo agent yourself: its banner prints a ready
                            svc_queryAgent line (you approve, it pays, a receipt)
  svc-gateway sandbox       a sandbox for two gateways: docs/selling.md "Sell in one gateway,
                            buy from another", or the REST API with curl (docs/sandbox.md)"""


class DemoFailed(Exception):
    """A step did not give the expected result; the message says which and why."""


async def _tool(gateway: ReferenceGateway, name: str, params: dict[str, Any]) -> dict[str, Any]:
    result = await gateway.call_tool(name, params)
    if result.isError:
        err = result.structuredContent.get("error", {})
        raise DemoFailed(f"{name} failed [{err.get('code')}]: {err.get('message')}")
    return result.structuredContent


class Demo:
    """The demo's steps, printed one line each; ``say`` is ``print`` unless quiet."""

    def __init__(self, base_url: str, tmp: Path, say: Callable[[str], None]) -> None:
        self.base_url = base_url
        self.tmp = tmp
        self.say = say
        self.step = 0
        self.handles: list[PluginHandle] = []

    def line(self, who: str, what: str, result: str) -> None:
        self.step += 1
        self.say(f"{self.step:>2}. {who:<10} {what:<20} {result}")

    async def gateway(self, name: str, config: dict[str, Any]) -> ReferenceGateway:
        gateway = ReferenceGateway({"environment": "local", "baseUrl": self.base_url, **config})
        store = CredentialStore(self.tmp / name, use_keyring=False)  # never the real keyring
        # register() blocks until the plugin loop is up; the sandbox runs on *this* loop
        self.handles.append(await asyncio.to_thread(register, gateway, store=store))
        return gateway

    async def close(self) -> None:
        while self.handles:
            await asyncio.to_thread(self.handles.pop().close)

    async def run(self, builder_key: str, subscriber_key: str) -> str:
        """All steps; returns the closing line, raises :class:`DemoFailed` on a wrong result."""
        mcp = mcp_available()
        builder = await self.gateway(
            "builder",
            {
                "svcApiKey": builder_key,
                "enablePaidEndpoint": True,
                "paidEndpointPort": 0,
                "creditsPerRequest": CREDITS_PER_REQUEST,
                **(
                    {"enablePaidMcp": True, "paidMcpPort": 0, "serverName": MCP_SERVER}
                    if mcp
                    else {}
                ),
            },
        )
        endpoint: PaidEndpoint = self.handles[-1].extras["paid_endpoint"]
        self.line("builder", "paid endpoint", f"listening at {endpoint.url}")
        ids = await _tool(
            builder,
            "svc_registerAgent",
            {
                "name": "Prompt facts agent",
                "agentUrl": endpoint.url,
                "planName": "Demo credits",
                "priceAmounts": [PLAN_PRICE],
                "tokenAddress": DEMO_TOKEN,
                "creditsAmount": CREDITS_GRANTED,
                "creditsPerRequest": CREDITS_PER_REQUEST,
            },
        )
        plan_id, agent_id = str(ids["planId"]), str(ids["agentId"])
        self.line(
            "builder",
            "svc_registerAgent",
            f"agent {agent_id}, plan {plan_id}: {CREDITS_GRANTED} credits for 1 USDC, "
            f"{CREDITS_PER_REQUEST} per request",
        )

        subscriber = await self.gateway("subscriber", {})
        reply = await subscriber.run_command("svc_login", subscriber_key)  # "local:<jwt>"
        if not reply.startswith("Logged in"):
            raise DemoFailed(f"/svc_login failed: {reply}")
        self.line("subscriber", "/svc_login", reply.split(". ")[0])
        before = await self.balance(subscriber, plan_id, "svc_checkBalance")
        quote = await _tool(subscriber, "svc_orderPlan", {"planId": plan_id})
        self.line(
            "subscriber",
            "svc_orderPlan",
            f"quote: {quote['quote']['price']} for {quote['quote']['grants']} (not bought yet)",
        )
        held = await self.approved_order(subscriber, plan_id)
        granted = held - before
        allowed = await subscriber.run_command("svc_allow", ALLOWANCE)
        if not allowed.startswith("Allowed"):
            raise DemoFailed(f"/svc_allow failed: {allowed}")
        self.line("subscriber", "/svc_allow", f"{ALLOWANCE}: paid answers need no code up to it")

        redeemed = 0
        for question in QUESTIONS:
            answer = await _tool(
                subscriber,
                "svc_queryAgent",
                {"agentUrl": endpoint.url, "prompt": question, "planId": plan_id},
            )
            receipt = answer.get("receipt") or {}
            redeemed += int(receipt.get("creditsRedeemed") or 0)
            text = answer["answer"].get("answer") if isinstance(answer["answer"], dict) else ""
            self.line(
                "subscriber",
                "svc_queryAgent",
                f"paid {credits_text(receipt.get('creditsRedeemed', '?'))} "
                f"(left {receipt.get('remainingBalance', '?')}): {text}",
            )
        after = await self.balance(subscriber, plan_id, "svc_checkBalance")
        verdict = self.verdict(before, granted, after, redeemed, endpoint)
        if not mcp:
            self.line("builder", "paid MCP", "skipped: the mcp extra is not installed")
            return verdict
        return verdict + "; " + await self.mcp_purchase(builder, subscriber)

    async def mcp_purchase(self, builder: ReferenceGateway, subscriber: ReferenceGateway) -> str:
        """The same agent sold over MCP: the tool ``ask``, registered by its logical URI and
        bought with svc_queryAgent, the payment in ``_meta``."""
        paid = self.handles[0].extras["paid_mcp"]
        self.line("builder", "paid MCP", f"tool 'ask' at {paid.url}")
        ids = await _tool(
            builder,
            "svc_registerAgent",
            {
                "name": "Prompt facts agent (MCP)",
                "agentUrl": paid.logical_uri("ask"),
                "planName": "Demo MCP credits",
                "priceAmounts": [PLAN_PRICE],
                "tokenAddress": DEMO_TOKEN,
                "creditsAmount": CREDITS_GRANTED,
                "creditsPerRequest": CREDITS_PER_REQUEST,
            },
        )
        plan_id = str(ids["planId"])
        self.line("builder", "svc_registerAgent", f"{paid.logical_uri('ask')}, plan {plan_id}")
        held = await self.approved_order(subscriber, plan_id)
        answer = await _tool(
            subscriber,
            "svc_queryAgent",
            {"agentUrl": paid.url, "tool": "ask", "prompt": QUESTIONS[0], "planId": plan_id},
        )
        receipt = answer.get("receipt") or {}
        moved = held - int(answer.get("balanceAfter") or -1)
        self.line(
            "subscriber",
            "svc_queryAgent",
            f"MCP tool 'ask': paid {credits_text(receipt.get('creditsRedeemed', '?'))} "
            f"(left {answer.get('balanceAfter')})",
        )
        if moved != CREDITS_PER_REQUEST or receipt.get("creditsRedeemed") != str(moved):
            raise DemoFailed(f"the MCP purchase moved {moved} credits, not {CREDITS_PER_REQUEST}")
        return f"MCP: 1 tool call x {CREDITS_PER_REQUEST} credits, receipt agrees"

    async def approved_order(self, subscriber: ReferenceGateway, plan_id: str) -> int:
        """The order the assistant asks for and the person approves with its code; the
        balance after it."""
        pending = await _tool(subscriber, "svc_orderPlan", {"planId": plan_id, "confirm": True})
        code = str(pending.get("pending", {}).get("code", ""))
        if not code:
            raise DemoFailed(f"svc_orderPlan bought without the person's approval: {pending}")
        self.line("subscriber", "svc_orderPlan", f"pending: the person types /svc_approve {code}")
        self.line(
            "subscriber", "/svc_approve", "the plugin shows what it buys; the person confirms"
        )
        shown = await subscriber.run_command("svc_approve", code)  # what it buys, and a word
        word = shown.split(f"/svc_approve {code} ", 1)[-1].split(" ", 1)[0]
        reply = await subscriber.run_command("svc_approve", f"{code} {word}")
        if not reply.startswith("Approved"):
            raise DemoFailed(f"/svc_approve failed: {reply}")
        data = await _tool(subscriber, "svc_checkBalance", {"planId": plan_id})
        self.line("subscriber", "/svc_approve", f"bought: balance {data['balance']} credits")
        return int(data["balance"])

    async def balance(self, gateway: ReferenceGateway, plan_id: str, tool: str) -> int:
        data = await _tool(gateway, tool, {"planId": plan_id})
        self.line(
            "subscriber",
            tool,
            f"balance {data['balance']} credits (subscribed: {data['isSubscriber']})",
        )
        return int(data["balance"])

    def verdict(
        self, before: int, granted: int, after: int, redeemed: int, endpoint: PaidEndpoint
    ) -> str:
        expected = len(QUESTIONS) * CREDITS_PER_REQUEST
        stats = endpoint.stats
        problems = []
        if granted != CREDITS_GRANTED:
            problems.append(f"the order granted {granted}, not {CREDITS_GRANTED}")
        if before + granted - after != expected:
            problems.append(f"the balance fell by {before + granted - after}, not {expected}")
        if redeemed != expected:
            problems.append(f"the subscriber's receipts show {redeemed}")
        if stats.settled != len(QUESTIONS) or stats.credits_settled != expected:
            problems.append(
                f"the builder settled {stats.settled} requests for {stats.credits_settled}"
            )
        if problems:
            raise DemoFailed("credits did NOT move as priced: " + "; ".join(problems))
        self.line(
            "builder",
            "paid endpoint",
            f"settled {stats.settled} requests for {stats.credits_settled} credits",
        )
        return (
            f"OK: {expected} credits moved from subscriber to builder "
            f"({len(QUESTIONS)} queries x {CREDITS_PER_REQUEST} credits; balance "
            f"{before + granted} -> {after}; builder receipts agree)"
        )


async def run_demo(quiet: bool = False) -> int:
    """Run the demo; 0 only if credits moved exactly as priced. The verdict line says so; on
    success (unless quiet) what to try next follows it."""
    from ..sandbox import start_sandbox

    say: Callable[[str], None] = (lambda _line: None) if quiet else print
    server = await start_sandbox()
    try:
        with tempfile.TemporaryDirectory(prefix="svc-demo-") as tmp:
            demo = Demo(server.base_url, Path(tmp), say)
            try:
                builder = await server.create_account("builder")
                subscriber = await server.create_account("subscriber")
                say(f"svc-gateway demo: local sandbox at {server.base_url}")
                last = await demo.run(builder["apiKey"], subscriber["apiKey"])
                code = 0
            except DemoFailed as exc:
                last, code = f"FAILED: {exc}", 1
            finally:
                await demo.close()
    finally:
        await server.close()
    print(last)
    if code == 0 and not quiet:
        say(NEXT_STEPS)
    return code
