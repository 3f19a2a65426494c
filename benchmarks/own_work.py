"""Our own work per paid request, in-process and without the network: ``python -m
benchmarks.own_work``.

The paid flow (``PromptAgent.serve`` and ``paid_response``) sells a prompt with the transport's
one HTTP exchange replaced by a canned answer of the stub facilitator (one loop turn, like a
real exchange), against what the chain does around its two calls (the same JSON bodies, the
default agent, ``web.json_response``). The difference is the CPU our own work costs per
request, measured by ``time.process_time`` over many requests in interleaved rounds, each
side's best round (other tenants only ever add time): stable to a few microseconds, where the
load runs of ``--only chain`` move by tens.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any

from aiohttp import web
from multidict import CIMultiDict, CIMultiDictProxy

from .serve import STUB_PAYER, STUB_PLAN_ID, fake_key, stub_plan

PROMPT = "What does an x402 access token prove?"
URL = "http://127.0.0.1:8080/agent"
TOKEN = "bench-token"
_HEADERS = CIMultiDictProxy(CIMultiDict({"Content-Type": "application/json"}))


class CannedStub:
    """The stub facilitator's answers without HTTP (a settle burns a credit, as there)."""

    def __init__(self) -> None:
        self.requests = 0
        self.remaining = 10**12

    def answer(self, url: str) -> dict[str, Any]:
        if url.endswith("/x402/verify"):
            self.requests += 1
            return {
                "isValid": True,
                "payer": STUB_PAYER,
                "network": "eip155:84532",
                "agentRequestId": f"req-{self.requests}",
            }
        if url.endswith("/x402/settle"):
            self.remaining -= 1
            return {
                "success": True,
                "payer": STUB_PAYER,
                "network": "eip155:84532",
                "transaction": "0x" + "0" * 64,
                "creditsRedeemed": "1",
                "remainingBalance": str(self.remaining),
            }
        if "/balance/" in url:
            return {"planId": STUB_PLAN_ID, "balance": str(self.remaining), "isSubscriber": True}
        return stub_plan(STUB_PLAN_ID)


def canned_send(stub: CannedStub) -> Callable[..., Awaitable[Any]]:
    """A stand-in for ``ApiTransport._send``: one loop turn, then the stub's answer."""

    async def send(
        self: Any, method: str, url: str, headers: Mapping[str, str], data: Any, left: float
    ) -> tuple[int, str, CIMultiDictProxy[str], bytes]:
        await asyncio.sleep(0)
        return 200, "OK", _HEADERS, json.dumps(stub.answer(url)).encode()

    return send


async def measure(rounds: int, n: int) -> dict[str, list[float]]:
    from svc_gateway.selling.handlers import default_handler
    from svc_gateway.selling.ways_in.agent import PromptAgent
    from svc_gateway.selling.ways_in.http import paid_response
    from svc_gateway.selling.ways_in.middleware import PaymentMiddleware
    from svc_gateway.service import transport

    from .chain import chain_envelope

    stub = CannedStub()
    transport.ApiTransport._send = canned_send(stub)  # type: ignore[method-assign]
    with tempfile.TemporaryDirectory(prefix="svc-own-work-") as tmp:
        settings = {
            "environment": "local",
            "baseUrl": "http://127.0.0.1:9/api/v1",
            "svcApiKey": fake_key(),
            "planId": STUB_PLAN_ID,
            "settleQueuePath": str(Path(tmp) / "queue.json"),
        }
        gate = PaymentMiddleware({"POST /agent": {"plan_id": STUB_PLAN_ID}}, settings)
        flow, agent = gate.flow, PromptAgent(default_handler)
        await gate.start()
        envelope = chain_envelope(STUB_PLAN_ID, URL)

        async def paid() -> web.Response:
            answer = await agent.serve(flow, PROMPT, TOKEN, URL, connected=lambda: True)
            assert answer.status == 200, answer
            return paid_response(answer)

        async def chain() -> web.Response:
            data = json.loads(json.dumps({"prompt": PROMPT}))  # as the request's body
            body = {"paymentRequired": envelope, "x402AccessToken": TOKEN, "maxAmount": "1"}
            json.dumps(body, separators=(",", ":")).encode()
            await asyncio.sleep(0)
            verdict = json.loads(json.dumps(stub.answer("/x402/verify")).encode())
            answer = await default_handler(data)
            settle = {**body, "agentRequestId": verdict["agentRequestId"]}
            json.dumps(settle, separators=(",", ":")).encode()
            await asyncio.sleep(0)
            json.loads(json.dumps(stub.answer("/x402/settle")).encode())
            return web.json_response(answer)

        sides: dict[str, Callable[[], Awaitable[web.Response]]] = {"paid": paid, "chain": chain}
        for side in sides.values():  # warm caches and pools
            for _ in range(500):
                await side()
        spent: dict[str, list[float]] = {name: [] for name in sides}
        for _ in range(rounds):
            for name, side in sides.items():
                start = time.process_time()
                for _ in range(n):
                    await side()
                spent[name].append((time.process_time() - start) / n * 1e6)
        await gate.close()
    return spent


def show_rounds(spent: Mapping[str, list[float]], unit: str) -> None:
    """Each side's best round and all its rounds, in µs ``unit``."""
    width = max(len(name) for name in spent)
    for name, values in spent.items():
        shown = ", ".join(f"{v:.1f}" for v in values)
        print(f"  {name:<{width}} best {min(values):7.1f} µs {unit}  ({shown})")


def extra_cost(spent: Mapping[str, list[float]], side: str, base: str) -> tuple[float, float]:
    """``side``'s cost over ``base``'s: their best rounds' difference (other tenants only ever
    add time), and the median of the rounds' differences (rounds interleaved, so paired)."""
    best = min(spent[side]) - min(spent[base])
    paired = statistics.median(s - b for s, b in zip(spent[side], spent[base], strict=True))
    return best, paired


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.own_work")
    parser.add_argument("-n", type=int, default=2000, help="requests per round")
    parser.add_argument("--rounds", type=int, default=15)
    args = parser.parse_args(argv)
    spent = asyncio.run(measure(args.rounds, args.n))
    show_rounds(spent, "per request")
    own, paired = extra_cost(spent, "paid", "chain")
    print(
        f"  our own work: {own:.1f} µs/request over the chain's (best rounds), "
        f"{paired:.1f} (median of the rounds' differences)"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
