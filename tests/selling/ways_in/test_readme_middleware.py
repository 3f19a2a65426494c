"""docs/selling.md's middleware example works as written: its Python block runs verbatim in its
own interpreter against the local sandbox, sells its two routes and leaves the free one free."""

from __future__ import annotations

import asyncio
import os
import socket
import sys
from pathlib import Path

import httpx

from svc_gateway.encoding import decode_b64_json
from tests.docs_recipes import MIDDLEWARE_APP, blocks
from tests.support.sellers import Seller, SellerFactory, make_seller_fixture  # noqa: F401


def example() -> str:
    ((_, text),) = blocks(MIDDLEWARE_APP)
    return text


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def test_the_docs_app_sells_two_routes_and_leaves_health_free(
    make_seller: SellerFactory, tmp_path: Path
) -> None:
    seller: Seller = await make_seller()
    port = free_port()
    env = {
        **os.environ,
        "SVC_API_KEY": seller.builder_key,
        "SVC_ENVIRONMENT": "local",
        "SVC_BASE_URL": seller.sandbox.base_url,
        "ASK_PLAN_ID": seller.fixed_plan,
        "SUMMARY_PLAN_ID": seller.dynamic_plan,
        "PORT": str(port),
        "SVC_GATEWAY_CONFIG_DIR": str(tmp_path),  # its settle queue file goes here
    }
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        example(),
        env=env,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        async with httpx.AsyncClient(base_url=base, timeout=20) as http:
            for _ in range(200):
                try:
                    health = await http.get("/health")
                    break
                except httpx.TransportError:
                    assert proc.returncode is None, "the docs' app exited"
                    await asyncio.sleep(0.05)
            assert health.status_code == 200 and health.json() == {"ok": True}
            unpaid = await http.post("/runs/wait", json={"question": "why"})
            assert unpaid.status_code == 402
            envelope = decode_b64_json(unpaid.headers["payment-required"])
            assert envelope is not None and envelope["resource"]["url"] == base + "/runs/wait"
            ask_token = await seller.token(seller.fixed_plan, seller.fixed_agent)
            asked = await http.post(
                "/runs/wait",
                json={"question": "why is the sky blue"},
                headers={"payment-signature": ask_token},
            )
            assert asked.json() == {"answer": "You asked 5 words."}
            ask_receipt = decode_b64_json(asked.headers["payment-response"])
            assert ask_receipt is not None and ask_receipt["creditsRedeemed"] == "2"
            doc_token = await seller.token(seller.dynamic_plan, seller.dynamic_agent)
            summed = await http.post(
                "/docs/d-7/summary",
                json={"text": "word " * 250},
                headers={"payment-signature": doc_token},
            )
            assert summed.json()["doc"] == "d-7"
            doc_receipt = decode_b64_json(summed.headers["payment-response"])
            assert doc_receipt is not None and doc_receipt["creditsRedeemed"] == "3"
    finally:
        proc.terminate()
        _, stderr = await proc.communicate()
    assert b"Traceback" not in stderr, stderr.decode(errors="replace")
    assert seller.builder_key.encode() not in stderr
    assert (await seller.ledger(seller.fixed_plan))["burned"] == 2
    assert (await seller.ledger(seller.dynamic_plan))["burned"] == 3
