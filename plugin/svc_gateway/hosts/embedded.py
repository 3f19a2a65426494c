"""The embedded default: a local sandbox in-process, with ready accounts and an agent to buy from.

``svc-gateway chat`` with no API key and no ``baseUrl`` uses this, so a newcomer can run the
main job offline with nothing else installed: the chat is logged in as a throwaway subscriber,
and a throwaway builder sells the default agent's answers on a free loopback port, registered
with a demo plan (through the same ``svc_registerAgent`` tool a chat user has).
"""

from __future__ import annotations

import asyncio
import json
import tempfile
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# USDC-like token on the test network; the sandbox accepts any contract address
DEMO_TOKEN = "0x036CbD53842c5426634e7929541eC2318f3dCF7e"
DEMO_PLAN_NAME = "Starter credits"
DEMO_AGENT_NAME = "Embedded demo agent"
DEMO_CREDITS = 100
DEMO_PRICE = 1_000_000  # 1 USDC-like token (6 decimals)


@dataclass(frozen=True)
class Embedded:
    plugin_config: dict[str, Any]
    subscriber_key: str | None
    banner: str | None
    #: The embedded seller's paid endpoint URL (``None`` when the sandbox is not embedded).
    agent_url: str | None = None


def try_line(agent_url: str) -> str:
    """The ready-to-paste line that buys one answer from ``agent_url``."""
    params = json.dumps({"agentUrl": agent_url, "prompt": "hello"})
    return f"Try: svc_queryAgent {params}"


async def _serve_demo_agent(
    stack: AsyncExitStack, base_url: str, builder_key: str
) -> tuple[str, str, str]:
    """A builder plugin serving the default handler on a free port, registered with a plan.

    Returns (endpoint URL, plan id, agent id). The builder's plugin is closed with ``stack``.
    """
    from .. import register
    from ..account.credentials import CredentialStore
    from .reference import ReferenceGateway

    scratch = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="svc-seller-")))
    gateway = ReferenceGateway(
        {
            "environment": "local",
            "baseUrl": base_url,
            "svcApiKey": builder_key,
            "enablePaidEndpoint": True,
            "paidEndpointPort": 0,
            "settleQueuePath": str(scratch / "settle-queue.json"),
        }
    )
    store = CredentialStore(scratch, use_keyring=False)  # never the real keyring
    # register() blocks until the plugin loop is up; the sandbox runs on *this* loop
    handle = await asyncio.to_thread(register, gateway, store=store)
    stack.push_async_callback(asyncio.to_thread, handle.close)
    url = str(handle.extras["paid_endpoint"].url)
    result = await gateway.call_tool(
        "svc_registerAgent",
        {
            "name": DEMO_AGENT_NAME,
            "agentUrl": url,
            "planName": DEMO_PLAN_NAME,
            "description": "Demo plan of the embedded sandbox",
            "priceAmounts": [DEMO_PRICE],
            "tokenAddress": DEMO_TOKEN,
            "creditsAmount": DEMO_CREDITS,
            "creditsPerRequest": 1,
        },
    )
    if result.isError:
        raise RuntimeError(f"could not register the embedded demo agent: {result.text}")
    data = result.structuredContent
    return url, str(data["planId"]), str(data["agentId"])


@asynccontextmanager
async def embedded_session(config: dict[str, Any], enabled: bool) -> AsyncIterator[Embedded]:
    """Start the sandbox (when ``enabled``) and yield the config to run the plugin with."""
    if not enabled:
        yield Embedded(config, None, None)
        return
    from ..sandbox import start_sandbox

    server = await start_sandbox()
    async with AsyncExitStack() as stack:
        stack.push_async_callback(server.close)
        builder = await server.create_account("builder")
        subscriber = await server.create_account("subscriber")
        url, plan_id, agent_id = await _serve_demo_agent(stack, server.base_url, builder["apiKey"])
        plugin_config = {
            **config,
            "environment": "local",
            "baseUrl": server.base_url,
            "planId": config.get("planId") or plan_id,
        }
        # a hosted gateway sells its metered tools on the demo plan: only its owner settles them
        hosted = bool(config.get("meteredTools"))
        operator = builder if hosted else subscriber
        who = "the demo plan's owner" if hosted else "a new subscriber"
        banner = (
            f"No API key configured: started the embedded sandbox at {server.base_url}\n"
            f"and logged in as {who}, {operator['address']} (throwaway account).\n"
            f"A demo agent (agentId {agent_id}) sells answers at {url}\n"
            f"with the demo plan '{DEMO_PLAN_NAME}' (planId {plan_id}): {DEMO_CREDITS} credits "
            "for 1 USDC, 1 credit per answer.\n"
            "You approve what is bought, not the assistant: svc_orderPlan {} quotes, with "
            '{"confirm": true} it gives you a code to type, /svc_approve <code>.\n'
            "First: /context, then /svc_allow 2 USD per day (paid answers then go through "
            "without a code, up to that), then:\n"
            f"{try_line(url)}"
        )
        yield Embedded(plugin_config, operator["apiKey"], banner, url)
