"""A paid MCP ``tools/call`` vs an unpaid one on the same server: ``--only mcp``.

One paid MCP server (this plugin's, under uvicorn on the plugin loop) sells the tool ``ask``
(1 credit, verify + settle against the stub facilitator in its own process) and serves the
tool ``free`` (0 credits, no facilitator call) with the same function. The official MCP client
(one session, streamable HTTP) calls them in alternating order; the figure is the unpaid call's
median time over the paid call's (a rate ratio: 0.5 means a paid call takes twice as long).
The payment is a reusable (v2-shaped) token, the session's bearer and, decoded, each paid
call's ``_meta["x402/payment"]``: no single-use token, so no replayed answer.
"""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path
from typing import Any

from . import procs
from .micro import Timing, interleaved
from .report import Figure, Report, Target
from .serve import STUB_PAYER, STUB_PLAN_ID, fake_key

SERVER_NAME = "bench-srv"


def payment() -> dict[str, Any]:
    """The decoded token a buyer puts in ``_meta["x402/payment"]`` (the stub checks nothing)."""
    return {"x402Version": 2, "payload": {"authorization": {"from": STUB_PAYER}}}


async def _measure(service: str, rounds: int) -> dict[str, Timing]:
    import svc_gateway
    from svc_gateway.account.credentials import CredentialStore
    from svc_gateway.encoding import b64_json
    from svc_gateway.hosts.reference import ReferenceGateway
    from svc_gateway.interop.mcp_client import ClientSession
    from svc_gateway.selling.ways_in.mcp import create_server, serve
    from svc_gateway.selling.ways_in.mcp.server import Options

    gateway = ReferenceGateway(
        {
            "environment": "local",
            "baseUrl": service,
            "svcApiKey": fake_key(),
            "planId": STUB_PLAN_ID,
        }
    )
    with tempfile.TemporaryDirectory(prefix="svc-bench-") as tmp:
        store = CredentialStore(Path(tmp), use_keyring=False)
        handle = await asyncio.to_thread(svc_gateway.register, gateway, store=store)
        server = create_server(handle.core, server_name=SERVER_NAME)

        def answer(arguments: dict[str, Any]) -> str:
            return f"answer to {arguments.get('q', '')}"

        server.tool("ask", answer, options=Options(credits=1))
        server.tool("free", answer, options=Options(credits=0))
        running = await handle.runtime.run(serve(server, host="127.0.0.1", port=0))
        meta = {"x402/payment": payment()}
        try:
            async with ClientSession(running.url, b64_json(payment()), timeout=30) as session:

                async def paid() -> None:
                    result = await session.call_tool("ask", {"q": "x"}, meta)
                    if result.get("isError"):
                        raise RuntimeError(f"the paid call failed: {result}")

                async def free() -> None:
                    await session.call_tool("free", {"q": "x"}, None)

                return await interleaved(
                    rounds, {"unpaid MCP tools/call": free, "paid MCP tools/call": paid}
                )
        finally:
            await handle.runtime.run(running.close())
            await asyncio.to_thread(handle.close)


def measure(rounds: int) -> dict[str, Timing]:
    """Paid and unpaid ``tools/call`` medians against a stub facilitator process."""
    with procs.server("stub") as stub:
        return asyncio.run(_measure(stub + "/api/v1", rounds))


def case_mcp(report: Report, rounds: int) -> None:
    """A paid MCP tools/call vs an unpaid one on the same server (stub facilitator)."""
    calls = measure(rounds)
    for name, timing in calls.items():
        print(f"  {name:<34} median {timing.median_us:9.1f} µs  p95 {timing.p95_us:9.1f} µs")
        report.rows.append({"case": name, "median_us": timing.median_us, "p95_us": timing.p95_us})
    free, paid = calls["unpaid MCP tools/call"], calls["paid MCP tools/call"]
    # a rate ratio: calls/s paid over calls/s unpaid = unpaid time / paid time
    report.figure(
        Figure("paid MCP tools/call / unpaid (rate)", free.median_us, paid.median_us, "µs"),
        Target(">=", 0.5),
    )
