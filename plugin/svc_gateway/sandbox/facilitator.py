"""The facilitator: ``POST /x402/verify`` (reserve, burn nothing) and ``/x402/settle`` (burn).

Verify records a hold of ``maxAmount`` under a new ``agentRequestId``; holds lower what the
next verify may approve, so concurrent verifies never approve more than the balance. Each
check-and-write runs synchronously inside one transaction, which makes it atomic. Settle is
idempotent on ``agentRequestId``: the first answer is stored and replayed verbatim.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from ..encoding import decode_b64_json
from . import validation as v
from .agents import Agent, get_agent, is_associated
from .db import Store
from .delegations import count_transaction, get_delegation
from .errors import (
    ENVELOPE_INVALID,
    REQUEST_MISMATCH,
    REQUEST_NOT_FOUND,
    SETTLE_AMOUNT_INVALID,
    ApiError,
    bad_request,
    not_owner,
)
from .ledger import balance_view, burn, held, holding
from .permissions import InvalidToken, TokenInfo, read_token
from .plans import Plan, get_plan


@dataclass(frozen=True)
class PaymentCall:
    """A checked verify/settle body."""

    envelope: dict[str, Any]
    token: str
    amount: int
    agent_request_id: str | None


@dataclass(frozen=True)
class Approval:
    """A token that passed every check, with the matched envelope entry."""

    info: TokenInfo
    plan: Plan
    agent: Agent | None
    url_matching: str | None
    verb_matching: str | None


def parse_call(body: dict[str, Any]) -> PaymentCall:
    raw = body.get("paymentRequired")
    envelope = decode_b64_json(raw) if isinstance(raw, str) else raw
    if not isinstance(envelope, dict) or not isinstance(envelope.get("accepts"), list):
        raise bad_request(
            "paymentRequired must be an x402 PaymentRequired envelope with an accepts list "
            "(a JSON object or its base64 encoding)",
            code=ENVELOPE_INVALID,
        )
    token = body.get("x402AccessToken")
    if not isinstance(token, str) or not token.strip() or len(token) > 16384:
        raise bad_request("x402AccessToken must be the access token string")
    request_id = body.get("agentRequestId")
    if request_id is not None and (not isinstance(request_id, str) or len(request_id) > 200):
        raise bad_request("agentRequestId must be the string verify returned")
    return PaymentCall(envelope, token.strip(), v.bigint(body, "maxAmount"), request_id or None)


def _path_matches(pattern: str, path: str) -> bool:
    """``:name`` matches one segment; a final ``*`` matches the rest."""
    want = pattern.rstrip("/").split("/")
    got = path.rstrip("/").split("/")
    for i, segment in enumerate(want):
        if segment == "*" and i == len(want) - 1:
            return len(got) >= i
        if i >= len(got) or not (segment.startswith(":") or segment == got[i]):
            return False
    return len(got) == len(want)


def _url_matches(pattern: str, url: str) -> bool:
    want, got = urlsplit(pattern), urlsplit(url)
    if got.scheme or got.netloc:
        if (want.scheme, want.netloc.lower()) != (got.scheme, got.netloc.lower()):
            return False
    elif not url.startswith("/"):
        return False
    return _path_matches(want.path or "/", got.path or "/")


def _endpoint(agent: Agent, envelope: dict[str, Any], verb: object) -> tuple[str, str] | None:
    """The registered endpoint the envelope's ``resource.url`` (and verb) falls under."""
    resource = envelope.get("resource")
    url = resource.get("url") if isinstance(resource, dict) else None
    if not isinstance(url, str) or not url:
        return None
    for item in agent.endpoints:
        if isinstance(verb, str) and verb and verb.upper() != item["verb"]:
            continue
        if _url_matches(item["url"], url):
            return item["url"], item["verb"]
    return None


def approve(store: Store, info: TokenInfo, call: PaymentCall, *, fresh: bool) -> Approval:
    """Every check but the balance; ``fresh`` also checks token and delegation expiry."""
    now = store.now()
    if fresh and info.expires_at <= now:
        raise InvalidToken("access token expired")
    plan = get_plan(store, info.plan_id)
    if plan is None:
        raise InvalidToken("the token's plan no longer exists")
    delegation = get_delegation(store, info.delegation_id)
    if delegation is None:
        raise InvalidToken("the token's delegation no longer exists")
    if fresh and delegation.expires_at <= now:
        raise InvalidToken("delegation expired")
    entry = next(
        (
            e
            for e in call.envelope["accepts"]
            if isinstance(e, dict)
            and str(e.get("planId")) == plan.id
            and e.get("scheme") == info.scheme
        ),
        None,
    )
    if entry is None:
        raise InvalidToken(
            f"no accepts entry of the PaymentRequired envelope is for plan {plan.id} "
            f"with scheme {info.scheme}"
        )
    raw_extra = entry.get("extra")
    extra: dict[str, Any] = raw_extra if isinstance(raw_extra, dict) else {}
    wanted_agent = extra.get("agentId")
    if wanted_agent not in (None, "") and wanted_agent != info.agent_id:
        raise InvalidToken("the access token was issued for a different agent")
    agent = get_agent(store, info.agent_id) if info.agent_id else None
    if info.agent_id and (agent is None or not is_associated(store, agent.id, plan.id)):
        raise InvalidToken("the token's agent no longer sells this plan")
    matched: tuple[str, str] | None = None
    if agent is not None and agent.endpoints:
        matched = _endpoint(agent, call.envelope, extra.get("httpVerb"))
        if matched is None:
            raise InvalidToken(
                "resource.url of the envelope matches no endpoint registered for the agent"
            )
    if not plan.min_amount <= call.amount <= plan.max_amount:
        raise InvalidToken(
            f"maxAmount {call.amount} is outside the plan's range "
            f"[{plan.min_amount}, {plan.max_amount}]"
        )
    return Approval(info, plan, agent, *(matched or (None, None)))


def _has_credit(store: Store, approval: Approval, amount: int) -> None:
    plan, payer = approval.plan, approval.info.payer
    state = holding(store, plan, payer)
    if plan.is_time:
        if not state.active:
            raise InvalidToken("no active access to this time plan: order it first")
        return
    available = state.balance - held(store, plan.id, payer)
    if available < amount:
        raise InvalidToken(
            f"insufficient credits: {max(available, 0)} available, {amount} requested"
        )


def verify(store: Store, body: dict[str, Any]) -> dict[str, Any]:
    """Check the token and reserve ``maxAmount``; burns nothing."""
    call = parse_call(body)
    try:
        info = read_token(store, call.token)
    except InvalidToken as error:
        return {"isValid": False, "invalidReason": str(error)}
    now = store.now()
    with store.tx():
        try:
            approval = approve(store, info, call, fresh=True)
            _has_credit(store, approval, call.amount)
        except InvalidToken as error:
            return {"isValid": False, "invalidReason": str(error), "payer": info.payer}
        request_id = str(uuid.uuid4())
        store.run(
            "INSERT INTO holds (id, plan_id, payer, token_jti, delegation_id, amount, network, "
            "created_at, expires_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                request_id,
                info.plan_id,
                info.payer,
                info.jti,
                info.delegation_id,
                str(call.amount),
                info.network,
                now,
                now + store.hold_ttl_secs,
            ),
        )
    agent = approval.agent
    return {
        "isValid": True,
        "payer": info.payer,
        "network": info.network,
        "agentRequestId": request_id,
        "urlMatching": approval.url_matching,
        "agentRequest": {
            "agentRequestId": request_id,
            "agentId": agent.id if agent else None,
            "agentName": agent.name if agent else None,
            "balance": balance_view(store, approval.plan, info.payer),
            "urlMatching": approval.url_matching,
            "verbMatching": approval.verb_matching,
            "batch": False,
        },
    }


def _failure(reason: str, payer: str | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"success": False, "errorReason": reason, "transaction": ""}
    if payer:
        out["payer"] = payer
    return out


def _burn(store: Store, approval: Approval, amount: int, hold_id: str | None) -> dict[str, Any]:
    plan, info = approval.plan, approval.info
    redeemed = 0 if plan.is_time else amount
    tx = burn(store, plan, info.payer, redeemed, hold_id)
    count_transaction(store, info.delegation_id)
    return {
        "success": True,
        "payer": info.payer,
        "network": info.network,
        "transaction": tx,
        "creditsRedeemed": str(redeemed),
        "remainingBalance": str(holding(store, plan, info.payer).balance),
    }


def settle(store: Store, caller: str, body: dict[str, Any]) -> dict[str, Any]:
    """Burn credits for a verified request; only the plan's owner may settle."""
    call = parse_call(body)
    try:
        info = read_token(store, call.token)
    except InvalidToken as error:
        return _failure(str(error))
    plan = get_plan(store, info.plan_id)
    if plan is None:
        return _failure("the token's plan no longer exists", info.payer)
    if plan.owner != caller:
        raise not_owner("plan (only the plan owner settles its requests)")
    with store.tx():
        if call.agent_request_id is None:
            try:
                approval = approve(store, info, call, fresh=True)
                _has_credit(store, approval, call.amount)
            except InvalidToken as error:
                return _failure(str(error), info.payer)
            return _burn(store, approval, call.amount, None)
        return _settle_hold(store, info, call)


def _settle_hold(store: Store, info: TokenInfo, call: PaymentCall) -> dict[str, Any]:
    hold = store.one("SELECT * FROM holds WHERE id = ?", (call.agent_request_id,))
    if hold is None:
        raise ApiError(
            404,
            REQUEST_NOT_FOUND,
            "Unknown agentRequestId",
            "Send the agentRequestId that verify returned",
        )
    if hold["token_jti"] != info.jti or hold["plan_id"] != info.plan_id:
        raise bad_request(
            "This agentRequestId was verified for a different token or plan",
            code=REQUEST_MISMATCH,
        )
    if hold["answer"] is not None:
        stored: dict[str, Any] = json.loads(hold["answer"])
        return stored
    if hold["expires_at"] <= store.now():
        return _failure("hold expired", info.payer)
    reserved = int(hold["amount"])
    plan = get_plan(store, info.plan_id)
    minimum = plan.min_amount if plan else 1
    if not minimum <= call.amount <= reserved:
        raise bad_request(
            f"maxAmount {call.amount} must be between the plan's minAmount {minimum} "
            f"and the {reserved} credits verify reserved",
            "Settle at most the maxAmount you verified; verify again to charge more",
            code=SETTLE_AMOUNT_INVALID,
        )
    try:
        approval = approve(store, info, call, fresh=False)
    except InvalidToken as error:
        return _failure(str(error), info.payer)
    if (
        not approval.plan.is_time
        and holding(store, approval.plan, info.payer).balance < call.amount
    ):
        return _failure("insufficient credits", info.payer)
    answer = _burn(store, approval, call.amount, hold["id"])
    store.run("UPDATE holds SET answer = ? WHERE id = ?", (json.dumps(answer), hold["id"]))
    return answer
