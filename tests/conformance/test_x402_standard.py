"""Our 402 is standard x402 v2 (issue 31): a route gated by ``build_payment_app``, served on
127.0.0.1 against the sandbox, judged by the x402 reference SDK (``x402``), by the public
conformance tool (``x402conf resource``), and paid through the service's own SDK: payments-py
reads our envelope from the 402 and verifies and settles with it.

The app runs on the sandbox's loop thread; the SDKs and ``httpx`` run in the test thread.
"""

from __future__ import annotations

import base64
import json
import socket
import subprocess
import sys
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from aiohttp import web
from payments_py import Payments
from payments_py.common.types import AgentAPIAttributes, AgentMetadata, AuthType, PlanMetadata
from payments_py.plans import get_erc20_price_config, get_fixed_credits_config
from payments_py.x402.types import DelegationConfig, X402PaymentRequired, X402TokenOptions

from svc_gateway.config import load_config
from svc_gateway.selling import RouteConfig, build_payment_app
from svc_gateway.selling.flow.plans import payment_deadline_secs

from .conftest import USDC, Sdk, crypto_delegation, payments_for

x402_http = pytest.importorskip("x402.http", reason="the test extra installs the x402 SDK")

PER_REQUEST = 3
SDK_ENTRY_KEYS = {"scheme", "network", "planId", "extra"}


@dataclass
class Gate:
    """A builder's app selling ``GET /report`` (3 credits a call) through our middleware."""

    origin: str
    plan_id: str
    agent_id: str
    seller: Payments
    seller_address: str
    settings: dict[str, Any]

    @property
    def url(self) -> str:
        return self.origin + "/report"


async def report(_request: web.Request) -> web.Response:
    return web.json_response({"report": "quarterly numbers"})


@pytest.fixture(scope="module")
def gate(sdk: Sdk, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gate]:
    created = sdk.loop.run(sdk.server.create_account("gate"))
    seller, address = payments_for(created["apiKey"]), str(created["address"])
    plan = seller.plans.register_credits_plan(
        PlanMetadata(name="Reports", description="x402"),
        get_erc20_price_config(1_000_000, USDC, address),
        get_fixed_credits_config(100, PER_REQUEST),
    )
    plan_id = str(plan["planId"])
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    origin = f"http://127.0.0.1:{sock.getsockname()[1]}"
    # the service's own endpoint shape ({"GET": url}); the SDK's Endpoint model cannot send it
    api = AgentAPIAttributes.model_construct(
        endpoints=[{"GET": origin + "/report"}], auth_type=AuthType.NONE
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        agent = seller.agents.register_agent(AgentMetadata(name="Reporter"), api, [plan_id])
    agent_id = str(agent["agentId"])
    queue = tmp_path_factory.mktemp("x402") / "settle-queue.json"
    settings = {
        "svcApiKey": created["apiKey"],
        "environment": "local",
        "baseUrl": sdk.server.base_url,
        "settleQueuePath": str(queue),
    }
    routes = {"GET /report": RouteConfig(plan_id=plan_id, agent_id=agent_id, credits=PER_REQUEST)}

    async def start() -> web.AppRunner:
        app = build_payment_app(routes, settings)
        app.router.add_get("/report", report)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        await web.SockSite(runner, sock).start()
        return runner

    runner = sdk.loop.run(start())
    try:
        yield Gate(origin, plan_id, agent_id, seller, address, settings)
    finally:
        sdk.loop.run(runner.cleanup())


def buyer_token(sdk: Sdk, gate: Gate) -> str:
    buyer, _address = sdk.account("gate-buyer")
    buyer.plans.order_plan(gate.plan_id)
    options = X402TokenOptions(
        delegation_config=DelegationConfig(delegation_id=crypto_delegation(buyer))
    )
    answer = buyer.x402.get_x402_access_token(gate.plan_id, gate.agent_id, token_options=options)
    return str(answer["accessToken"])


def raw_envelope(header: str) -> dict[str, Any]:
    decoded: dict[str, Any] = json.loads(base64.b64decode(header, validate=True))
    return decoded


def test_the_x402_sdk_reads_our_402_with_every_price_term(gate: Gate) -> None:
    unpaid = httpx.get(gate.url, timeout=30)
    assert unpaid.status_code == 402
    assert unpaid.headers["cache-control"] == "no-store"
    required = x402_http.decode_payment_required_header(unpaid.headers["payment-required"])
    assert required.x402_version == 2
    assert required.resource is not None and required.resource.url == gate.url
    (accept,) = required.accepts
    assert accept.scheme == "svc:erc4337" and accept.network == "eip155:84532"
    assert accept.amount == str(PER_REQUEST)
    assert accept.pay_to.lower() == gate.seller_address.lower()
    # CAIP-19: the plan's credits, an ERC-1155 token whose id is the plan id
    chain, contract, token_id = accept.asset.split("/")
    assert chain == "eip155:84532" and token_id == gate.plan_id
    assert contract.startswith("erc1155:0x") and len(contract) == len("erc1155:") + 42
    assert accept.max_timeout_seconds == payment_deadline_secs(load_config(gate.settings))
    assert accept.extra == {"version": "1", "agentId": gate.agent_id, "httpVerb": "GET"}
    # the service's own fields travel beside x402's
    assert raw_envelope(unpaid.headers["payment-required"])["accepts"][0]["planId"] == gate.plan_id


def test_x402conf_resource_passes_on_a_gated_route(gate: Gate, tmp_path: Path) -> None:
    pytest.importorskip("x402conf", reason="the test extra installs x402-conformance")
    run = subprocess.run(
        [sys.executable, "-m", "x402conf", "resource", "--fail-on-error", gate.url],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert run.returncode == 0, run.stdout + run.stderr


def test_payments_py_verifies_and_settles_with_the_envelope_of_our_402(
    sdk: Sdk, gate: Gate
) -> None:
    token = buyer_token(sdk, gate)
    header = httpx.get(gate.url, timeout=30).headers["payment-required"]
    required = X402PaymentRequired.model_validate(raw_envelope(header))
    verdict = gate.seller.facilitator.verify_permissions(required, token, str(PER_REQUEST))
    assert verdict.is_valid, verdict.invalid_reason
    sent = sdk.recorder.last("POST", "/x402/verify").body["paymentRequired"]
    assert set(sent["accepts"][0]) == SDK_ENTRY_KEYS  # x402's price terms never reach verify
    receipt = gate.seller.facilitator.settle_permissions(
        required, token, str(PER_REQUEST), agent_request_id=verdict.agent_request_id
    )
    assert receipt.success, receipt.error_reason
    assert set(sdk.recorder.last("POST", "/x402/settle").body["paymentRequired"]["accepts"][0]) == (
        SDK_ENTRY_KEYS
    )


def test_a_paid_answer_is_private_and_its_receipt_reads_as_x402(sdk: Sdk, gate: Gate) -> None:
    token = buyer_token(sdk, gate)
    paid = httpx.get(gate.url, headers={"payment-signature": token}, timeout=30)
    assert paid.status_code == 200, paid.text
    assert paid.json() == {"report": "quarterly numbers"}
    assert paid.headers["cache-control"] == "private"
    receipt = x402_http.decode_payment_response_header(paid.headers["payment-response"])
    assert receipt.success is True and receipt.transaction
    assert receipt.network == "eip155:84532"
