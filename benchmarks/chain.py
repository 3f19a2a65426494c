"""The chain: the floor of a verify → work → settle request on this machine.

A bare aiohttp handler that makes exactly the paid endpoint's two facilitator calls (the same
``x402/verify`` and ``x402/settle`` payloads, the same headers, one pooled client, the same stub
facilitator) around the default agent, and does nothing else: no admission book, no stats, no
tracing, no receipt, no replay cache, no deadlines, no retries. The paid endpoint and the route
middleware are reported as a ratio of it (``python -m benchmarks --only chain``). With
``--middleware`` the same two calls are made by an aiohttp middleware around the bare route
(aiohttp's own cost of running any middleware included): the floor of a gating middleware,
counted beside the route middleware by ``python -m benchmarks --only instructions``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
from typing import Any

import aiohttp
from aiohttp import web
from aiohttp.typedefs import Handler

from .serve import (
    AGENT_PATH,
    STUB_PLAN_ID,
    bare_handler,
    fake_key,
    serve_app,
    stub_app,
    stub_plan,
)

POOL_SIZE = 64  # the plugin's own pool size (svc_gateway.service.transport.POOL_SIZE)


def chain_envelope(plan_id: str, url: str) -> dict[str, Any]:
    """The ``paymentRequired`` the paid endpoint sends for the stub's plan, built once by the
    plugin's own envelope builder (so both sides carry the same payload)."""
    from svc_gateway.config import PluginConfig
    from svc_gateway.selling.flow.plans import PlanFacts, build_envelope, payment_deadline_secs
    from svc_gateway.service.models import Plan

    facts = PlanFacts.from_plan(Plan.model_validate(stub_plan(plan_id)), "local")
    deadline = payment_deadline_secs(PluginConfig.model_validate({}))
    envelope = build_envelope(facts, None, url, amount=1, max_timeout_secs=deadline)
    wire: dict[str, Any] = envelope.wire()
    return wire


def facilitator_headers(secret: str) -> dict[str, str]:
    """The headers the plugin's transport sends the facilitator (the whole key as bearer)."""
    from svc_gateway.config import DEFAULT_API_VERSION

    return {
        "Accept": "application/json",
        "Content-Type": "application/json",
        "Service-Version": DEFAULT_API_VERSION,
        "Authorization": f"Bearer {secret}",
    }


def pooled_client(app: web.Application) -> dict[str, aiohttp.ClientSession]:
    """One pooled client for ``app`` (the plugin's pool size, no cookie jar), as
    ``held["session"]`` from when it starts until it stops."""
    held: dict[str, aiohttp.ClientSession] = {}

    async def start(app: web.Application) -> None:
        connector = aiohttp.TCPConnector(limit=POOL_SIZE, limit_per_host=POOL_SIZE)
        held["session"] = aiohttp.ClientSession(
            connector=connector, cookie_jar=aiohttp.DummyCookieJar()
        )

    async def stop(app: web.Application) -> None:
        await held["session"].close()

    app.on_startup.append(start)
    app.on_cleanup.append(stop)
    return held


def chain_app(
    service: str, plan_id: str, key: str | None = None, *, middleware: bool = False
) -> web.Application:
    """``POST /agent``: verify, the default agent, settle; the agent's JSON back. With
    ``middleware``, the floor of a gating middleware: the same two calls made by an aiohttp
    middleware around a route whose handler is the bare one (the request's JSON in, the
    default agent, its JSON out), as :func:`benchmarks.serve.route_app` sells it."""
    from svc_gateway.selling.handlers import default_handler

    base = service.rstrip("/")
    verify_url, settle_url = f"{base}/x402/verify", f"{base}/x402/settle"
    headers = facilitator_headers(key or fake_key())
    state: dict[str, Any] = {}
    app = web.Application()
    client = pooled_client(app)

    async def post(url: str, body: dict[str, Any]) -> Any:
        data = json.dumps(body, separators=(",", ":")).encode()
        async with client["session"].post(url, data=data, headers=headers) as response:
            return json.loads(await response.read())

    def payment(request: web.Request) -> dict[str, Any]:
        token = request.headers.get("payment-signature", "")
        required = state.get("envelope")
        if required is None:
            required = state["envelope"] = chain_envelope(plan_id, str(request.url))
        return {"paymentRequired": required, "x402AccessToken": token, "maxAmount": "1"}

    async def agent(request: web.Request) -> web.Response:
        data = await request.json()
        body = payment(request)
        verdict = await post(verify_url, body)
        answer = await default_handler(data)
        await post(settle_url, {**body, "agentRequestId": verdict["agentRequestId"]})
        return web.json_response(answer)

    @web.middleware
    async def gate(request: web.Request, handler: Handler) -> web.StreamResponse:
        body = payment(request)
        verdict = await post(verify_url, body)
        response = await handler(request)
        await post(settle_url, {**body, "agentRequestId": verdict["agentRequestId"]})
        return response

    if middleware:
        app.middlewares.append(gate)
    app.router.add_post(AGENT_PATH, bare_handler() if middleware else agent)
    return app


COUNTS_PATH = "/_counts"


def _head_bytes(request: web.Request) -> int:
    """The bytes of a request's line and headers as sent (``name: value\\r\\n`` each)."""
    line = len(request.method) + len(request.raw_path) + len("  HTTP/1.1\r\n")
    return line + sum(len(k) + len(v) + 4 for k, v in request.raw_headers) + 2


def counted_stub_app() -> web.Application:
    """The stub facilitator (:func:`benchmarks.serve.stub_app`) counting, per path, the
    requests it answered and their bytes (line + headers, body) and its answers' body bytes;
    ``GET /_counts`` returns them (the chain case reads them around each side's load, so
    every side's facilitator calls per answered request are measured, not assumed)."""
    counts: dict[str, list[int]] = {}

    @web.middleware
    async def count(request: web.Request, handler: Handler) -> web.StreamResponse:
        if request.path == COUNTS_PATH:
            return await handler(request)
        body = await request.read()
        response = await handler(request)
        seen = counts.setdefault(request.path, [0, 0, 0, 0])
        seen[0] += 1
        seen[1] += _head_bytes(request)
        seen[2] += len(body)
        seen[3] += len(getattr(response, "body", b"") or b"")
        return response

    async def report(request: web.Request) -> web.Response:
        return web.json_response(counts)

    app = stub_app()
    app.middlewares.append(count)
    app.router.add_get(COUNTS_PATH, report)
    return app


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.chain")
    parser.add_argument("--service", help="the stub's {base_url}")
    parser.add_argument("--plan", default=STUB_PLAN_ID, help="the plan sold")
    parser.add_argument(
        "--stub", action="store_true", help="serve the counting stub facilitator instead"
    )
    parser.add_argument(
        "--middleware", action="store_true", help="the two calls made by a middleware"
    )
    args = parser.parse_args(argv)
    if args.stub:
        asyncio.run(serve_app(counted_stub_app()))
        return 0
    if not args.service:
        parser.error("the chain needs --service")
    app = chain_app(args.service, args.plan, middleware=args.middleware)
    asyncio.run(serve_app(app, AGENT_PATH))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
