"""Per-chat-user wallets: two users in one reference gateway, each with their own account.

Over real loopback HTTP against the sandbox (onboarding through ``POST /organizations/account``).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import httpx
import pytest

from svc_gateway.chat.accounts import customer_email
from svc_gateway.host import Caller, CommandContext
from svc_gateway.sandbox import SandboxServer
from svc_gateway.service.client import ServiceClient
from tests.conftest import HostFactory, make_plan
from tests.tools.test_tools import err, ok

pytestmark = pytest.mark.asyncio

ADDRESS = re.compile(r"0x[0-9a-fA-F]{40}")


def address_in(reply: str) -> str:
    found = ADDRESS.search(reply)
    assert found, reply
    return found.group(0).lower()


def stored_keys(root: Path) -> list[str]:
    """Every chat user's key kept in a credentials file under ``root``."""
    keys = []
    for path in root.rglob("users/*/credentials.json"):
        keys += list(json.loads(path.read_text())["keys"].values())
    return keys


def file_modes(root: Path) -> set[int]:
    return {p.stat().st_mode & 0o777 for p in root.rglob("users/*/credentials.json")}


async def test_two_users_onboard_buy_and_see_only_their_own(
    make_host: HostFactory,
    sandbox: SandboxServer,
    builder: dict[str, str],
    builder_client: ServiceClient,
    plan_id: str,
    tmp_path: Path,
) -> None:
    gateway, handle = await make_host(builder["apiKey"], perUserAccounts=True, planId=plan_id)
    # a user without an account is told how to get one, and nothing runs as the operator
    assert "/svc_login new" in await gateway.context_text(sender="alice")  # the model is told
    nobody = err(await gateway.call_tool("svc_checkBalance", {}, sender="alice"), "not_logged_in")
    assert "/svc_login new" in nobody["hint"]
    assert "account" in nobody["message"]

    opened_a = await gateway.run_command("svc_login", "new", sender="alice")
    opened_b = await gateway.run_command("svc_login", "new", sender="bob")
    alice, bob = address_in(opened_a), address_in(opened_b)
    assert len({alice, bob, builder["address"].lower()}) == 3
    keys = stored_keys(tmp_path)
    assert len(keys) == 2
    assert file_modes(tmp_path) == {0o600}
    for reply in (opened_a, opened_b):
        assert all(key.split(":", 1)[1][:20] not in reply for key in keys)

    status = await gateway.run_command("svc_login", "status", sender="alice")
    assert alice in status.lower() and str(tmp_path) not in status

    # alice buys (quote, then confirm); bob does not
    quote = ok(await gateway.call_tool("svc_orderPlan", {}, sender="alice"))
    assert quote["confirmRequired"] is True
    assert ok(await gateway.call_tool("svc_checkBalance", {}, sender="alice"))["balance"] == "0"
    bought = ok(await gateway.call_tool("svc_orderPlan", {"confirm": True}, sender="alice"))
    assert bought["ordered"] is True and bought["balance"] == "100"

    a_bal = ok(await gateway.call_tool("svc_checkBalance", {}, sender="alice"))
    b_bal = ok(await gateway.call_tool("svc_checkBalance", {}, sender="bob"))
    assert (a_bal["address"].lower(), a_bal["balance"]) == (alice, "100")
    assert (b_bal["address"].lower(), b_bal["balance"]) == (bob, "0")
    # the service agrees: alice's own account holds the credits, bob's and the operator's not
    for holder, expected in ((alice, 100), (bob, 0)):
        assert (await builder_client.get_plan_balance(plan_id, holder)).balance == expected

    # bob can never read alice's balance through the plugin
    err(
        await gateway.call_tool("svc_checkBalance", {"address": alice}, sender="bob"),
        "not_your_account",
    )
    # each user's balance context is their own
    assert "100 credits" in await gateway.context_text(sender="alice")
    assert "0 credits" in await gateway.context_text(sender="bob")

    # a fiat plan: each user gets their own checkout link, which credits only them
    fiat = await make_plan(builder_client, builder["address"], fiat=True, credits=40)
    link_b = ok(
        await gateway.call_tool(
            "svc_orderFiatPlan", {"planId": fiat, "confirm": True}, sender="bob"
        )
    )["checkoutUrl"]
    link_a = ok(
        await gateway.call_tool(
            "svc_orderFiatPlan", {"planId": fiat, "confirm": True}, sender="alice"
        )
    )["checkoutUrl"]
    assert link_a != link_b
    async with httpx.AsyncClient() as http:
        assert (await http.get(link_b)).status_code == 200
    assert (await builder_client.get_plan_balance(fiat, bob)).balance == 40
    assert (await builder_client.get_plan_balance(fiat, alice)).balance == 0

    # /svc_logout removes alice's key; bob's stays
    assert "removed" in await gateway.run_command("svc_logout", "", sender="alice")
    err(await gateway.call_tool("svc_checkBalance", {}, sender="alice"), "not_logged_in")
    assert ok(await gateway.call_tool("svc_checkBalance", {}, sender="bob"))["balance"] == "0"
    assert len(stored_keys(tmp_path)) == 1
    # onboarding again returns alice's same account (the organization's returning customer)
    again = await gateway.run_command("svc_login", "new", sender="alice")
    assert address_in(again) == alice
    assert ok(await gateway.call_tool("svc_checkBalance", {}, sender="alice"))["balance"] == "100"
    # the operator's own session was never touched
    assert handle.core.session is not None
    assert handle.core.session.address.lower() == builder["address"].lower()


async def test_a_user_links_their_own_key_and_the_operator_stays_the_operator(
    make_host: HostFactory,
    builder: dict[str, str],
    subscriber: dict[str, str],
    plan_id: str,
) -> None:
    gateway, handle = await make_host(
        builder["apiKey"],
        perUserAccounts=True,
        planId=plan_id,
        operatorIds=["terminal:owner", "mallory"],
    )
    reply = await gateway.run_command("svc_login", subscriber["apiKey"], sender="carol")
    assert subscriber["address"].lower() in reply.lower() and "delete" in reply
    assert subscriber["apiKey"] not in reply
    mine = ok(await gateway.call_tool("svc_checkBalance", {}, sender="carol"))
    assert mine["address"].lower() == subscriber["address"].lower()
    # an operator, and a host that names nobody, act as the gateway's own account
    for sender in ("owner", None):
        own = ok(await gateway.call_tool("svc_checkBalance", {}, sender=sender))
        assert own["address"].lower() == builder["address"].lower()
    # a bare sender id names nobody on a platform: "mallory" on the terminal is a chat user
    mallory = await gateway.call_tool("svc_checkBalance", {}, sender="mallory")
    assert err(mallory, "not_logged_in")
    # env: variables and the browser flow are the operator's, never a chat user's
    assert "operator" in await gateway.run_command("svc_login", "env:SVC_API_KEY", sender="dan")
    assert "/svc_login new" in await gateway.run_command("svc_login", "", sender="dan")
    assert handle.core.session is not None
    # a command typed at the reference host's console acts on the gateway's own account
    status = await gateway.run_command("svc_login", "status")
    assert builder["address"].lower() in status.lower() and "console" in status


async def test_a_command_without_a_sender_never_acts_as_the_operator(
    make_host: HostFactory,
    builder: dict[str, str],
    subscriber: dict[str, str],
    plan_id: str,
) -> None:
    """A host passes a chat command without a sender (a channel post, an anonymous admin):
    with per-user accounts it has no account; only the console flag or operatorIds act as
    the operator."""
    gateway, handle = await make_host(
        builder["apiKey"], perUserAccounts=True, planId=plan_id, operatorIds=["telegram:1"]
    )
    operator = builder["address"].lower()

    async def send(name: str, args: str = "", **who: Any) -> str:
        ctx = CommandContext(args=args, channel="telegram", **who)
        return await gateway.commands[name].handler(ctx)

    for sender in ({}, {"sender_id": ""}):
        assert "no payments account" in await send("svc_login", "status", **sender)
        assert operator not in (await send("svc_login", "status", **sender)).lower()
        assert "Only the gateway's operator" in await send("svc_earnings", **sender)
        assert "no payments account" in await send("svc_spend", **sender)
        refused = await send("svc_login", subscriber["apiKey"], **sender)
        assert "no payments account" in refused
        assert "no payments account" in await send("svc_logout", **sender)
        assert "no payments account" in await send("svc_login", "new", **sender)
    # the operator's key was neither replaced nor removed
    assert handle.core.session is not None and handle.core.session.address.lower() == operator
    # a caller in operatorIds, and the host's own console, are the operator
    assert operator in (await send("svc_login", "status", sender_id="1")).lower()
    assert "sold nothing yet" in await send("svc_earnings", sender_id="1")  # the operator's view
    assert operator in (await send("svc_login", "status", is_local_console=True)).lower()


async def test_reference_chat_lines_speak_as_users(
    make_host: HostFactory, builder: dict[str, str], plan_id: str
) -> None:
    gateway, _ = await make_host(builder["apiKey"], perUserAccounts=True, planId=plan_id)
    opened = await gateway.handle_line("@erin /svc_login new")
    assert opened is not None and "account is open" in opened
    answer: Any = await gateway.handle_line("@erin svc_checkBalance {}")
    assert answer is not None and address_in(answer) == address_in(opened)
    other = await gateway.handle_line("@frank svc_checkBalance {}")
    assert other is not None and "not_logged_in" in other


async def test_another_organizations_customer_is_not_handed_over(
    make_host: HostFactory, sandbox: SandboxServer, builder: dict[str, str], plan_id: str
) -> None:
    """The same chat identity onboarded by a second operator's organization: the service asks
    the account's owner to consent (202) and issues no key; nothing is stored."""
    first, _ = await make_host(builder["apiKey"], perUserAccounts=True, planId=plan_id)
    other = await sandbox.create_account("another operator")
    second, _ = await make_host(other["apiKey"], perUserAccounts=True, planId=plan_id)
    assert "account is open" in await first.run_command("svc_login", "new", sender="alice")
    reply = await second.run_command("svc_login", "new", sender="alice")
    assert "consent" in reply and not ADDRESS.search(reply)
    err(await second.call_tool("svc_checkBalance", {}, sender="alice"), "not_logged_in")


# the same sender id on channels that differ only in name, case, punctuation or where ":" falls
SAME_SENDER = [
    ("7", "telegram"),
    ("7", "discord"),
    ("7", "Slack"),
    ("7", "slack"),
    ("7", "team.a"),
    ("7", "team_a"),
    ("b:c", "a"),
    ("c", "a:b"),
]


async def test_identity_is_the_channel_and_the_sender(
    make_host: HostFactory,
    builder: dict[str, str],
    builder_client: ServiceClient,
    plan_id: str,
    tmp_path: Path,
) -> None:
    """Callers that differ only by channel are different people: their own account (onboarding
    e-mail), key and balance each, even where the channels fold alike."""
    gateway, handle = await make_host(builder["apiKey"], perUserAccounts=True, planId=plan_id)
    callers = [Caller(sender, channel) for sender, channel in SAME_SENDER]
    login = gateway.commands["svc_login"].handler
    addresses = []
    for caller in callers:
        ctx = CommandContext(args="new", sender_id=caller.sender_id, channel=caller.channel)
        addresses.append(address_in(await login(ctx)))
    assert len(set(addresses)) == len(callers)
    assert len(set(stored_keys(tmp_path))) == len(callers)
    domain = handle.core.config.customer_email_domain
    assert len({customer_email(c, domain) for c in callers}) == len(callers)
    assert len({c.identity for c in callers}) == len(callers)

    # the first one buys; nobody else's balance moves, and the credits are all accounted for
    check = gateway.tools["svc_checkBalance"].handler
    bought = ok(await gateway.tools["svc_orderPlan"].handler({"confirm": True}, callers[0]))
    assert bought["balance"] == "100"
    for caller, address in zip(callers, addresses, strict=True):
        mine = ok(await check({}, caller))
        assert mine["address"].lower() == address
        held = (await builder_client.get_plan_balance(plan_id, address)).balance
        assert int(mine["balance"]) == held == (100 if caller is callers[0] else 0)
    # conservation: granted (one order, 100) = balances + burned (nothing burned)
    total = sum([(await builder_client.get_plan_balance(plan_id, a)).balance for a in addresses])
    assert total == 100
