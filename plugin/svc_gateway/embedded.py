"""The embedded default: a local sandbox in-process, with ready accounts and a demo plan.

``svc-gateway chat`` with no API key and no ``baseUrl`` uses this, so a newcomer can run the
main job offline with nothing else installed.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

from .client import ServiceClient
from .models import PlanMetadata
from .pricing import crypto_price, fixed_credits

# USDC-like token on the test network; the sandbox accepts any contract address
DEMO_TOKEN = "0x036CbD53842c5426634e7929541eC2318f3dCF7e"


@dataclass(frozen=True)
class Embedded:
    plugin_config: dict[str, Any]
    subscriber_key: str | None
    banner: str | None


@asynccontextmanager
async def embedded_session(config: dict[str, Any], enabled: bool) -> AsyncIterator[Embedded]:
    """Start the sandbox (when ``enabled``) and yield the config to run the plugin with."""
    if not enabled:
        yield Embedded(config, None, None)
        return
    from .sandbox import start_sandbox

    server = await start_sandbox()
    try:
        builder = await server.create_account("builder")
        subscriber = await server.create_account("subscriber")
        client = ServiceClient(server.base_url, builder["apiKey"])
        try:
            plan_id = await client.register_plan(
                PlanMetadata(name="Starter credits", description="Demo plan of the sandbox"),
                crypto_price([1_000_000], [builder["address"]], DEMO_TOKEN),
                fixed_credits(100, 1),
            )
        finally:
            await client.aclose()
        plugin_config = {
            **config,
            "environment": "local",
            "baseUrl": server.base_url,
            "planId": config.get("planId") or plan_id,
        }
        banner = (
            f"No API key configured: started the embedded sandbox at {server.base_url}\n"
            f"and logged in as a new subscriber, {subscriber['address']} (throwaway account).\n"
            f"Demo plan 'Starter credits' (planId {plan_id}): 100 credits for 1 USDC.\n"
            'Try: /context, svc_checkBalance {}, svc_orderPlan {"confirm": true}'
        )
        yield Embedded(plugin_config, subscriber["apiKey"], banner)
    finally:
        await server.close()
