"""Issue 26's paper cuts: counts agree with their nouns, an error line ends in one stop, a
buyer's "plan not found" does not send it to a tool that lists only sold plans, and an endpoint
at a URL its agent did not register is told so at start."""

from __future__ import annotations

import logging
import time
from pathlib import Path

import pytest

from svc_gateway.account.receipts import Receipt, spend_text
from svc_gateway.chat.context import BalanceEntry, format_line
from svc_gateway.hosts.reference import render
from svc_gateway.service.client import ServiceClient
from svc_gateway.service.models import AgentApi, AgentMetadata, PlanMetadata
from svc_gateway.service.pricing import crypto_price, fixed_credits
from svc_gateway.tools.base import ToolResult
from tests.conftest import USDC, HostFactory
from tests.support import until


def test_one_credit_is_singular_in_balances_and_spend() -> None:
    line = format_line(BalanceEntry("p1", "Starter", 1, True))
    assert "1 credit, subscribed" in line
    receipt = Receipt("agent", "0xpayer", None, "p1", 1, None, "queued", time.time())
    text = spend_text([receipt])
    assert "1 call" in text and "1 more are" not in text and "call(s)" not in text
    assert ", and 1 credit (price unknown) more is being settled" in text


def test_an_error_ending_in_a_question_gets_no_second_stop() -> None:
    result = ToolResult.error(
        "invalid_params", "priceAmount: unknown field; did you mean priceAmounts?", "Fix it."
    )
    line = render(result)
    assert "did you mean priceAmounts? Next: Fix it." in line
    assert "?." not in line
    plain = render(ToolResult.error("x", "Plan '1' not found.", "Check."))
    assert "Plan '1' not found. Next: Check." in plain


async def test_an_unknown_plan_does_not_send_a_buyer_to_svc_list_plans(
    make_host: HostFactory, subscriber: dict[str, str]
) -> None:
    gateway, _ = await make_host(subscriber["apiKey"])
    result = await gateway.call_tool("svc_checkBalance", {"planId": 123})
    hint = result.structuredContent["error"]["hint"]
    assert "402 answer or card" in hint
    assert "svc_listPlans lists only the plans you sell" in hint


async def test_an_endpoint_at_an_unregistered_url_is_warned_at_start(
    make_host: HostFactory,
    builder: dict[str, str],
    builder_client: ServiceClient,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING)
    ids = await builder_client.register_agent_and_plan(
        AgentMetadata(name="Elsewhere"),
        AgentApi(endpoints=[{"POST": "https://elsewhere.example/svc"}]),
        PlanMetadata(name="Elsewhere plan"),
        crypto_price([1_000_000], [builder["address"]], USDC),
        fixed_credits(10, 1),
    )
    _gateway, handle = await make_host(
        builder["apiKey"],
        enablePaidEndpoint=True,
        paidEndpointPort=0,
        planId=ids.plan_id,
        agentId=ids.agent_id,
        settleQueuePath=str(tmp_path / "q.json"),
    )
    url = handle.extras["paid_endpoint"].url

    def warned() -> list[str]:
        return [
            r.getMessage() for r in caplog.records if "not a registered endpoint" in r.getMessage()
        ]

    await until(lambda: bool(warned()))
    (line,) = warned()
    assert f"{url} is not a registered endpoint of agent {ids.agent_id}" in line
    assert "POST https://elsewhere.example/svc" in line


def test_the_docs_time_the_tests_as_ci_measures_them() -> None:
    root = Path(__file__).resolve().parents[1]
    for page in (root / "README.md", root / "docs" / "getting-started.md"):
        text = " ".join(page.read_text(encoding="utf-8").split())
        # CI's tests step took 9 min 36 s and 9 min 44 s on 2026-11-27; its fresh venv about 2
        assert "about 8 minutes" not in text and "about 4.5" not in text, page
        assert "CI's `.ci/run` runs this very command, read from" in text  # verbatim (issue 42)
        told = "about 2 minutes of install and 11 of tests on 2 cores, on two workers (`-n 2`"
        assert told in text
