"""The SDK's own paywall (payments-py 1.18 FastAPI ``PaymentMiddleware``) accepting sandbox tokens.

The FastAPI app runs under uvicorn on 127.0.0.1 in a background thread and is called over real
HTTP (httpx, so the SDK's brand shim on ``requests`` never touches these calls); the middleware
verifies and settles against the sandbox over loopback HTTP.
"""

from __future__ import annotations

import asyncio
import base64
import json
import threading
import time
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field

import httpx
import pytest
import uvicorn
from fastapi import FastAPI
from payments_py import Payments
from payments_py.common.types import AgentAPIAttributes, AgentMetadata, AuthType
from payments_py.x402.fastapi import PaymentMiddleware
from payments_py.x402.types import DelegationConfig, X402TokenOptions

from .conftest import NO_TOPUP_CENTS, Sdk, credits_plan, crypto_delegation


@dataclass
class Paywall:
    client: httpx.Client
    plan_id: str
    agent_id: str
    served: list[str] = field(default_factory=list)


def _serve(app: FastAPI) -> tuple[uvicorn.Server, threading.Thread, str]:
    server = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning", lifespan="off")
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not (server.started and server.servers):
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("the paywalled FastAPI app did not start")
        time.sleep(0.01)
    port = server.servers[0].sockets[0].getsockname()[1]
    return server, thread, f"http://127.0.0.1:{port}"


@pytest.fixture(scope="module")
def paywall(sdk: Sdk) -> Iterator[Paywall]:
    plan_id = credits_plan(sdk, "Paywalled", credits=3, per_request=1)
    app = FastAPI()
    server, thread, origin = _serve(app)
    api = AgentAPIAttributes.model_construct(
        endpoints=[{"POST": origin + "/ask"}], auth_type=AuthType.NONE
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        agent_id = str(
            sdk.builder.agents.register_agent(AgentMetadata(name="Paywalled"), api, [plan_id])[
                "agentId"
            ]
        )
    app.add_middleware(
        PaymentMiddleware,
        payments=sdk.builder,
        routes={"POST /ask": {"plan_id": plan_id, "credits": 1, "agent_id": agent_id}},
    )
    wall = Paywall(httpx.Client(base_url=origin, timeout=30), plan_id, agent_id)

    @app.post("/ask")
    async def ask(body: dict[str, str]) -> dict[str, str]:
        wall.served.append(body["q"])
        return {"answer": body["q"].upper()}

    try:
        with wall.client:
            yield wall
    finally:
        server.should_exit = True
        thread.join(timeout=10)


def _decode(header: str) -> dict[str, object]:
    loaded = json.loads(base64.b64decode(header))
    assert isinstance(loaded, dict)
    return loaded


def _subscriber(
    sdk: Sdk, wall: Paywall, *, limit_cents: int = 100_000, order: bool = True
) -> tuple[Payments, str]:
    buyer, _ = sdk.account("paywall buyer")
    if order:
        buyer.plans.order_plan(wall.plan_id)
    return buyer, crypto_delegation(buyer, limit_cents=limit_cents)


def _token(buyer: Payments, wall: Paywall, delegation: str, *, v3: bool = False) -> str:
    extra = (
        {
            "resource": str(wall.client.base_url).rstrip("/") + "/ask",
            "http_verb": "POST",
            "token_version": 3,
        }
        if v3
        else {}
    )
    options = X402TokenOptions(
        delegation_config=DelegationConfig(delegation_id=delegation), **extra
    )
    token = buyer.x402.get_x402_access_token(wall.plan_id, wall.agent_id, token_options=options)
    return str(token["accessToken"])


def test_paywall_without_a_token_answers_402_with_the_envelope(paywall: Paywall) -> None:
    answer = paywall.client.post("/ask", json={"q": "free?"})
    assert answer.status_code == 402
    envelope = _decode(answer.headers["payment-required"])
    accepts = envelope["accepts"]
    assert isinstance(accepts, list)
    assert accepts[0]["planId"] == paywall.plan_id
    assert "free?" not in paywall.served


def test_paywall_serves_and_charges_a_sandbox_v2_token(sdk: Sdk, paywall: Paywall) -> None:
    buyer, delegation = _subscriber(sdk, paywall)
    token = _token(buyer, paywall, delegation)
    answer = paywall.client.post("/ask", json={"q": "paid"}, headers={"payment-signature": token})
    assert answer.status_code == 200, answer.text
    assert answer.json() == {"answer": "PAID"}
    receipt = _decode(answer.headers["payment-response"])
    assert receipt["success"] is True
    assert receipt["creditsRedeemed"] == "1"
    assert int(buyer.plans.get_plan_balance(paywall.plan_id).balance) == 2


def test_paywall_refuses_a_forged_token_without_running_the_handler(
    paywall: Paywall,
) -> None:
    forged = base64.urlsafe_b64encode(b'{"x402Version":2}').decode().rstrip("=")
    answer = paywall.client.post(
        "/ask", json={"q": "forged"}, headers={"payment-signature": forged}
    )
    assert answer.status_code == 402
    assert "forged" not in paywall.served


def test_paywall_refuses_a_subscriber_with_no_credits_left(sdk: Sdk, paywall: Paywall) -> None:
    buyer, delegation = _subscriber(sdk, paywall, limit_cents=NO_TOPUP_CENTS)
    token = _token(buyer, paywall, delegation)
    statuses = [
        paywall.client.post(
            "/ask", json={"q": f"spend {i}"}, headers={"payment-signature": token}
        ).status_code
        for i in range(4)
    ]
    assert statuses == [200, 200, 200, 402]
    assert "spend 3" not in paywall.served
    assert int(buyer.plans.get_plan_balance(paywall.plan_id).balance) == 0


def test_paywall_withholds_the_answer_from_a_replayed_v3_token(sdk: Sdk, paywall: Paywall) -> None:
    buyer, delegation = _subscriber(sdk, paywall)
    token = _token(buyer, paywall, delegation, v3=True)
    first = paywall.client.post("/ask", json={"q": "once"}, headers={"payment-signature": token})
    assert first.status_code == 200, first.text
    replay = paywall.client.post("/ask", json={"q": "twice"}, headers={"payment-signature": token})
    assert replay.status_code == 402
    assert "TWICE" not in replay.text
    # the replay passed verify (a dry run) and ran the handler; settle refused it with
    # BCK.X402.0059, so the middleware withheld the answer (x402/fastapi/middleware.py:405-440)
    assert "twice" in paywall.served
    assert int(buyer.plans.get_plan_balance(paywall.plan_id).balance) == 2


# -- the SDK's MCP paywall: it decodes the token itself (payer and plan) before verifying -------


def test_mcp_paywall_serves_and_charges_a_sandbox_token(sdk: Sdk) -> None:
    plan_id = credits_plan(sdk, "MCP tools", credits=5, per_request=1)
    agent_id = str(
        sdk.builder.agents.register_agent(
            AgentMetadata(name="MCP server"), AgentAPIAttributes(), [plan_id]
        )["agentId"]
    )
    buyer, _ = sdk.account("mcp buyer")
    buyer.plans.order_plan(plan_id)
    token = buyer.x402.get_x402_access_token(
        plan_id,
        agent_id,
        token_options=X402TokenOptions(
            delegation_config=DelegationConfig(delegation_id=crypto_delegation(buyer))
        ),
    )["accessToken"]
    sdk.builder.mcp.configure({"agentId": agent_id, "serverName": "conformance"})
    calls: list[str] = []

    async def echo(args: dict[str, str], extra: object = None) -> dict[str, object]:
        calls.append(args["text"])
        return {"content": [{"type": "text", "text": args["text"]}]}

    tool = sdk.builder.mcp.with_paywall(
        echo, {"kind": "tool", "name": "echo", "credits": 1, "planId": plan_id}
    )
    extra = {"requestInfo": {"headers": {"authorization": f"Bearer {token}"}}}
    result = asyncio.run(asyncio.wait_for(tool({"text": "hello"}, extra), 30))
    assert calls == ["hello"]
    assert result["content"][0]["text"] == "hello"
    assert int(buyer.plans.get_plan_balance(plan_id).balance) == 4


def test_paywall_serves_a_buyer_with_no_credits_as_often_as_the_delegation_pays(
    sdk: Sdk, paywall: Paywall
) -> None:
    """Automatic top-up through the SDK's own middleware: a buyer who never ordered, with a
    delegation worth two orders (2 x 100 cents, 3 credits each), gets six answers, then 402."""
    buyer, delegation = _subscriber(sdk, paywall, limit_cents=200, order=False)
    token = _token(buyer, paywall, delegation)
    statuses = []
    for i in range(7):
        answer = paywall.client.post(
            "/ask", json={"q": f"topped {i}"}, headers={"payment-signature": token}
        )
        statuses.append(answer.status_code)
        if answer.status_code == 200 and i in (0, 3):
            receipt = _decode(answer.headers["payment-response"])
            assert receipt["success"] is True and receipt["orderTx"], receipt
    assert statuses == [200] * 6 + [402]
    assert "topped 6" not in paywall.served
    assert int(buyer.plans.get_plan_balance(paywall.plan_id).balance) == 0
    listed = [d for d in buyer.delegation.list_delegations() if d.id == delegation]
    assert listed[0].spent_cents == 200


def test_mcp_paywall_takes_a_v3_token_bound_to_the_tools_logical_uri(sdk: Sdk) -> None:
    """Issue 19: the agent registers `mcp://<server>/tools/<name>` endpoints; a v3 token bound
    to one tool pays for that tool through the SDK's MCP paywall, which verifies and settles
    with the logical URL plus the call's arguments (`mcp/utils/logical_url.py`) and POST."""
    plan_id = credits_plan(sdk, "MCP v3", credits=5, per_request=1)
    api = AgentAPIAttributes.model_construct(
        endpoints=[{"POST": "mcp://bound/tools/echo"}, {"POST": "mcp://bound/tools/shout"}],
        auth_type=AuthType.NONE,
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        agent_id = str(
            sdk.builder.agents.register_agent(AgentMetadata(name="MCP v3"), api, [plan_id])[
                "agentId"
            ]
        )
    buyer, _ = sdk.account("mcp v3 buyer")
    buyer.plans.order_plan(plan_id)
    delegation = crypto_delegation(buyer)

    def bound_to(tool: str) -> str:
        options = X402TokenOptions(
            delegation_config=DelegationConfig(delegation_id=delegation),
            resource=f"mcp://bound/tools/{tool}",
            http_verb="POST",
            token_version=3,
        )
        token = buyer.x402.get_x402_access_token(plan_id, agent_id, token_options=options)
        return str(token["accessToken"])

    sdk.builder.mcp.configure({"agentId": agent_id, "serverName": "bound"})
    calls: list[str] = []

    async def echo(args: dict[str, str], extra: object = None) -> dict[str, object]:
        calls.append(args["text"])
        return {"content": [{"type": "text", "text": args["text"]}]}

    tool = sdk.builder.mcp.with_paywall(
        echo, {"kind": "tool", "name": "echo", "credits": 1, "planId": plan_id}
    )

    def call(token: str, text: str) -> object:
        extra = {"requestInfo": {"headers": {"authorization": f"Bearer {token}"}}}
        return asyncio.run(asyncio.wait_for(tool({"text": text}, extra), 30))

    with pytest.raises(Exception):  # noqa: B017 - the paywall's own payment-required error
        call(bound_to("shout"), "wrong tool")
    assert calls == []
    result = call(bound_to("echo"), "right tool")
    assert calls == ["right tool"] and isinstance(result, dict)
    verify = sdk.recorder.last("POST", "/x402/verify").body
    assert verify["paymentRequired"]["resource"]["url"] == "mcp://bound/tools/echo?text=right+tool"
    assert int(buyer.plans.get_plan_balance(plan_id).balance) == 4


def test_mcp_tool_priced_above_a_fixed_plan_settles_for_the_plans_credits(sdk: Sdk) -> None:
    """A tool priced at 5 credits on a 1-credit fixed plan (the TS SDK's MCP e2e setup): the
    service does not refuse it; an amount outside the plan's range counts as its minimum."""
    plan_id = credits_plan(sdk, "MCP over-priced", credits=3, per_request=1)
    agent_id = str(
        sdk.builder.agents.register_agent(
            AgentMetadata(name="MCP five"), AgentAPIAttributes(), [plan_id]
        )["agentId"]
    )
    buyer, _ = sdk.account("mcp five buyer")
    buyer.plans.order_plan(plan_id)
    token = buyer.x402.get_x402_access_token(
        plan_id,
        agent_id,
        token_options=X402TokenOptions(
            delegation_config=DelegationConfig(
                delegation_id=crypto_delegation(buyer, limit_cents=NO_TOPUP_CENTS)
            )
        ),
    )["accessToken"]
    sdk.builder.mcp.configure({"agentId": agent_id, "serverName": "five"})

    async def work(args: dict[str, str], extra: object = None) -> dict[str, object]:
        return {"content": [{"type": "text", "text": "done"}]}

    tool = sdk.builder.mcp.with_paywall(
        work, {"kind": "tool", "name": "work", "credits": 5, "planId": plan_id}
    )
    extra = {"requestInfo": {"headers": {"authorization": f"Bearer {token}"}}}
    asyncio.run(asyncio.wait_for(tool({}, extra), 30))
    assert sdk.recorder.last("POST", "/x402/settle").body["maxAmount"] == "5"
    assert int(buyer.plans.get_plan_balance(plan_id).balance) == 2
