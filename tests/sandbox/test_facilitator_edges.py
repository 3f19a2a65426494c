"""Edge branches of the sandbox facilitator and ledger (issue 11): rows an operator removed
from the database by hand, an agent whose allow-list nothing arms, and a bucket that expires
between the balance check and the burn. Each checks what the seller or the ledger sees."""

from __future__ import annotations

from typing import Any

import pytest

from svc_gateway.sandbox import SandboxServer, facilitator
from svc_gateway.sandbox.context import STORE
from svc_gateway.sandbox.db import Store

from .support import Actor, Api, FakeClock, envelope


def store_of(server: SandboxServer) -> Store:
    store: Store = server.app[STORE]
    return store


async def funded(api: Api, owner: Actor, buyer: Actor, credits: int, **plan: object) -> str:
    plan_id = await api.plan(owner, credits=credits, **plan)
    assert (await api.order(buyer, plan_id)).status_code == 200
    return plan_id


def burns(store: Store) -> int:
    row = store.one("SELECT COUNT(*) AS n FROM burns")
    assert row is not None
    return int(row["n"])


async def test_a_token_whose_plan_was_removed_from_the_database_pays_nothing(
    api: Api, server: SandboxServer, owner: Actor, buyer: Actor
) -> None:
    plan_id = await funded(api, owner, buyer, 5)
    token = await api.token(buyer, plan_id)
    store = store_of(server)
    with store.tx():  # an operator deleted the plan from the sandbox's database file
        store.run("DELETE FROM plans WHERE id = ?", (plan_id,))
    verified = await api.verify(owner, token, plan_id)
    assert verified["isValid"] is False
    assert verified["invalidReason"] == "the token's plan no longer exists"
    settled = await api.settle_answer(owner, token, plan_id, None)
    assert settled.status_code == 200
    assert settled.json() == {
        "success": False,
        "errorReason": "the token's plan no longer exists",
        "transaction": "",
        "payer": buyer.address,
    }
    assert burns(store) == 0


async def test_a_token_whose_delegation_was_removed_from_the_database_pays_nothing(
    api: Api, server: SandboxServer, owner: Actor, buyer: Actor
) -> None:
    plan_id = await funded(api, owner, buyer, 5)
    delegation_id = await api.delegation(buyer)
    answer = await api.token_answer(buyer, plan_id, delegation_id)
    assert answer.status_code == 200, answer.text
    token = str(answer.json()["accessToken"])
    store = store_of(server)
    with store.tx():
        store.run("DELETE FROM delegations WHERE id = ?", (delegation_id,))
    verified = await api.verify(owner, token, plan_id)
    assert verified["isValid"] is False
    assert verified["invalidReason"] == "the token's delegation no longer exists"
    assert verified["payer"] == buyer.address
    settled = await api.settle_answer(owner, token, plan_id, None)
    assert settled.status_code == 200 and settled.json()["success"] is False
    assert settled.json()["errorReason"] == "the token's delegation no longer exists"
    assert await api.credits(plan_id, buyer) == 5
    assert burns(store) == 0


async def test_an_allow_list_nothing_arms_is_skipped_and_reports_no_match(
    api: Api, owner: Actor, buyer: Actor
) -> None:
    plan_id = await funded(api, owner, buyer, 5)
    pattern = "http://127.0.0.1:8402/svc/agent"
    agent_id = await api.agent(owner, [plan_id], endpoints=[{"POST": pattern}])
    token = await api.token(buyer, plan_id, agent_id=agent_id)  # v2, no resource.url
    paid = envelope(plan_id, agent_id=agent_id)  # and the envelope names no URL either
    verified = await api.verify(owner, token, plan_id, paid=paid)
    assert verified["isValid"] is True, verified
    assert verified["urlMatching"] is None
    assert verified["agentRequest"]["agentId"] == agent_id
    assert verified["agentRequest"]["urlMatching"] is None
    settled = await api.settle_answer(owner, token, plan_id, verified["agentRequestId"], paid=paid)
    assert settled.status_code == 200 and settled.json()["success"] is True
    assert await api.credits(plan_id, buyer) == 4


async def mint_expiring(
    api: Api, owner: Actor, plan_id: str, buyer: Actor, amount: int, duration: int
) -> None:
    body = {
        "planId": plan_id,
        "creditsAmount": amount,
        "creditsReceiver": buyer.address,
        "creditsDuration": duration,
    }
    answer = await api.http.post("/protocol/plans/mintExpirable", json=body, headers=owner.headers)
    assert answer.status_code == 200, answer.text


def expire_after_the_check(monkeypatch: pytest.MonkeyPatch, clock: FakeClock, secs: float) -> None:
    """The balance check passes, then time moves on before the burn (the race)."""
    checked = facilitator._assess

    def check_then_tick(*args: Any) -> Any:
        problem = checked(*args)
        clock.advance(secs)
        return problem

    monkeypatch.setattr(facilitator, "_assess", check_then_tick)


async def test_credits_expiring_between_check_and_burn_refuse_the_settle_and_burn_nothing(
    api: Api, owner: Actor, buyer: Actor, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    plan_id = await api.plan(owner, credits=1, high=5)
    await mint_expiring(api, owner, plan_id, buyer, 2, 100)
    token = await api.token(buyer, plan_id)
    verified = await api.verify(owner, token, plan_id, "2")
    assert verified["isValid"] is True
    expire_after_the_check(monkeypatch, clock, 101)
    settled = await api.settle_answer(owner, token, plan_id, verified["agentRequestId"], "2")
    assert settled.status_code == 200
    assert settled.json() == {
        "success": False,
        "errorReason": "insufficient credits",
        "transaction": "",
        "payer": buyer.address,
    }
    ledger = await api.ledger(plan_id, buyer)
    assert (ledger["burned"], ledger["auditBurned"], ledger["balance"]) == (0, 0, 0)
    assert ledger["granted"] == ledger["balance"] + ledger["burned"] + ledger["expired"]


async def test_a_refused_burn_leaves_the_credits_that_did_not_expire(
    api: Api, owner: Actor, buyer: Actor, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    plan_id = await api.plan(owner, credits=1, high=5)
    await mint_expiring(api, owner, plan_id, buyer, 2, 100)  # expires in the race
    await mint_expiring(api, owner, plan_id, buyer, 2, 1000)  # still live at the burn
    token = await api.token(buyer, plan_id)
    verified = await api.verify(owner, token, plan_id, "3")
    assert verified["isValid"] is True
    expire_after_the_check(monkeypatch, clock, 101)
    settled = await api.settle_answer(owner, token, plan_id, verified["agentRequestId"], "3")
    assert settled.json()["success"] is False
    assert await api.credits(plan_id, buyer) == 2  # the live bucket is untouched
    ledger = await api.ledger(plan_id, buyer)
    assert ledger["granted"] == ledger["balance"] + ledger["burned"] + ledger["expired"]
