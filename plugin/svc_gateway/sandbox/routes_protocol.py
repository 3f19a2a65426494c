"""Routes of the Protocol groups: plans, agents, orders, minting, balances (WIRE.md §2).

Handlers only read input, call one store function and shape the answer; every rule lives
in the store modules so it is the same whichever route reaches it.
"""

from __future__ import annotations

import re

from aiohttp import web

from . import agents as ag
from . import ledger
from . import organizations as orgs
from . import validation as v
from .context import API_PREFIX, caller, ok, store_of
from .db import Store
from .errors import bad_request
from .plan_input import plan_document
from .plans import insert_plan, list_plans, plan_view, require_plan
from .tokens import tx_hash

routes = web.RouteTableDef()
P = API_PREFIX + "/protocol"


def _plan_id(request: web.Request) -> str:
    return v.identifier(request.match_info["planId"], "planId")


# -- plans -----------------------------------------------------------------------------------


def _workspace(request: web.Request, address: str) -> str | None:
    """The organization a publish lands in (``X-Current-Org-Id``, else the caller's own)."""
    header = request.headers.get(orgs.ORG_HEADER) or None
    return orgs.active_org(store_of(request), address, header)


def _published(store: Store, org_id: str | None, actor: str, kind: str, item_id: str) -> None:
    with store.tx():
        orgs.record(store, org_id, f"{kind}.created", actor, {"kind": kind, "id": item_id})


@routes.post(P + "/plans")
async def register_plan(request: web.Request) -> web.Response:
    account = caller(request)
    body = await v.read_json(request)
    doc = plan_document(body)
    store = store_of(request)
    doc["orgId"] = _workspace(request, account.address)
    plan_id = insert_plan(store, account.address, doc)
    _published(store, doc["orgId"], account.address, "plan", plan_id)
    return ok({"planId": plan_id}, status=201)


@routes.get(P + "/plans")
async def my_plans(request: web.Request) -> web.Response:
    account = caller(request)
    paging = v.paging(request.query)
    total, plans = list_plans(store_of(request), account.address, paging)
    return ok(paging.envelope(total, "plans", [plan_view(p) for p in plans]))


@routes.get(P + "/plans/{planId}")
async def get_plan(request: web.Request) -> web.Response:
    return ok(plan_view(require_plan(store_of(request), _plan_id(request))))


@routes.post(P + "/plans/{planId}/order")
async def order_plan(request: web.Request) -> web.Response:
    account = caller(request)
    store = store_of(request)
    plan = require_plan(store, _plan_id(request))
    tx = ledger.order_plan(store, plan, account.address)
    return ok({"success": True, "txHash": tx})


def _body_plan(body: dict[str, object]) -> str:
    if body.get("planId") is None:
        raise bad_request("planId is required")
    return v.identifier(body.get("planId"), "planId")


@routes.post(P + "/plans/mint")
async def mint(request: web.Request) -> web.Response:
    """``{planId, amount, creditsReceiver}`` (payments_py ``mint_plan_credits``)."""
    account = caller(request)
    body = await v.read_json(request)
    store = store_of(request)
    plan_id = _body_plan(body)
    amount = v.bigint(body, "amount", low=1)
    receiver = v.address(body.get("creditsReceiver"), "creditsReceiver")
    plan = require_plan(store, plan_id)
    tx = ledger.mint(store, plan, account.address, receiver, amount, None)
    return ok({"success": True, "txHash": tx})


@routes.post(P + "/plans/mintExpirable")
async def mint_expirable(request: web.Request) -> web.Response:
    """``{planId, creditsAmount, creditsReceiver, creditsDuration}``; duration 0 = no expiry
    (a time plan then grants its own duration)."""
    account = caller(request)
    body = await v.read_json(request)
    store = store_of(request)
    plan_id = _body_plan(body)
    amount = v.bigint(body, "creditsAmount", low=1)
    receiver = v.address(body.get("creditsReceiver"), "creditsReceiver")
    duration = v.bigint(body, "creditsDuration", default=0)  # uint256
    plan = require_plan(store, plan_id)
    tx = ledger.mint(store, plan, account.address, receiver, amount, duration or None)
    return ok({"success": True, "txHash": tx})


@routes.post(P + "/plans/burn")
async def burn(request: web.Request) -> web.Response:
    """``{planId, creditsAmount}``: burn credits the caller holds."""
    account = caller(request)
    body = await v.read_json(request)
    store = store_of(request)
    plan_id = _body_plan(body)
    amount = v.bigint(body, "creditsAmount", low=1)
    plan = require_plan(store, plan_id)
    tx = ledger.burn_own(store, plan, account.address, amount)
    return ok({"success": True, "txHash": tx})


@routes.post(P + "/plans/redeem")
async def redeem(request: web.Request) -> web.Response:
    """``{agentRequestId, planId, redeemFrom, amount}``: the owner redeems a holder's credits."""
    account = caller(request)
    body = await v.read_json(request)
    store = store_of(request)
    plan_id = _body_plan(body)
    request_id = v.req_text(body, "agentRequestId", max_len=200)
    holder = v.address(body.get("redeemFrom"), "redeemFrom")
    amount = v.bigint(body, "amount", low=1)
    plan = require_plan(store, plan_id)
    return ok(ledger.redeem(store, plan, account.address, request_id, holder, amount))


@routes.get(P + "/plans/{planId}/balance/{holderAddress}")
async def balance(request: web.Request) -> web.Response:
    store = store_of(request)
    holder = v.address(request.match_info["holderAddress"], "holderAddress")
    plan = require_plan(store, _plan_id(request))
    return ok(ledger.balance_view(store, plan, holder))


@routes.get(P + "/plans/{planId}/agents")
async def agents_of_plan(request: web.Request) -> web.Response:
    store = store_of(request)
    paging = v.paging(request.query, page_size_alias=True)
    plan = require_plan(store, _plan_id(request))
    total, items = ag.agents_of_plan(store, plan.id, paging)
    return ok(paging.envelope(total, "agents", [ag.agent_view(store, a) for a in items]))


# -- agents ----------------------------------------------------------------------------------


@routes.post(P + "/agents")
async def register_agent(request: web.Request) -> web.Response:
    account = caller(request)
    body = await v.read_json(request)
    store = store_of(request)
    meta, api = ag.agent_document(body)
    plan_ids = ag.owned_plans(store, account.address, body.get("plans", []), "plans")
    org_id = _workspace(request, account.address)
    agent_id = ag.insert_agent(store, account.address, meta, api, plan_ids, org_id)
    _published(store, org_id, account.address, "agent", agent_id)
    return ok({"data": {"agentId": agent_id}, "txHash": tx_hash()}, status=201)


@routes.post(P + "/agents/plans")
async def register_agent_and_plan(request: web.Request) -> web.Response:
    account = caller(request)
    body = await v.read_json(request)
    store = store_of(request)
    plan_body = v.obj(body, "plan", "")
    agent_body = v.obj(body, "agent", "")
    doc = plan_document(plan_body, where="plan.", standalone=False)
    meta, api = ag.agent_document(agent_body, "agent.")
    doc["orgId"] = org_id = _workspace(request, account.address)
    with store.tx():
        plan_id = insert_plan(store, account.address, doc)
        agent_id = ag.insert_agent(store, account.address, meta, api, [plan_id], org_id)
        _published(store, org_id, account.address, "plan", plan_id)
        _published(store, org_id, account.address, "agent", agent_id)
    return ok({"data": {"agentId": agent_id, "planId": plan_id}, "txHash": tx_hash()}, status=201)


@routes.get(P + "/agents")
async def my_agents(request: web.Request) -> web.Response:
    account = caller(request)
    store = store_of(request)
    paging = v.paging(request.query)
    total, items = ag.list_agents(store, account.address, paging)
    return ok(paging.envelope(total, "agents", [ag.agent_view(store, a) for a in items]))


@routes.get(P + "/agents/{agentId}")
async def get_agent(request: web.Request) -> web.Response:
    store = store_of(request)
    agent = ag.require_agent(store, request.match_info["agentId"])
    return ok(ag.agent_view(store, agent))


@routes.put(P + "/agents/{agentId}")
async def update_agent(request: web.Request) -> web.Response:
    """``{metadataAttributes, agentApiAttributes}`` (payments_py ``update_agent_metadata``)."""
    account = caller(request)
    body = await v.read_json(request)
    meta, api = ag.agent_document(body)
    ag.update_agent(store_of(request), account.address, request.match_info["agentId"], meta, api)
    return ok({"success": True, "txHash": tx_hash()})


@routes.get(P + "/agents/{agentId}/plans")
async def plans_of_agent(request: web.Request) -> web.Response:
    store = store_of(request)
    paging = v.paging(request.query, page_size_alias=True)
    agent = ag.require_agent(store, request.match_info["agentId"])
    total, items = ag.plans_of_agent(store, agent.id, paging)
    return ok(paging.envelope(total, "plans", [plan_view(p) for p in items]))


@routes.post(P + "/agents/{agentId}/plan/{planId}")
async def add_plan(request: web.Request) -> web.Response:
    """Associate one of the caller's plans with one of the caller's agents (idempotent)."""
    account = caller(request)
    plan_id = v.identifier(request.match_info["planId"], "planId")
    ag.add_plan(store_of(request), account.address, request.match_info["agentId"], plan_id)
    return ok({"success": True, "txHash": tx_hash()})


@routes.delete(P + "/agents/{agentId}/plan/{planId}")
async def remove_plan(request: web.Request) -> web.Response:
    account = caller(request)
    plan_id = request.match_info["planId"]
    if not re.fullmatch(r"[0-9]{1,20}", plan_id):
        raise bad_request("planId must be an integer (plan ids are decimal numbers)")
    ag.remove_plan(store_of(request), account.address, request.match_info["agentId"], plan_id)
    return ok({"success": True})
