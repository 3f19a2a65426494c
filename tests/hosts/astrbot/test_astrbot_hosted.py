"""The svc plugin inside a real AstrBot 4.29 (offline, a fake model on loopback), as a hosted
gateway: per-user wallets from AstrBot's sender, the tools, the commands, the balance context and
an AstrBot tool of the host's own metered by the wrapped tool executor. These tests are about
paying, so the gateway runs with ``approval: "model"``; the person's approvals are
``test_astrbot_approvals.py``."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from svc_gateway.hosts.astrbot.names import CONTEXT_HEADER
from svc_gateway.tools import TOOL_NAMES
from tests.hosts.hermes.hermes_support import Sandbox
from tests.support import until

from .support import (
    PLAIN,
    AstrBotChild,
    ScriptedModel,
    balance_of,
    login,
    new_account,
    tool_message,
)

pytestmark = pytest.mark.astrbot

ALICE, BOB, CAROL = "1001", "1002", "1003"


@pytest.fixture(scope="module")
def astrbot(
    astr_sandbox: Sandbox, astr_plan: str, model: ScriptedModel, module_home: Path
) -> Iterator[AstrBotChild]:
    settings = {
        "environment": "local",
        "baseUrl": astr_sandbox.base_url,
        "svcApiKey": astr_sandbox.builder.api_key,  # the operator settles metered calls
        "planId": astr_plan,
        "perUserAccounts": True,
        "meteredTools": {"image_gen": 1, "imgae_gen": 2},  # the second one is a typo
        "defaultSpendingLimitCents": 1,  # no automatic top-up: a user without credits is short
        "approval": "model",  # paying, not approving (human: test_astrbot_approvals.py)
    }
    child = AstrBotChild(module_home, {"settings": settings, "model_url": model.base_url})
    assert child.ready["wrapped"], child.logs()[-4000:]
    assert not child.ready["failed"], child.ready["failed"]
    yield child
    stopped = child.close()
    assert stopped is not None and stopped["wrapped"] is False  # terminate() undid the wrap


def test_the_model_is_offered_the_nine_tools_with_their_schemas(
    astrbot: AstrBotChild, model: ScriptedModel
) -> None:
    answer = astrbot.send("hello there", "2001")
    assert answer["replies"] == [PLAIN]
    offered = model.tools_offered()
    assert set(TOOL_NAMES) <= set(offered)
    assert "image_gen" in offered  # the host's own tool sits beside ours
    schema = offered["svc_checkBalance"]["parameters"]
    assert schema["additionalProperties"] is False  # the pydantic schema reached it verbatim
    assert "planId" in schema["properties"]
    owners = astrbot.request(op="state")["owners"]
    assert {owners[name] for name in TOOL_NAMES} == {"data.plugins.svc.main"}


def test_a_metered_tools_entry_naming_no_astrbot_tool_is_warned_about(
    astrbot: AstrBotChild,
) -> None:
    """Issue 43, item 13: the reference chat's check, at AstrBot's first model request (every
    plugin's tools, the built-in and MCP ones known by then)."""
    astrbot.send("hello again", "2002")
    warned = [line for line in astrbot.logs().splitlines() if "meteredTools names" in line]
    assert len(warned) == 1, warned  # once, for the typo alone
    assert "'imgae_gen'" in warned[0] and "will never be charged" in warned[0]
    assert "image_gen" in warned[0]  # the host's tools, listed


async def test_start_up_checks_the_service_in_one_line(
    astrbot: AstrBotChild, astr_sandbox: Sandbox
) -> None:
    """Issue 44, item 7: the one start-up check runs on the plugin loop after initialize() and
    AstrBot's log gets one line saying the service answered."""

    def told() -> list[str]:
        return [line for line in astrbot.logs().splitlines() if "Start-up check" in line]

    await until(told)
    (line,) = told()
    origin = astr_sandbox.base_url.removesuffix("/api/v1")
    assert f"Start-up check: the service at {origin} answers (API " in line, line


def test_svc_login_links_each_sender_to_their_own_account(
    astrbot: AstrBotChild, astr_sandbox: Sandbox, model: ScriptedModel
) -> None:
    asked = len(model.requests)
    linked = login(astrbot, ALICE, astr_sandbox.subscriber.api_key)
    assert astr_sandbox.subscriber.address.lower() in linked.lower()
    other = new_account(astr_sandbox)
    assert other["address"].lower() in login(astrbot, BOB, other["apiKey"]).lower()
    alice = astrbot.send("/svc_login status", ALICE)["replies"][0]
    bob = astrbot.send("/svc_login status", BOB)["replies"][0]
    nobody = astrbot.send("/svc_login status", CAROL)["replies"][0]
    assert astr_sandbox.subscriber.address.lower() in alice.lower()
    assert other["address"].lower() in bob.lower()
    assert astr_sandbox.subscriber.address.lower() not in bob.lower()
    assert "no payments account" in nobody
    # the same sender id on another platform instance is somebody else
    elsewhere = astrbot.send("/svc_login status", ALICE, platform="discord")["replies"][0]
    assert "no payments account" in elsewhere
    assert len(model.requests) == asked  # commands answered: nothing reached the model
    assert astr_sandbox.subscriber.api_key.split(":", 1)[1] not in astrbot.logs()


def test_a_tool_call_is_answered_as_json_for_the_calling_sender(
    astrbot: AstrBotChild, astr_sandbox: Sandbox, astr_plan: str, model: ScriptedModel
) -> None:
    login(astrbot, ALICE, astr_sandbox.subscriber.api_key)
    call = json.dumps({"planId": astr_plan})
    answer = astrbot.send(f"CALL svc_checkBalance {call}", ALICE)
    result = json.loads(tool_message(model))  # JSON, never a Python repr
    assert result["planId"] == astr_plan
    assert astr_sandbox.subscriber.address.lower() in json.dumps(result).lower()
    assert answer["replies"][-1].startswith("RESULT ")
    bob = astrbot.send(f"CALL svc_checkBalance {call}", CAROL)
    assert "not_logged_in" in tool_message(model) or "/svc_login" in tool_message(model)
    assert bob["replies"]


def test_invented_arguments_are_refused_by_name(
    astrbot: AstrBotChild, astr_plan: str, model: ScriptedModel
) -> None:
    call = json.dumps({"planId": astr_plan, "plnaId": "x"})
    astrbot.send(f"CALL svc_checkBalance {call}", ALICE)
    error: dict[str, Any] = json.loads(tool_message(model))["error"]
    assert error["code"] == "invalid_params"
    assert "plnaId" in error["message"]


def test_the_balance_context_reaches_the_model_as_data_for_that_sender(
    astrbot: AstrBotChild, astr_sandbox: Sandbox, model: ScriptedModel
) -> None:
    login(astrbot, ALICE, astr_sandbox.subscriber.api_key)
    astrbot.send("what can I afford?", ALICE)
    system = model.system_prompt()
    assert CONTEXT_HEADER in system
    context = system.split(CONTEXT_HEADER, 1)[1]
    assert "AstrBot host test plan" in context and "balance" in context.lower()
    users = [m for m in model.requests[-1]["messages"] if m.get("role") == "user"]
    assert CONTEXT_HEADER not in json.dumps(users)  # in the system prompt, not the user's text
    astrbot.send("and me?", "2002")  # nobody logged in as 2002: not Alice's balances
    assert "AstrBot host test plan" not in model.system_prompt()


def test_a_metered_astrbot_tool_is_charged_once_per_successful_call(
    astrbot: AstrBotChild, astr_sandbox: Sandbox, astr_plan: str, model: ScriptedModel
) -> None:
    login(astrbot, ALICE, astr_sandbox.subscriber.api_key)
    user = astr_sandbox.subscriber.address
    before = balance_of(astr_sandbox, astr_plan, user)
    answer = astrbot.send('CALL image_gen {"prompt": "a cat"}', ALICE)
    assert answer["runs"] == [{"sender": ALICE, "prompt": "a cat"}]
    assert json.loads(tool_message(model))["prompt"] == "a cat"  # the tool's own answer
    assert balance_of(astr_sandbox, astr_plan, user) == before - 1
    answer = astrbot.send('CALL image_gen {"prompt": "a dog"}', ALICE)
    assert len(answer["runs"]) == 1
    assert balance_of(astr_sandbox, astr_plan, user) == before - 2
    # a call that fails is not charged, and the model sees the failure with its error's text
    answer = astrbot.send('CALL image_gen {"prompt": "fail"}', ALICE)
    assert len(answer["runs"]) == 1
    assert "the image service is down" in tool_message(model)
    assert balance_of(astr_sandbox, astr_plan, user) == before - 2
    spend = astrbot.send("/svc_spend", ALICE)["replies"][0]
    assert "tool image_gen" in spend and "2 call" in spend


def test_a_failed_metered_astrbot_tool_gives_the_model_its_failure_never_its_output(
    astrbot: AstrBotChild, astr_sandbox: Sandbox, astr_plan: str, model: ScriptedModel
) -> None:
    login(astrbot, ALICE, astr_sandbox.subscriber.api_key)
    user = astr_sandbox.subscriber.address
    before = balance_of(astr_sandbox, astr_plan, user)
    answer = astrbot.send('CALL image_gen {"prompt": "exit"}', ALICE)  # raises after its answer
    assert len(answer["runs"]) == 1
    message = tool_message(model)
    assert "the answer is 42" not in message  # the failure reaches the model, not the output
    error = json.loads(message)["error"]
    assert error["code"] == "tool_failed" and "RuntimeError: exit status 1" in error["message"]
    assert balance_of(astr_sandbox, astr_plan, user) == before  # nothing charged


def test_a_sender_short_of_credits_is_blocked_with_the_price_and_the_tool_never_runs(
    astrbot: AstrBotChild, astr_sandbox: Sandbox, model: ScriptedModel
) -> None:
    poor = new_account(astr_sandbox)  # their own account, with no credits on the plan
    login(astrbot, "3001", poor["apiKey"])
    answer = astrbot.send('CALL image_gen {"prompt": "a cat"}', "3001")
    assert answer["runs"] == []
    blocked = json.loads(tool_message(model))["error"]
    assert blocked["code"] == "insufficient_credits"
    assert blocked["price"] == 1 and blocked["balance"] == 0
    # nobody logged in: blocked, told how to log in, and the tool never ran
    answer = astrbot.send('CALL image_gen {"prompt": "a cat"}', "3002")
    assert answer["runs"] == []
    assert json.loads(tool_message(model))["error"]["code"] == "not_logged_in"


def test_a_reload_wraps_once_and_keeps_one_handler_per_command(
    astrbot: AstrBotChild, astr_sandbox: Sandbox, astr_plan: str, model: ScriptedModel
) -> None:
    reloaded = astrbot.request(op="reload", plugin="svc")
    assert reloaded["result"][0] is True, reloaded
    assert reloaded["wrapped"] is True and not reloaded["failed"]
    # the new instance: one reply per command (the old handlers went with the old instance)
    replies = login(astrbot, ALICE, astr_sandbox.subscriber.api_key)
    assert astr_sandbox.subscriber.address.lower() in replies.lower()
    user = astr_sandbox.subscriber.address
    before = balance_of(astr_sandbox, astr_plan, user)
    answer = astrbot.send('CALL image_gen {"prompt": "after reload"}', ALICE)
    assert len(answer["runs"]) == 1
    assert balance_of(astr_sandbox, astr_plan, user) == before - 1  # one wrapper, one charge
