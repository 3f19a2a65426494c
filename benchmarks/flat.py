"""The rules, flat: what the paid path's money rules cost without the flow's structure.

``flat_app`` is the chain (:mod:`.chain`) with the paid endpoint's per-request rules written
inline in one handler, the way a single-purpose server would: the body read and bounded, the
token's shape, the plan's facts (a dict with an expiry) and the price, the replay rule (the
body's and the replay key's SHA-256), verify and its verdict, an in-process book (balance minus
credits in flight, a claim per request), the handler under a deadline, the client still there
before settle, settle and its result, the book closed with the service's remaining balance,
counters, and the ``payment-response`` receipt on a ``private`` answer. No layers: no flow, no
admitter or settler objects, no service client or transport (one ``aiohttp`` session, as the
chain), no pydantic models, no tracing hooks, no settle queue (it is not reached when settle
succeeds).

``python -m benchmarks.flat`` loads the chain, this and the paid endpoint side by side (pinned,
rotating 1-s rounds at 32 clients, as ``--only chain``) and prints each as a ratio of the chain:
the flat rules against the chain is what the rules themselves cost; the paid endpoint against
the flat rules is what the flow's structure costs on top. A measuring stick, not a product: it
keeps one plan, one route and a plain (reusable) token's rules.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import hashlib
import json
import time
from contextlib import ExitStack
from typing import Any

import aiohttp
from aiohttp import web

from . import floor, load, procs
from .chain import chain_envelope, facilitator_headers, pooled_client
from .serve import AGENT_PATH, STUB_PLAN_ID, fake_key, serve_app

EXCHANGE = aiohttp.ClientTimeout(total=10.0)
#: the app's counters (verified, settled, answered, refused)
COUNTS = web.AppKey("counts", dict[str, int])


def flat_app(service: str, plan_id: str) -> web.Application:
    """``POST /agent`` with the paid endpoint's rules inline (see the module's docstring)."""
    from svc_gateway.config import PluginConfig
    from svc_gateway.encoding import facilitator_body
    from svc_gateway.selling.flow.admission import MAX_TOKEN_CHARS, TOKEN_RE
    from svc_gateway.selling.handlers import default_handler

    config = PluginConfig.model_validate({})  # the flow's default body size and deadline
    max_body, handler_secs = config.max_body_bytes, config.handler_timeout_secs

    base = service.rstrip("/")
    verify_url, settle_url = f"{base}/x402/verify", f"{base}/x402/settle"
    headers = facilitator_headers(fake_key())
    state: dict[str, Any] = {}
    app = web.Application()
    client = pooled_client(app)
    #: plan → (expires at, smallest price, largest price)
    facts = {plan_id: (time.monotonic() + 3600.0, 1, 100)}
    #: (plan, payer) → [balance (None: not known yet), credits in flight]
    book: dict[tuple[str, str], list[Any]] = {}
    #: replay key → (body digest, answer) for single-use tokens; whether a token is single-use
    replays: dict[str, tuple[str, web.Response]] = {}
    single_use: dict[str, bool] = {}
    counts = {"verified": 0, "settled": 0, "answered": 0, "refused": 0}

    async def post(url: str, data: bytes) -> dict[str, Any]:
        async with client["session"].post(
            url, data=data, headers=headers, timeout=EXCHANGE
        ) as answer:
            raw = await answer.read()
            if answer.status != 200:
                raise web.HTTPBadGateway(text="the facilitator refused the call")
            parsed = json.loads(raw)
            if not isinstance(parsed, dict):
                raise web.HTTPBadGateway(text="the facilitator's answer is not an object")
            return parsed

    def refuse(reason: str) -> web.Response:
        counts["refused"] += 1
        return web.json_response(
            {"error": reason}, status=402, headers={"Cache-Control": "no-store"}
        )

    async def agent(request: web.Request) -> web.Response:
        if request.content_type != "application/json":
            return web.json_response({"error": "send JSON"}, status=415)
        body = await request.read()
        if len(body) > max_body:
            return web.json_response({"error": "body too large"}, status=413)
        data = json.loads(body)
        prompt = data.get("prompt") if isinstance(data, dict) else None
        if not isinstance(prompt, str):
            return web.json_response({"error": "no prompt"}, status=400)
        expires, least, most = facts[plan_id]
        if expires < time.monotonic():
            return web.json_response({"error": "plan facts expired"}, status=503)
        amount = min(max(1, least), most)
        wire = state.get("wire")
        if wire is None:
            envelope = chain_envelope(plan_id, str(request.url))
            wire = state["wire"] = json.dumps(envelope, separators=(",", ":")).encode()
        token = request.headers.get("payment-signature", "")
        if not token or len(token) > MAX_TOKEN_CHARS or not TOKEN_RE.fullmatch(token):
            return refuse("no valid payment-signature")
        digest = hashlib.sha256(body).hexdigest()
        key = hashlib.sha256(f"{token}\x00{AGENT_PATH}".encode()).hexdigest()
        paid = replays.get(key)
        if paid is not None and paid[0] == digest:
            return paid[1]
        verdict = await post(verify_url, facilitator_body(wire, token, amount))
        counts["verified"] += 1
        if verdict.get("isValid") is not True:
            return refuse(str(verdict.get("invalidReason") or "not accepted"))
        payer = str(verdict.get("payer") or "").lower()
        request_id = verdict.get("agentRequestId")
        account = book.get((plan_id, payer))
        if account is None:
            account = book[(plan_id, payer)] = [None, 0]
        if account[0] is not None and account[0] - account[1] < amount and account[1]:
            return refuse("insufficient credits")
        account[1] += amount
        try:
            async with asyncio.timeout(handler_secs):
                answer = await default_handler(data)
            transport = request.transport
            if transport is None or transport.is_closing():
                return web.Response(status=499)  # the client left: nothing settled
            done = await post(settle_url, facilitator_body(wire, token, amount, request_id))
        finally:
            account[1] -= amount
        if done.get("success") is not True:
            return refuse(str(done.get("errorReason") or "settle failed"))
        redeemed = int(done.get("creditsRedeemed") or 0)
        remaining = done.get("remainingBalance")
        if remaining is not None:
            account[0] = int(remaining)
        counts["settled"] += 1
        receipt = {
            "success": True,
            "transaction": done.get("transaction") or "",
            "network": done.get("network") or "",
            "payer": payer,
            "creditsRedeemed": str(redeemed),
            "remainingBalance": str(remaining or 0),
        }
        encoded = base64.b64encode(json.dumps(receipt, separators=(",", ":")).encode()).decode()
        response = web.json_response(
            answer, headers={"payment-response": encoded, "Cache-Control": "private"}
        )
        single = single_use.get(key)
        if single is None:  # a plain token is reusable: decided once per token and route
            single = single_use[key] = False
        if single:
            replays[key] = (digest, response)
        counts["answered"] += 1
        return response

    app.router.add_post(AGENT_PATH, agent)
    app[COUNTS] = counts
    return app


def compare(rounds: int, duration: float) -> dict[str, floor.Measured]:
    """The chain, the flat rules and the paid endpoint, pinned, ``rounds`` rotating rounds."""
    split = procs.cpu_split()
    server_cpus, load_cpus = split if split else (None, None)
    with ExitStack() as stack:
        stack.enter_context(procs.pinned(load_cpus))
        stub = str(stack.enter_context(procs.spawn(["-m", "benchmarks.chain", "--stub"]))["url"])
        service = ("--service", stub + "/api/v1")

        def up(label: str, args: list[str]) -> floor.Side:
            line = stack.enter_context(procs.spawn(args, cpus=server_cpus))
            return floor.Side(label, str(line["url"]), "bench-token", int(line["pid"]))

        sides = [
            up("the chain", ["-m", "benchmarks.chain", *service]),
            up("the rules, flat", ["-m", "benchmarks.flat", "--serve", *service]),
            up("paid endpoint", ["-m", "benchmarks.serve", "paid", *service]),
        ]
        for side in sides:
            load.load(side.url, side.token, 4, 1)
        return floor.medians(sides, floor.HEADLINE_C, rounds, duration)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.flat")
    parser.add_argument("--rounds", type=int, default=floor.CHAIN_ROUNDS)
    parser.add_argument("--duration", type=float, default=floor.CHAIN_SECS)
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--service", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.serve:
        asyncio.run(serve_app(flat_app(args.service, STUB_PLAN_ID), AGENT_PATH))
        return 0
    got = compare(args.rounds, args.duration)
    chain, flat, paid = got["the chain"], got["the rules, flat"], got["paid endpoint"]
    for label, side, base in (
        ("the rules, flat / the chain", flat, chain),
        ("paid endpoint / the chain", paid, chain),
        ("paid endpoint / the rules, flat", paid, flat),
    ):
        rate = floor.spread(floor.per_round(side, base))
        cpu = floor.spread(floor.per_round(side, base, cpu=True))
        print(f"  {label:<33} round by round: rate {rate}, CPU {cpu}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
