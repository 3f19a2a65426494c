"""The ASGI payment middleware (issue 45) against payments-py 1.18's LangGraph middleware
(``payments_py.langsmith.PaymentMiddleware``) and against the ASGI chain, in one run:

    python -m benchmarks.langgraph_case [--duration 3] [--rounds 3] [--concurrency 32]

Three servers, each in its own process under uvicorn, serve the same app behind a different
gate, against the same stub facilitator (``benchmarks.serve stub``), under the same load
(``benchmarks.load``: wrk when installed), round-robin, the medians compared:

- ``ours``: :class:`svc_gateway.selling.ways_in.langgraph.PaymentMiddleware` (``POST /runs/wait``
  sold, 1 credit);
- ``sdk``: payments-py's ``PaymentMiddleware`` from ``payments_py.langsmith`` (its documented
  setup: ``Middleware(PaymentMiddleware, payments=..., routes=...)``, the ``custom`` environment
  at the stub);
- ``chain``: a pure ASGI middleware making the same two facilitator calls (verify, then settle
  with its ``agentRequestId``, the same payloads and headers, one pooled client) around the app,
  and nothing else: the floor of any gate.

The app is a stand-in for LangGraph's ``/runs/wait``: a Starlette ``StreamingResponse`` of the
run's final state, as langgraph-api answers it. Not the real server: its in-memory runtime polls
its queue every 0.5 s, which bounds every side at a few runs per second and hides the gate (the
real server is what the tests run: ``tests/selling/ways_in/langgraph``). Targets (issue 45):
ours at least 4× payments-py and at least 0.75× the chain. Needs the ``bench`` extra (payments-py,
uvicorn, starlette); run from the repository root in the main venv.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from . import procs
from .load import load
from .serve import HOST, STUB_PLAN_ID, fake_key, serve_uvicorn

RUNS_WAIT = "/runs/wait"
STATE = {"message": "hi", "echo": "echo: hi"}
TARGETS = {"sdk": 4.0, "chain": 0.75}


def runs_app() -> Any:
    """LangGraph's ``/runs/wait`` as it answers: a streamed JSON body of the final state."""
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import StreamingResponse
    from starlette.routing import Route

    async def runs_wait(request: Request) -> StreamingResponse:
        await request.body()

        async def body() -> Any:
            yield json.dumps(STATE).encode()

        return StreamingResponse(body(), media_type="application/json")

    return Starlette(routes=[Route(RUNS_WAIT, runs_wait, methods=["POST"])])


def chain_gate(app: Any, service: str) -> Any:
    """The floor: a pure ASGI middleware making the two facilitator calls and nothing else."""
    import aiohttp

    from .chain import POOL_SIZE, chain_envelope, facilitator_headers

    base = service.rstrip("/")
    headers = facilitator_headers(fake_key())
    held: dict[str, Any] = {}

    async def post(url: str, body: dict[str, Any]) -> Any:
        session = held.get("session")
        if session is None:
            connector = aiohttp.TCPConnector(limit=POOL_SIZE, limit_per_host=POOL_SIZE)
            session = held["session"] = aiohttp.ClientSession(connector=connector)
        data = json.dumps(body, separators=(",", ":")).encode()
        async with session.post(url, data=data, headers=headers) as response:
            return json.loads(await response.read())

    async def gate(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await app(scope, receive, send)
            return
        token = dict(scope["headers"]).get(b"payment-signature", b"").decode()
        required = held.get("envelope")
        if required is None:
            url = f"http://{HOST}{scope['path']}"
            required = held["envelope"] = chain_envelope(STUB_PLAN_ID, url)
        body = {"paymentRequired": required, "x402AccessToken": token, "maxAmount": "1"}
        verdict = await post(f"{base}/x402/verify", body)
        await app(scope, receive, send)
        await post(f"{base}/x402/settle", {**body, "agentRequestId": verdict["agentRequestId"]})

    return gate


def build(kind: str, service: str, queue: Path) -> Any:
    app = runs_app()
    if kind == "ours":
        from svc_gateway.selling import Payments
        from svc_gateway.selling.ways_in.langgraph import PaymentMiddleware, RouteConfig

        payments = Payments.connect(
            fake_key(), environment="local", base_url=service, settleQueuePath=str(queue)
        )
        routes = {f"POST {RUNS_WAIT}": RouteConfig(plan_id=STUB_PLAN_ID)}
        return PaymentMiddleware(app, payments=payments, routes=routes)
    if kind == "sdk":
        from payments_py import PaymentOptions, Payments  # type: ignore[import-untyped]
        from payments_py.langsmith import PaymentMiddleware as Theirs  # type: ignore[import-untyped]

        sdk = Payments.get_instance(PaymentOptions(nvm_api_key=fake_key(), environment="custom"))
        routes = {f"POST {RUNS_WAIT}": {"plan_id": STUB_PLAN_ID, "credits": 1}}
        return Theirs(app, payments=sdk, routes=routes)
    return chain_gate(app, service)


def serve(kind: str, service: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        serve_uvicorn(build(kind, service, Path(tmp) / "settle-queue.json"), RUNS_WAIT)


def servers(stack: ExitStack, stub: str) -> Iterator[tuple[str, str]]:
    service = stub + "/api/v1"
    for kind in ("ours", "sdk", "chain"):
        env = {"NVM_BACKEND_URL": stub} if kind == "sdk" else None
        args = ["-m", "benchmarks.langgraph_case", "--serve", kind, "--service", service]
        yield kind, str(stack.enter_context(procs.spawn(args, env))["url"])


def measure(duration: float, rounds: int, concurrency: int) -> dict[str, float]:
    token = "bench-token"
    rates: dict[str, list[float]] = {"ours": [], "sdk": [], "chain": []}
    with ExitStack() as stack:
        stub = stack.enter_context(procs.server("stub"))
        urls = dict(servers(stack, stub))
        for url in urls.values():  # warm each (plan read, pools)
            load(url, token, concurrency, 0.5)
        for round_ in range(rounds):
            order = list(urls)[round_ % 3 :] + list(urls)[: round_ % 3]
            for kind in order:
                result = load(urls[kind], token, concurrency, duration)
                if result.errors:
                    print(f"  {kind}: {result.errors} of {result.requests} answers failed")
                rates[kind].append(result.rps)
    return {kind: statistics.median(values) for kind, values in rates.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.langgraph_case")
    parser.add_argument("--serve", choices=("ours", "sdk", "chain"))
    parser.add_argument("--service", default="")
    parser.add_argument("--duration", type=float, default=3.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--concurrency", type=int, default=32)
    args = parser.parse_args(argv)
    if args.serve:
        serve(args.serve, args.service)
        return 0
    rps = measure(args.duration, args.rounds, args.concurrency)
    print(f"POST {RUNS_WAIT}, c={args.concurrency}, {args.rounds}×{args.duration:g} s, medians:")
    for kind in ("ours", "sdk", "chain"):
        print(f"  {kind:6} {rps[kind]:9.1f} answered/s")
    failed = False
    for other, target in TARGETS.items():
        ratio = rps["ours"] / rps[other] if rps[other] else float("inf")
        ok = ratio >= target
        failed |= not ok
        print(f"  ours / {other}: {ratio:.2f}× (target ≥ {target:g}×) {'ok' if ok else 'MISSED'}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
