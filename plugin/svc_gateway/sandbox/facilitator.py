"""The facilitator: ``POST /x402/verify`` (a dry run) and ``POST /x402/settle`` (the burn).

Verify checks a token against the PaymentRequired envelope and the payer's balance and
reserves nothing: a seller may repeat it, and N verifies against a balance of 1 all pass.
It records the agent request (no amount) under a new ``agentRequestId`` for settle to name.
Settle re-checks everything, the balance included, and burns inside one transaction, so
concurrent settles never spend more than the balance. Settle is idempotent on
``agentRequestId``: the first successful answer is stored and replayed verbatim, burning
nothing more. A version 3 token is single use: its first settle spends its nonce and any
later settle under another ``agentRequestId`` fails with ``BCK.X402.0059``. Verify never
consults the spent nonces (as on the service, payments_py ``x402/fastapi/middleware.py``):
a replayed v3 token passes verify and the seller learns it was spent at settle.

A payer short of credits is topped up (:mod:`.topup`): verify counts one order through the
token's delegation, settle records it inside the burn's transaction and answers its
``orderTx``. Every settle counts one transaction on the delegation (its ``maxTransactions``);
one it cannot pay is refused with 403 ``BCK.X402.0023``, nothing ordered or burned.

``maxAmount`` is optional on both (as in the SDK). ``"0"`` means the plan's default, its
maximum credits per request (payments TS SDK commit 9c1148f: "the backend interpreted
maxAmount=0 as 'use plan default', burning maxCreditsPerRequest"); an absent ``maxAmount``
is read the same way (the SDKs send nothing else for "default"). On fixed plans min = max.
An amount outside the plan's ``[minAmount, maxAmount]`` is not refused: it counts as the
plan's minimum, as the service documents for dynamic charges ("if the service returns a
number outside this range, the credits charged will be the minimum of that range",
nevermined app_docs ``tutorials/advanced/20-dynamic-charge-credits.md``), which is what lets
an MCP tool priced above a fixed plan's credits settle (payments TS SDK MCP e2e tests).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from ..encoding import decode_b64_json
from . import validation as v
from .agents import Agent, get_agent, is_associated
from .db import Store
from .delegations import Delegation, count_transaction, get_delegation, transactions_left
from .errors import (
    ENDPOINT_NOT_ALLOWED,
    ENVELOPE_INVALID,
    REQUEST_MISMATCH,
    REQUEST_NOT_FOUND,
    TOKEN_ALREADY_USED,
    ApiError,
    bad_request,
    not_owner,
)
from .ledger import balance_view, burn, holding
from .permissions import InvalidToken, TokenInfo, read_token
from .plans import Plan, get_plan
from .tokens import time_ordered_uuid
from .topup import Shortfall, shortfall, top_up


@dataclass(frozen=True)
class PaymentCall:
    """A checked verify/settle body; ``amount`` is ``None`` when ``maxAmount`` was left out."""

    envelope: dict[str, Any]
    token: str
    amount: int | None
    agent_request_id: str | None


@dataclass(frozen=True)
class Approval:
    """A token that passed every check, with the matched envelope entry."""

    info: TokenInfo
    plan: Plan
    agent: Agent | None
    amount: int
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
    amount = None if body.get("maxAmount") is None else v.bigint(body, "maxAmount")
    return PaymentCall(envelope, token.strip(), amount, request_id or None)


def _resource_url(envelope: dict[str, Any]) -> str | None:
    resource = envelope.get("resource")
    url = resource.get("url") if isinstance(resource, dict) else None
    return url if isinstance(url, str) and url else None


def _same_resource(bound: str, url: str) -> bool:
    """A v3 token's URL against the envelope's: origin and path, the query ignored (the
    service's rule, payments TS SDK docs), so ``mcp://server/tools/name?args`` (the logical
    URL the SDKs' MCP paywall sends) is the tool ``mcp://server/tools/name``. A relative
    envelope URL compares paths."""
    if bound == url:
        return True
    want, got = urlsplit(bound), urlsplit(url)
    if got.scheme or got.netloc:
        same_origin = (want.scheme, want.netloc.lower()) == (got.scheme, got.netloc.lower())
        return same_origin and want.path.rstrip("/") == got.path.rstrip("/")
    return (want.path or "/").rstrip("/") == (got.path or "/").rstrip("/")


def _check_binding(info: TokenInfo, url: str | None, verb: object) -> None:
    """A v3 token pays only for the resource URL and verb it was minted for."""
    if info.version != 3:
        return
    if url is None or info.resource_url is None or not _same_resource(info.resource_url, url):
        raise InvalidToken("the access token is bound to another resource URL")
    # An envelope that names no verb is not checked against the token's: the SDKs' own MCP
    # paywall verifies without one (payments_py ``mcp/core/auth.py``), and a v3 token bound to
    # an MCP tool's logical URI must still pay for that tool. A named verb must match.
    if verb is None:
        return
    if not isinstance(verb, str) or verb.upper() != (info.http_verb or "").upper():
        raise InvalidToken("the access token is bound to another HTTP verb")


def approve(store: Store, info: TokenInfo, call: PaymentCall, *, fresh: bool) -> Approval:
    """Every check but the balance; ``fresh`` also checks token and delegation expiry."""
    now = store.now()
    if fresh and info.expires_at <= now:
        raise InvalidToken("access token expired")
    plan = get_plan(store, info.plan_id)
    if plan is None:
        raise InvalidToken("the token's plan no longer exists")
    # A token never outlives its delegation (its expiry is capped at the delegation's), so
    # the token expiry above also covers an expired delegation.
    if get_delegation(store, info.delegation_id) is None:
        raise InvalidToken("the token's delegation no longer exists")
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
    url = _resource_url(call.envelope)
    verb = extra.get("httpVerb")
    matched: tuple[str, str] | None = None
    if agent is not None and agent.endpoints:
        # The allow-list is armed only by a token that carries resource.url (v3, or a v2 token
        # minted with one); other tokens skip it, as the service does (payments_py
        # x402/token_request.py). The match is still reported when there is one.
        checked = url or info.resource_url
        if checked is not None:
            matched = agent.match(checked, verb if isinstance(verb, str) else None)
        if matched is None and info.resource_url is not None:
            raise ApiError(
                400,
                ENDPOINT_NOT_ALLOWED,
                f"resource.url {checked!r} matches no endpoint registered for agent {agent.id}",
                'Register the endpoint as {"POST": "<url>"} or send the registered URL',
            )
    _check_binding(info, url, verb)
    # Absent or "0" is the plan's default, its max credits per request (see module docstring).
    amount = plan.max_amount if not call.amount else call.amount
    if not plan.min_amount <= amount <= plan.max_amount:
        amount = plan.min_amount  # out of range: the plan's minimum (module docstring)
    return Approval(info, plan, agent, amount, *(matched or (None, None)))


def _assess(store: Store, approval: Approval) -> tuple[Delegation, Shortfall | None, bool]:
    """The token's delegation, why the payer cannot pay ``approval.amount`` (or ``None``),
    and whether paying takes a top-up order through the delegation (:mod:`.topup`)."""
    delegation = get_delegation(store, approval.info.delegation_id)
    assert delegation is not None  # approve() checked it exists
    if transactions_left(delegation) <= 0:
        reason = f"the delegation reached its maxTransactions ({delegation.max_transactions})"
        return delegation, Shortfall("budget", reason), False
    problem, needs_order = shortfall(
        store, approval.plan, approval.info.payer, approval.amount, delegation
    )
    return delegation, problem, needs_order


class _Rollback(Exception):
    """Undo a settle's top-up order when its burn fails; carries the failure answer."""

    def __init__(self, answer: dict[str, Any]) -> None:
        super().__init__("settle rolled back")
        self.answer = answer


def _nonce_spent(store: Store, info: TokenInfo) -> bool:
    if info.nonce is None:
        return False
    return store.one("SELECT 1 FROM spent_nonces WHERE nonce = ?", (info.nonce,)) is not None


def verify(store: Store, body: dict[str, Any]) -> dict[str, Any]:
    """Check the token, the envelope and the balance; reserve and burn nothing."""
    call = parse_call(body)
    try:
        info = read_token(store, call.token)
    except InvalidToken as error:
        return {"isValid": False, "invalidReason": str(error)}
    now = store.now()
    with store.tx():
        try:
            approval = approve(store, info, call, fresh=True)
            problem = _assess(store, approval)[1]
            if problem is not None:
                raise InvalidToken(problem.invalid_reason)
        except InvalidToken as error:
            return {"isValid": False, "invalidReason": str(error), "payer": info.payer}
        request_id = time_ordered_uuid(now)
        store.run(
            "INSERT INTO agent_requests (id, token_id, plan_id, payer, created_at, expires_at) "
            "VALUES (?, ?, ?, ?, ?, ?)",
            (request_id, info.jti, info.plan_id, info.payer, now, now + store.request_ttl_secs),
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
    try:
        return _settle_once(store, info, call)
    except _Rollback as undone:
        return undone.answer


def _settle_once(store: Store, info: TokenInfo, call: PaymentCall) -> dict[str, Any]:
    """One settle in one transaction: check, top up when short, burn, remember the answer."""
    with store.tx():
        request = None
        if call.agent_request_id is not None:
            request = _known_request(store, info, call.agent_request_id)
            if request["answer"] is not None:
                stored: dict[str, Any] = json.loads(request["answer"])
                return stored
            if request["expires_at"] <= store.now():
                return _failure("agent request expired: verify the token again", info.payer)
        try:
            # A request verified in time stays payable even if the token expires meanwhile.
            approval = approve(store, info, call, fresh=request is None)
        except InvalidToken as error:
            return _failure(str(error), info.payer)
        if _nonce_spent(store, info):
            raise ApiError(
                403,
                TOKEN_ALREADY_USED,
                "This access token was already settled (version 3 tokens are single use): "
                "mint a new token",
                "Withhold the answer; the buyer must mint a new token",
            )
        delegation, problem, needs_order = _assess(store, approval)
        if problem is not None:
            if problem.kind in ("budget", "expired"):
                raise problem.refusal()  # rolls back: nothing ordered, nothing burned
            return _failure(problem.invalid_reason, info.payer)
        order_tx = top_up(store, approval.plan, info.payer, delegation) if needs_order else None
        try:
            answer = _burn(store, approval, call.agent_request_id, order_tx)
        except ValueError as error:  # a bucket expired between the check and the burn
            raise _Rollback(_failure("insufficient credits", info.payer)) from error
        if call.agent_request_id is not None:
            store.run(
                "UPDATE agent_requests SET answer = ? WHERE id = ?",
                (json.dumps(answer), call.agent_request_id),
            )
    return answer


def _known_request(store: Store, info: TokenInfo, request_id: str) -> Any:
    request = store.one("SELECT * FROM agent_requests WHERE id = ?", (request_id,))
    if request is None:
        raise ApiError(
            404,
            REQUEST_NOT_FOUND,
            "Unknown agentRequestId",
            "Send the agentRequestId that verify returned",
        )
    if request["token_id"] != info.jti or request["plan_id"] != info.plan_id:
        raise bad_request(
            "This agentRequestId was verified for a different token or plan",
            code=REQUEST_MISMATCH,
        )
    return request


def _burn(
    store: Store, approval: Approval, request_id: str | None, order_tx: str | None
) -> dict[str, Any]:
    plan, info = approval.plan, approval.info
    redeemed = 0 if plan.is_time else approval.amount
    tx = burn(store, plan, info.payer, redeemed, request_id)
    count_transaction(store, info.delegation_id)
    if info.nonce is not None:
        store.run(
            "INSERT INTO spent_nonces (nonce, agent_request_id, spent_at) VALUES (?, ?, ?)",
            (info.nonce, request_id, store.now()),
        )
    answer = {
        "success": True,
        "payer": info.payer,
        "network": info.network,
        "transaction": tx,
        "creditsRedeemed": str(redeemed),
        "remainingBalance": str(holding(store, plan, info.payer).balance),
    }
    if order_tx is not None:
        answer["orderTx"] = order_tx
    return answer
