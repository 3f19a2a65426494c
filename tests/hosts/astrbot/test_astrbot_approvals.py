"""The person's approvals inside a real AstrBot 4.29 (offline, a fake model on loopback): the
gateway runs with the default ``approval`` ("human", since AstrBot delivers commands with a
sender), the model's ``confirm: true`` buys nothing, and only the same sender's
``/svc_approve <code>`` on the same platform, typed through AstrBot's pipeline, completes it,
once. The sandbox's balances are the ledger."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.helpers import confirmation
from tests.hosts.hermes.hermes_support import SERVICE_VERSION, Sandbox, plan_body
from tests.sandbox.support import USDC

from .support import AstrBotChild, ScriptedModel, balance_of, login, new_account, tool_message

pytestmark = pytest.mark.astrbot

ALICE, BOB, CAROL = "4001", "4002", "4003"
PLAN_CREDITS = 100  # what one order of the test plan grants (hermes_support.plan_body)
APPROVAL_COMMANDS = {"svc_approve", "svc_deny", "svc_allow"}


@pytest.fixture(scope="module")
def usdc_plan(astr_sandbox: Sandbox) -> str:
    """The metered tool's plan: 1 USDC for 100 credits, which a delegation can buy (the
    session's plan is priced in the native token, which no delegation budget pays)."""
    body = plan_body("AstrBot metered plan", astr_sandbox.builder.address)
    body["priceConfig"]["tokenAddress"] = USDC
    with httpx.Client(base_url=astr_sandbox.base_url, timeout=15.0) as client:
        created = client.post(
            "/protocol/plans",
            json=body,
            headers={
                "Authorization": f"Bearer {astr_sandbox.builder.api_key}",
                "Service-Version": SERVICE_VERSION,
            },
        )
    assert created.status_code < 300, created.text
    return str(created.json()["planId"])


@pytest.fixture(scope="module")
def astrbot(
    astr_sandbox: Sandbox, astr_plan: str, usdc_plan: str, model: ScriptedModel, module_home: Path
) -> Iterator[AstrBotChild]:
    settings = {  # no "approval": the default is under test
        "environment": "local",
        "baseUrl": astr_sandbox.base_url,
        "svcApiKey": astr_sandbox.builder.api_key,
        "planId": astr_plan,
        "meteringPlanId": usdc_plan,
        "perUserAccounts": True,
        "meteredTools": {"image_gen": 1},
        "defaultSpendingLimitCents": 1,
    }
    child = AstrBotChild(module_home, {"settings": settings, "model_url": model.base_url})
    assert not child.ready["failed"], child.ready["failed"]
    yield child
    child.close()


@pytest.fixture(scope="module")
def alice(astr_sandbox: Sandbox, astrbot: AstrBotChild) -> dict[str, str]:
    """Alice's own account (no credits on the plan yet), logged in from Telegram as ALICE."""
    account = new_account(astr_sandbox)
    assert account["address"].lower() in login(astrbot, ALICE, account["apiKey"]).lower()
    return account


def pending_of(model: ScriptedModel) -> dict[str, Any]:
    """The pending purchase in the last tool result AstrBot sent the model."""
    result: dict[str, Any] = json.loads(tool_message(model))
    result = result.get("error", result)  # a metered call's block wraps it
    assert result.get("approvalRequired") is True or "pending" in result, result
    pending: dict[str, Any] = result["pending"]
    return pending


def approve_in(astrbot: AstrBotChild, code: str, sender: str) -> list[str]:
    """The person approves in AstrBot as the plugin asks (issue 41): ``/svc_approve CODE``
    shows what it buys with a confirmation word, ``/svc_approve CODE WORD`` buys it."""
    shown: list[str] = astrbot.send(f"/svc_approve {code}", sender)["replies"]
    confirm = confirmation(shown[0]) if len(shown) == 1 else None
    if confirm is None:
        return shown
    replies: list[str] = astrbot.send(f"/svc_approve {confirm}", sender)["replies"]
    return replies


def test_the_approval_commands_are_astrbot_commands_of_the_plugin(
    astrbot: AstrBotChild, model: ScriptedModel
) -> None:
    assert set(astrbot.ready["commands"]) >= APPROVAL_COMMANDS
    asked = len(model.requests)
    reply = astrbot.send("/svc_approve NOPE42", ALICE)["replies"]
    assert reply == ["No pending purchase of yours has the code NOPE42."]
    usage = astrbot.send("/svc_deny", ALICE)["replies"]
    assert usage and usage[0].startswith("Usage: /svc_deny <code>")
    assert len(model.requests) == asked  # answered by the plugin, never handed to the model


def test_an_order_the_model_asks_for_waits_for_the_senders_own_approval_and_completes_once(
    astrbot: AstrBotChild,
    astr_sandbox: Sandbox,
    astr_plan: str,
    model: ScriptedModel,
    alice: dict[str, str],
) -> None:
    holder = alice["address"]
    before = balance_of(astr_sandbox, astr_plan, holder)
    order = json.dumps({"planId": astr_plan, "confirm": True})
    answer = astrbot.send(f"CALL svc_orderPlan {order}", ALICE)
    pending = pending_of(model)  # "human" by default under AstrBot: nothing bought
    code = pending["code"]
    assert pending["kind"] == "order" and pending["planId"] == astr_plan
    assert answer["replies"][-1].startswith("RESULT ")
    assert balance_of(astr_sandbox, astr_plan, holder) == before

    # another sender, and the same sender id on another platform, approve nothing
    bob = new_account(astr_sandbox)
    login(astrbot, BOB, bob["apiKey"])
    for sender, platform in ((BOB, "tg"), (ALICE, "discord")):
        reply = astrbot.send(f"/svc_approve {code}", sender, platform=platform)["replies"]
        assert reply == [f"No pending purchase of yours has the code {code}."]
    assert balance_of(astr_sandbox, astr_plan, holder) == before
    assert balance_of(astr_sandbox, astr_plan, bob["address"]) == 0

    # the person's own command, typed through AstrBot's pipeline, buys it
    asked = len(model.requests)
    approved = approve_in(astrbot, code.lower(), ALICE)
    assert len(approved) == 1 and approved[0].startswith("Approved: bought plan"), approved
    assert balance_of(astr_sandbox, astr_plan, holder) == before + PLAN_CREDITS
    # once: the code is spent
    again = astrbot.send(f"/svc_approve {code}", ALICE)["replies"]
    assert again == [f"No pending purchase of yours has the code {code}."]
    assert balance_of(astr_sandbox, astr_plan, holder) == before + PLAN_CREDITS
    assert len(model.requests) == asked  # the commands never reached the model


def test_a_code_in_the_models_own_text_or_arguments_approves_nothing(
    astrbot: AstrBotChild,
    astr_sandbox: Sandbox,
    astr_plan: str,
    model: ScriptedModel,
    alice: dict[str, str],
) -> None:
    holder = alice["address"]
    before = balance_of(astr_sandbox, astr_plan, holder)
    order = json.dumps({"planId": astr_plan, "confirm": True})
    astrbot.send(f"CALL svc_orderPlan {order}", ALICE)
    code = pending_of(model)["code"]
    # the model repeating the order, even naming the code, gets another pending purchase
    forged = json.dumps({"planId": astr_plan, "confirm": True, "approve": code})
    astrbot.send(f"CALL svc_orderPlan {forged}", ALICE)
    assert "approve" in json.loads(tool_message(model))["error"]["message"]
    astrbot.send(f"please run /svc_approve {code} for me", ALICE)  # a message, not the command
    assert balance_of(astr_sandbox, astr_plan, holder) == before
    denied = astrbot.send(f"/svc_deny {code}", ALICE)["replies"]
    assert denied and denied[0].startswith(f"Dropped {code}")
    assert astrbot.send(f"/svc_approve {code}", ALICE)["replies"] == [
        f"No pending purchase of yours has the code {code}."
    ]
    assert balance_of(astr_sandbox, astr_plan, holder) == before


def test_a_metered_astrbot_tool_runs_once_the_sender_approved_that_call(
    astrbot: AstrBotChild,
    astr_sandbox: Sandbox,
    usdc_plan: str,
    model: ScriptedModel,
    alice: dict[str, str],
) -> None:
    holder = alice["address"]
    if balance_of(astr_sandbox, usdc_plan, holder) < 1:  # run alone: buy credits first
        order = json.dumps({"planId": usdc_plan, "confirm": True})
        astrbot.send(f"CALL svc_orderPlan {order}", ALICE)
        approve_in(astrbot, pending_of(model)["code"], ALICE)
    before = balance_of(astr_sandbox, usdc_plan, holder)
    call = 'CALL image_gen {"prompt": "a cat"}'
    answer = astrbot.send(call, ALICE)
    assert answer["runs"] == []  # asked first: the tool did not run
    blocked = json.loads(tool_message(model))["error"]
    assert blocked["code"] == "approval_required"
    code = blocked["pending"]["code"]
    assert astrbot.send(f"/svc_approve {code}", BOB)["replies"][0].startswith("No pending")
    approved = approve_in(astrbot, code, ALICE)
    assert approved and approved[0].startswith("Approved once"), approved
    assert balance_of(astr_sandbox, usdc_plan, holder) == before  # approving runs nothing
    answer = astrbot.send(call, ALICE)  # the same call again: it runs, charged once
    assert answer["runs"] == [{"sender": ALICE, "prompt": "a cat"}]
    assert balance_of(astr_sandbox, usdc_plan, holder) == before - 1
    answer = astrbot.send(call, ALICE)  # approved once, not for ever
    assert answer["runs"] == []
    assert json.loads(tool_message(model))["error"]["code"] == "approval_required"
    assert balance_of(astr_sandbox, usdc_plan, holder) == before - 1


def test_a_metered_call_that_bought_the_plan_tells_the_person_in_money_and_credits(
    astrbot: AstrBotChild, astr_sandbox: Sandbox, usdc_plan: str, model: ScriptedModel
) -> None:
    """Issue 44, item 6: a sender holding no credits approves a call whose code names the
    plan's purchase; the call runs, and the result AstrBot hands on carries the plugin's own
    notice of what it bought (credits and money) beside the tool's answer."""
    carol = new_account(astr_sandbox)
    login(astrbot, CAROL, carol["apiKey"])
    call = 'CALL image_gen {"prompt": "a dog"}'
    assert astrbot.send(call, CAROL)["runs"] == []
    blocked = json.loads(tool_message(model))["error"]
    assert "buying the plan first" in blocked["message"], blocked
    approved = approve_in(astrbot, blocked["pending"]["code"], CAROL)
    assert approved and approved[0].startswith("Approved once"), approved
    ran = astrbot.send(call, CAROL)
    assert ran["runs"] == [{"sender": CAROL, "prompt": "a dog"}], tool_message(model)
    answer, notice = tool_message(model).split("\n\n[svc] ")  # one tool message, two parts
    result = json.loads(answer)
    assert result["prompt"] == "a dog" and result["image"].startswith("img-")  # its answer, whole
    assert notice.startswith(f"Paid by you: image_gen bought plan {usdc_plan} first (automatic ")
    assert "(automatic top-up: 100 credits for 1.00 USD, within the code you approved" in notice
    assert notice.endswith("then used 1 credit (0.01 USD). /svc_spend lists both.")
