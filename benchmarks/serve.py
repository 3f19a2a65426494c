"""One benchmark server per process: ``python -m benchmarks.serve KIND [options]``.

Each server binds 127.0.0.1 on a free port, prints one JSON line (``{"url": ...}``) on stdout
when it is ready, and serves until SIGTERM/SIGINT. Running every server in its own process
keeps the load generator, the facilitator and the server under test from sharing one GIL.

Kinds:
- ``stub``: a facilitator that answers plan GET, balance GET, ``/x402/verify`` and
  ``/x402/settle`` instantly with valid shapes (any token is accepted);
- ``bare``: a bare aiohttp handler returning the default agent's JSON (the ceiling);
- ``paid``: this plugin's paid endpoint (reference gateway, default agent) against
  ``--service`` (the stub or a sandbox), its state in ``--state-url`` (Redis) when given;
- ``sdk``: payments-py's FastAPI ``PaymentMiddleware`` under uvicorn, against the backend in
  ``NVM_BACKEND_URL`` (its ``custom`` environment);
- ``route``: this plugin's payment middleware (``build_payment_app``) gating ``POST /agent`` of
  an aiohttp app against ``--service``;
- ``x402``: the ``x402`` package's (2.x) FastAPI ``payment_middleware`` under uvicorn, with the
  exact EVM scheme, against the stub's x402 facilitator (``--facilitator``); its ready line
  also carries the payment header the load generator sends (the stub accepts any payment).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import itertools
import json
import os
import signal
import socket
import sys
import tempfile
import threading
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from aiohttp import web

HOST = "127.0.0.1"
AGENT_PATH = "/agent"
STUB_PLAN_ID = "1001"
STUB_PAYER = "0x" + "ab" * 20
STUB_OWNER = "0x" + "cd" * 20
X402_NETWORK = "eip155:84532"
STUB_BALANCE = 10**12


def _b64url(data: dict[str, Any]) -> str:
    raw = json.dumps(data, separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def fake_key(address: str = STUB_OWNER) -> str:
    """A well-formed ``local:<jwt>`` key for the stub (which checks no signature)."""
    header = _b64url({"alg": "HS256", "typ": "JWT"})
    claims = _b64url({"iss": address, "sub": address, "jti": "bench", "o11y": "bench"})
    return f"local:{header}.{claims}.c2lnbmF0dXJl"


def announce(url: str) -> None:
    """The ready line a benchmark server prints: its URL and pid (``procs.spawn`` reads it)."""
    sys.stdout.write(json.dumps({"url": url, "pid": os.getpid()}) + "\n")
    sys.stdout.flush()


# -- stub facilitator -----------------------------------------------------------------------


def stub_plan(plan_id: str) -> dict[str, Any]:
    return {
        "id": plan_id,
        "metadata": {
            "main": {"name": "Bench plan", "price": "1 USDC"},
            "plan": {"accessLimit": "credits"},
        },
        "registry": {
            "owner": STUB_OWNER,
            "price": {
                "isCrypto": True,
                "amounts": ["1000000"],
                "receivers": [STUB_OWNER],
                "tokenAddress": "0x036CbD53842c5426634e7929541eC2318f3dCF7e",
            },
            "credits": {
                "amount": "1000000000",
                "minAmount": "1",
                "maxAmount": "1",
                "durationSecs": "0",
                "isRedemptionAmountFixed": True,
            },
        },
    }


def token_payer(body: bytes) -> str:
    """The payer a verify body's token names (``authorization.from`` of a base64 JSON
    token), else :data:`STUB_PAYER`: the memory case sends many payers' tokens."""
    try:
        token = json.loads(body).get("x402AccessToken", "")
        if token.startswith("eyJ"):  # base64 JSON, not the load generator's plain token
            decoded = json.loads(base64.b64decode(token))
            return str(decoded["payload"]["authorization"]["from"])
    except (ValueError, KeyError, TypeError, AttributeError):
        pass
    return STUB_PAYER


def stub_app() -> web.Application:
    """The instant facilitator: every token is valid; like the real service, each settle
    burns one credit of the one payer's balance, which the balance read and the next settle's
    ``remainingBalance`` reflect (a balance that never moved would look like top-ups to the
    admission book, which re-reads a balance that rises: a round trip a real payer never
    causes)."""
    counter = itertools.count(1)
    remaining = [STUB_BALANCE]
    routes = web.RouteTableDef()

    @routes.get("/api/v1/protocol/plans/{planId}")
    async def plan(request: web.Request) -> web.Response:
        return web.json_response(stub_plan(request.match_info["planId"]))

    @routes.get("/api/v1/protocol/plans/{planId}/balance/{holder}")
    async def balance(request: web.Request) -> web.Response:
        return web.json_response(
            {
                "planId": request.match_info["planId"],
                "holderAddress": request.match_info["holder"],
                "balance": str(remaining[0]),
                "isSubscriber": True,
            }
        )

    @routes.post("/api/v1/x402/verify")
    async def verify(request: web.Request) -> web.Response:
        body = await request.read()
        return web.json_response(
            {
                "isValid": True,
                "payer": token_payer(body),
                "network": "eip155:84532",
                "agentRequestId": f"req-{next(counter)}",
            }
        )

    @routes.post("/api/v1/x402/settle")
    async def settle(request: web.Request) -> web.Response:
        await request.read()
        remaining[0] -= 1
        return web.json_response(
            {
                "success": True,
                "payer": STUB_PAYER,
                "network": "eip155:84532",
                "transaction": "0x" + "0" * 64,
                "creditsRedeemed": "1",
                "remainingBalance": str(remaining[0]),
            }
        )

    # the same stub speaks the x402 facilitator protocol (x402 package, v2) under /facilitator
    @routes.get("/facilitator/supported")
    async def supported(request: web.Request) -> web.Response:
        kind = {"x402Version": 2, "scheme": "exact", "network": X402_NETWORK}
        return web.json_response({"kinds": [kind], "extensions": [], "signers": {}})

    @routes.post("/facilitator/verify")
    async def x402_verify(request: web.Request) -> web.Response:
        await request.read()
        return web.json_response({"isValid": True, "payer": STUB_PAYER})

    @routes.post("/facilitator/settle")
    async def x402_settle(request: web.Request) -> web.Response:
        await request.read()
        return web.json_response(
            {
                "success": True,
                "payer": STUB_PAYER,
                "transaction": "0x" + "0" * 64,
                "network": X402_NETWORK,
            }
        )

    app = web.Application()
    app.add_routes(routes)
    return app


# -- bare handler ---------------------------------------------------------------------------


def bare_handler() -> Callable[[web.Request], Awaitable[web.Response]]:
    """The bare handler: the request's JSON in, the default agent, its JSON out (the agent
    imported once, not on each request)."""
    from svc_gateway.selling.handlers import default_handler

    async def agent(request: web.Request) -> web.Response:
        data = await request.json()
        return web.json_response(await default_handler(data))

    return agent


def bare_app() -> web.Application:
    """What the paid endpoint would cost without payments: parse JSON, run the agent."""
    app = web.Application()
    app.router.add_post(AGENT_PATH, bare_handler())
    return app


async def serve_app(app: web.Application, path: str = "") -> None:
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, HOST, 0)
    await site.start()
    port = runner.addresses[0][1]
    announce(f"http://{HOST}:{port}{path}")
    await _wait_for_signal()
    await runner.cleanup()


async def _wait_for_signal() -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    await stop.wait()


def enable_tracing() -> None:
    """Tracing on with a no-op exporter: the OpenTelemetry SDK records every span and drops
    it (what tracing costs the flow itself, without an exporter's I/O)."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult

    from svc_gateway.selling.flow.tracing import use_tracer_provider

    class Drop(SpanExporter):
        def export(self, spans: Any) -> SpanExportResult:
            return SpanExportResult.SUCCESS

    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(Drop()))
    use_tracer_provider(provider)


# -- our paid endpoint ----------------------------------------------------------------------


@contextmanager
def paid_gateway(
    service: str, key: str, plan_id: str, state_url: str | None = None
) -> Iterator[Any]:
    """The plugin registered on a reference gateway serving its own paid endpoint
    (paidEndpointPort 0) on the plugin loop, credentials in a throwaway folder; yields the
    registration's handle and closes it afterwards. With ``state_url`` its admission book,
    settle queue and stats live in that Redis."""
    import svc_gateway
    from svc_gateway.account.credentials import CredentialStore
    from svc_gateway.hosts.reference import ReferenceGateway

    gateway = ReferenceGateway(
        {
            "environment": "local",
            "baseUrl": service,
            "svcApiKey": key,
            "planId": plan_id,
            "enablePaidEndpoint": True,
            "paidEndpointHost": HOST,
            "paidEndpointPort": 0,
            "agentEndpointPath": AGENT_PATH,
            "creditsPerRequest": 1,
            **({"stateUrl": state_url} if state_url else {}),
        }
    )
    with tempfile.TemporaryDirectory(prefix="svc-bench-") as tmp:
        store = CredentialStore(Path(tmp), use_keyring=False)
        handle = svc_gateway.register(gateway, store=store)
        try:
            yield handle
        finally:
            handle.close()


def serve_paid(service: str, key: str, plan_id: str, state_url: str | None = None) -> None:
    """The plugin's own paid endpoint (:func:`paid_gateway`); we only wait."""
    with paid_gateway(service, key, plan_id, state_url) as handle:
        announce(handle.extras["paid_endpoint"].url)
        stopped = threading.Event()
        for signum in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, lambda *_: stopped.set())
        stopped.wait()


# -- payments-py FastAPI middleware ---------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        port: int = sock.getsockname()[1]
        return port


def serve_uvicorn(
    app: Any, path: str, ready: Callable[[str], Awaitable[None]] | None = None
) -> None:
    """Serve the ASGI ``app`` under uvicorn on a free loopback port until stopped; once it
    listens, ``ready(url of path)`` (default: :func:`announce` the URL)."""
    import uvicorn

    port = _free_port()
    config = uvicorn.Config(app, host=HOST, port=port, log_level="warning", access_log=False)
    server = uvicorn.Server(config)
    url = f"http://{HOST}:{port}{path}"

    async def run() -> None:
        task = asyncio.create_task(server.serve())
        while not server.started:
            if task.done():
                await task
                return
            await asyncio.sleep(0.05)
        if ready is None:
            announce(url)
        else:
            await ready(url)
        await task

    asyncio.run(run())


def serve_sdk(key: str, plan_id: str) -> None:
    """payments-py 1.18 ``PaymentMiddleware`` (its documented setup) under uvicorn."""
    from fastapi import FastAPI, Request
    from payments_py import PaymentOptions, Payments  # type: ignore[import-untyped]
    from payments_py.x402.fastapi import PaymentMiddleware  # type: ignore[import-untyped]

    from svc_gateway.selling.handlers import default_handler

    payments = Payments.get_instance(PaymentOptions(nvm_api_key=key, environment="custom"))
    app = FastAPI()
    app.add_middleware(
        PaymentMiddleware,
        payments=payments,
        routes={f"POST {AGENT_PATH}": {"plan_id": plan_id, "credits": 1}},
    )

    async def agent(request: Request) -> dict[str, Any]:
        return await default_handler(await request.json())

    # postponed annotations are strings FastAPI cannot resolve for a local class
    agent.__annotations__["request"] = Request
    app.post(AGENT_PATH)(agent)

    serve_uvicorn(app, AGENT_PATH)


# -- our payment middleware on a route ------------------------------------------------------


def route_app(service: str, key: str, plan_id: str, queue: Path) -> web.Application:
    """The bare handler's app with ``POST /agent`` sold by ``build_payment_app``, its settle
    queue in ``queue`` (not the default file a concurrent run's route server may hold)."""
    from svc_gateway.selling import RouteConfig, build_payment_app

    settings = {
        "environment": "local",
        "baseUrl": service,
        "svcApiKey": key,
        "settleQueuePath": str(queue),
    }
    app = build_payment_app({f"POST {AGENT_PATH}": RouteConfig(plan_id=plan_id)}, settings)
    app.router.add_post(AGENT_PATH, bare_handler())
    return app


# -- the x402 package's FastAPI middleware --------------------------------------------------


def x402_payment_header(required: dict[str, Any]) -> str:
    """A v2 ``PAYMENT-SIGNATURE`` for the route's first requirement (signature unchecked by
    the stub facilitator; the middleware checks the payload matches what it asked for)."""
    accepted = required["accepts"][0]
    payload = {
        "x402Version": 2,
        "resource": required.get("resource"),
        "accepted": accepted,
        "payload": {
            "signature": "0x" + "11" * 65,
            "authorization": {
                "from": STUB_PAYER,
                "to": accepted["payTo"],
                "value": accepted["amount"],
                "validAfter": "0",
                "validBefore": "9999999999",
                "nonce": "0x" + "22" * 32,
            },
        },
    }
    raw = json.dumps(payload, separators=(",", ":")).encode()
    return base64.b64encode(raw).decode()


def serve_x402(facilitator: str) -> None:
    """x402 2.x ``payment_middleware`` (its documented FastAPI setup) under uvicorn."""
    from fastapi import FastAPI, Request
    from x402 import x402ResourceServer
    from x402.http import FacilitatorConfig, HTTPFacilitatorClient
    from x402.http.middleware.fastapi import payment_middleware
    from x402.mechanisms.evm.exact import ExactEvmServerScheme

    from svc_gateway.selling.handlers import default_handler

    server = x402ResourceServer(HTTPFacilitatorClient(FacilitatorConfig(url=facilitator)))
    server.register(X402_NETWORK, ExactEvmServerScheme())
    accepts = {"scheme": "exact", "payTo": STUB_OWNER, "price": "$0.01", "network": X402_NETWORK}
    middleware = payment_middleware({f"POST {AGENT_PATH}": {"accepts": accepts}}, server)
    app = FastAPI()

    async def gate(request: Request, call_next: Any) -> Any:
        return await middleware(request, call_next)

    gate.__annotations__["request"] = Request
    app.middleware("http")(gate)

    async def agent(request: Request) -> dict[str, Any]:
        return await default_handler(await request.json())

    agent.__annotations__["request"] = Request
    app.post(AGENT_PATH)(agent)

    async def ready(url: str) -> None:
        import httpx

        async with httpx.AsyncClient() as http:
            refused = await http.post(url, json={"prompt": "hello"})
        required = json.loads(base64.b64decode(refused.headers["payment-required"]))
        sys.stdout.write(json.dumps({"url": url, "token": x402_payment_header(required)}) + "\n")
        sys.stdout.flush()

    serve_uvicorn(app, AGENT_PATH, ready)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.serve")
    parser.add_argument("kind", choices=["stub", "bare", "paid", "sdk", "route", "x402"])
    parser.add_argument("--service", help="the service's {base_url} (paid, route)")
    parser.add_argument("--facilitator", help="the x402 facilitator's URL (x402)")
    parser.add_argument("--key", default="", help="the seller's API key (paid, sdk)")
    parser.add_argument("--plan", default=STUB_PLAN_ID, help="the plan sold (paid, sdk)")
    parser.add_argument("--state-url", help="share state through this Redis (paid)")
    parser.add_argument("--tracing", action="store_true", help="spans on, no-op exporter")
    args = parser.parse_args(argv)
    key = args.key or fake_key()
    if args.tracing:
        enable_tracing()
    if args.kind == "stub":
        asyncio.run(serve_app(stub_app()))
    elif args.kind == "bare":
        asyncio.run(serve_app(bare_app(), AGENT_PATH))
    elif args.kind == "paid":
        if not args.service:
            parser.error("paid needs --service")
        serve_paid(args.service, key, args.plan, args.state_url)
    elif args.kind == "route":
        if not args.service:
            parser.error("route needs --service")
        with tempfile.TemporaryDirectory(prefix="svc-bench-route-") as tmp:
            app = route_app(args.service, key, args.plan, Path(tmp) / "settle-queue.json")
            asyncio.run(serve_app(app, AGENT_PATH))
    elif args.kind == "x402":
        if not args.facilitator:
            parser.error("x402 needs --facilitator")
        serve_x402(args.facilitator)
    else:
        serve_sdk(key, args.plan)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
