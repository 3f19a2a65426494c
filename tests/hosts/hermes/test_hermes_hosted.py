"""A host tool metered through Hermes's ``tool_execution`` middleware, in a real ``hermes``
agent turn with a fake model, for two chat users of one gateway (hosted gateway, issue 20)."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

pytest.importorskip("hermes_cli")

from tests.sandbox.support import USDC

from .hermes_support import (
    SERVICE_VERSION,
    Sandbox,
    create_ordered_plan,
    plan_body,
    run_child,
    section,
)

pytestmark = pytest.mark.hermes
FINAL = "Here is your image."  # hermes_hosted.FINAL (a module of the child process)


def balance_of(sandbox: Sandbox, plan_id: str, holder: str) -> int:
    with httpx.Client(base_url=sandbox.base_url, timeout=15.0) as client:
        answer = client.get(
            f"/protocol/plans/{plan_id}/balance/{holder}",
            headers={"Service-Version": SERVICE_VERSION},
        )
        assert answer.status_code == 200
        return int(answer.json()["balance"])


def test_a_host_tool_is_metered_per_chat_user_inside_hermes(
    hermes_sandbox: Sandbox, tmp_path: Path
) -> None:
    plan_id = create_ordered_plan(hermes_sandbox, "Hermes metered tools")
    user = hermes_sandbox.subscriber.address
    before = balance_of(hermes_sandbox, plan_id, user)
    settings = {
        "environment": "local",
        "baseUrl": hermes_sandbox.base_url,
        "svcApiKey": hermes_sandbox.builder.api_key,  # the operator settles
        "planId": plan_id,
        "perUserAccounts": True,
        "meteredTools": {"image_*": 1},
        "defaultSpendingLimitCents": 1,  # no automatic top-up: a user without credits is short
        "approval": "model",  # metering inside Hermes is tested here, approvals elsewhere
    }
    run = run_child("hosted", tmp_path, settings, {"userKey": hermes_sandbox.subscriber.api_key})
    plugin = section(run, "discovery")["plugin"]
    assert plugin["enabled"] is True and plugin["error"] is None
    setup = section(run, "setup")
    assert setup["middleware"] == 1
    # user 42's own key, linked through the gateway (pre_gateway_dispatch named the sender)
    assert user.lower() in setup["linked"].lower() and "delete" in setup["linked"]

    paid = section(run, "paid_turn")
    assert paid["final"] == FINAL and paid["runs"] == 1
    assert '"image": "img-1"' in paid["tool_messages"][0]
    # charged exactly once, to user 42's own account, settled by the operator
    assert balance_of(hermes_sandbox, plan_id, user) == before - 1
    assert balance_of(hermes_sandbox, plan_id, hermes_sandbox.builder.address) == 0

    blocked = section(run, "blocked_turn")
    assert blocked["ran"] == 0  # user 77 has no account: the tool never ran
    assert "not_logged_in" in blocked["tool_messages"][0]
    assert "/svc_login new" in blocked["tool_messages"][0]

    onboarded = section(run, "onboarded_turn")
    assert "account is open" in onboarded["opened"]
    assert onboarded["ran"] == 0  # their own account, but no credits: blocked with the price
    assert '"insufficient_credits"' in onboarded["tool_messages"][0]
    assert '"price": 1' in onboarded["tool_messages"][0]
    new_address = onboarded["opened"].split("open: ", 1)[1].split(" ", 1)[0].lower()
    assert new_address in onboarded["status_77"].lower()
    assert new_address != user.lower()

    receipts = section(run, "receipts")
    assert "You paid 1 credit (" in receipts["spend_42"]
    assert "tool image_gen" in receipts["spend_42"]
    assert "1 settled, 0 queued, 0 lost" in receipts["earnings_cli"]
    assert user.lower() in receipts["earnings_cli"].lower()
    assert receipts["earnings_42"].startswith("Only the gateway's operator")
    assert hermes_sandbox.subscriber.api_key.split(":", 1)[1] not in run.stdout + run.stderr


def test_an_approved_metered_call_that_bought_the_plan_says_so_inside_hermes(
    hermes_sandbox: Sandbox, tmp_path: Path
) -> None:
    """Issue 44, item 6: in human mode a user with no credits approves the call's code (which
    names the plan's purchase) through Hermes's gateway; the call runs, and the tool message
    Hermes hands on carries the plugin's notice of the purchase in credits and money."""
    body = plan_body("Hermes USDC plan", hermes_sandbox.builder.address)
    body["priceConfig"]["tokenAddress"] = USDC  # a delegation can buy it (the native token: no)
    with httpx.Client(base_url=hermes_sandbox.base_url, timeout=15.0) as client:
        created = client.post(
            "/protocol/plans",
            json=body,
            headers={
                "Authorization": f"Bearer {hermes_sandbox.builder.api_key}",
                "Service-Version": SERVICE_VERSION,
            },
        )
    assert created.status_code < 300, created.text
    plan_id = str(created.json()["planId"])
    settings = {
        "environment": "local",
        "baseUrl": hermes_sandbox.base_url,
        "svcApiKey": hermes_sandbox.builder.api_key,
        "planId": plan_id,
        "perUserAccounts": True,
        "meteredTools": {"image_gen": 1},
        "approval": "human",
    }
    run = run_child("topup", tmp_path, settings, {})
    done = section(run, "approved_call")
    assert "buying the plan first" in done["asked"]["message"], done
    assert str(done["approved"]).startswith("Approved once"), done
    assert done["runs"] == 1, done
    (message,) = done["tool_messages"]
    result = json.loads(message)  # still the JSON Hermes's tool answered, one key more
    assert result["image"] == "img-1" and result["prompt"] == "a cat"
    assert result["svcNotice"] == (
        f"Paid by you: image_gen bought plan {plan_id} first (automatic top-up: 100 credits "
        "for 1.00 USD, within the code you approved for it), then used 1 credit (0.01 USD). "
        "/svc_spend lists both."
    )
    assert "bought 100 credits for 1.00 USD" in str(done["spend"]), done["spend"]
