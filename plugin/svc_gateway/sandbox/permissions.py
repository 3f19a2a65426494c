"""x402 access tokens: issuing them (``POST /x402/permissions``) and reading them back.

A token is a JWT signed with the sandbox secret, so verify can tell a forged or altered
token from a real one; its payload has the SDK layout of WIRE.md §3.2 (``authorization``
under ``payload``), which both client-side decoders understand.
"""

from __future__ import annotations

import math
import uuid
from dataclasses import dataclass
from typing import Any

from ..encoding import is_address, token_authorization
from . import validation as v
from .agents import is_associated, require_agent
from .db import Store
from .delegations import usable_delegation
from .errors import (
    AGENT_PLAN_MISMATCH,
    DELEGATION_INLINE_DEPRECATED,
    DELEGATION_MISSING,
    DELEGATION_OTHER_PLAN,
    SCHEME_PLAN_MISMATCH,
    SCHEME_PROVIDER_MISMATCH,
    ApiError,
    bad_request,
)
from .plans import require_plan
from .tokens import fake_signature, sign, verify

SCHEMES = ("svc:erc4337", "svc:card-delegation")
NETWORKS: dict[str, tuple[str, ...]] = {
    "svc:erc4337": ("eip155:84532", "eip155:8453"),
    "svc:card-delegation": ("stripe", "braintree", "visa"),
}
DEFAULT_NETWORK = {"svc:erc4337": "eip155:84532", "svc:card-delegation": "stripe"}
TOKEN_TTL_SECS = 3600
#: Deprecated inline delegation fields (WIRE.md §3.1): refused with a hint, never honoured.
INLINE_FIELDS = (
    "cardId",
    "providerPaymentMethodId",
    "spendingLimitCents",
    "durationSecs",
    "currency",
    "planId",
    "merchantAccountId",
    "maxTransactions",
)


class InvalidToken(Exception):
    """The token cannot pay; the message is the ``invalidReason`` shown to the caller."""


@dataclass(frozen=True)
class TokenInfo:
    """What a genuine token grants."""

    jti: str
    payer: str
    plan_id: str
    scheme: str
    network: str
    agent_id: str | None
    delegation_id: str
    expires_at: float


def _delegation_id(body: dict[str, Any]) -> str:
    config = body.get("delegationConfig")
    if config is not None and not isinstance(config, dict):
        raise bad_request("delegationConfig must be an object")
    config = config or {}
    inline = [f for f in INLINE_FIELDS if config.get(f) is not None]
    if inline:
        raise bad_request(
            f"Inline delegation fields are no longer accepted ({', '.join(inline)})",
            "Create a delegation first with POST /delegation/create and send only "
            "delegationConfig.delegationId",
            code=DELEGATION_INLINE_DEPRECATED,
        )
    delegation_id = config.get("delegationId")
    if not isinstance(delegation_id, str) or not delegation_id.strip():
        raise bad_request(
            "The token request has no delegation (delegationConfig.delegationId)",
            "Create a delegation with POST /delegation/create (erc4337 + usdc for crypto plans, "
            "a card + usd for fiat plans) and send its delegationId",
            code=DELEGATION_MISSING,
        )
    return delegation_id.strip()


def issue_token(store: Store, payer: str, body: dict[str, Any]) -> str:
    """Check a token request (WIRE.md §3.1) and sign the token."""
    accepted = v.obj(body, "accepted", "")
    scheme = accepted.get("scheme") or "svc:erc4337"
    if scheme not in SCHEMES:
        raise bad_request(f"accepted.scheme must be one of {', '.join(SCHEMES)}")
    if accepted.get("planId") is None:
        raise bad_request("accepted.planId is required")
    plan_id = v.identifier(accepted.get("planId"), "accepted.planId")
    network = v.text(accepted, "network", "accepted.", required=False) or DEFAULT_NETWORK[scheme]
    if network not in NETWORKS[scheme]:
        raise bad_request(
            f"accepted.network {network!r} does not fit scheme {scheme}",
            f"Use one of {', '.join(NETWORKS[scheme])}",
        )
    extra = v.obj(accepted, "extra", "accepted.", required=False)
    raw_agent = extra.get("agentId")
    agent_id = (
        None if raw_agent in (None, "") else v.identifier(raw_agent, "accepted.extra.agentId")
    )
    delegation = usable_delegation(store, payer, _delegation_id(body))
    if delegation.scheme != scheme:
        raise bad_request(
            f"A {delegation.provider} delegation cannot back a {scheme} token",
            "Use an erc4337 delegation for svc:erc4337 and a card delegation "
            "(stripe, braintree) for svc:card-delegation",
            code=SCHEME_PROVIDER_MISMATCH,
        )
    plan = require_plan(store, plan_id)
    if plan.scheme != scheme:
        raise bad_request(
            f"Plan {plan.id} is paid with {plan.scheme}, not {scheme}",
            "Fiat plans (isCrypto false) take svc:card-delegation tokens; crypto plans take "
            "svc:erc4337",
            code=SCHEME_PLAN_MISMATCH,
        )
    if delegation.plan_id is not None and delegation.plan_id != plan.id:
        raise ApiError(403, DELEGATION_OTHER_PLAN, "This delegation is limited to another plan")
    if agent_id is not None:
        require_agent(store, agent_id)
        if not is_associated(store, agent_id, plan.id):
            raise bad_request(
                f"Agent {agent_id} does not sell plan {plan.id}",
                "Ask for a token for one of the agent's plans (GET /protocol/agents/{id}/plans)",
                code=AGENT_PLAN_MISMATCH,
            )
    now = store.now()
    expires = math.floor(min(delegation.expires_at, now + TOKEN_TTL_SECS))
    accepted_extra: dict[str, Any] = {"version": "1"}
    if agent_id is not None:
        accepted_extra["agentId"] = agent_id
    payload: dict[str, Any] = {
        "authorization": {
            "from": payer,
            "planId": plan.id,
            "agentId": agent_id,
            "delegationId": delegation.id,
            "sessionKeysProvider": "sandbox" if scheme == "svc:erc4337" else delegation.provider,
        },
        "signature": fake_signature(),
    }
    if scheme == "svc:card-delegation":
        payload["token"] = sign(
            {
                "sub": payer,
                "delegationId": delegation.id,
                "provider": delegation.provider,
                "paymentMethodId": delegation.payment_method_id,
                "exp": expires,
            },
            store.token_signing,
        )
    claims = {
        "x402Version": 2,
        "accepted": {
            "scheme": scheme,
            "network": network,
            "planId": plan.id,
            "extra": accepted_extra,
        },
        "payload": payload,
        "extensions": {},
        "iat": int(now),
        "exp": expires,
        "jti": str(uuid.uuid4()),
    }
    return sign(claims, store.token_signing)


def read_token(store: Store, token: str) -> TokenInfo:
    """A genuine token's grant; :class:`InvalidToken` for forged, altered or foreign ones."""
    claims = verify(token, store.token_signing)
    if claims is None:
        raise InvalidToken("invalid access token: signature check failed")
    accepted = claims.get("accepted")
    auth = token_authorization(claims)
    exp = claims.get("exp")
    if (
        not isinstance(accepted, dict)
        or not isinstance(claims.get("jti"), str)
        or not is_address(auth.get("from"))
        or not isinstance(auth.get("delegationId"), str)
        or not isinstance(exp, int | float)
        or accepted.get("scheme") not in SCHEMES
        or not isinstance(accepted.get("planId"), str)
    ):
        raise InvalidToken("not an x402 access token")
    agent = auth.get("agentId")
    return TokenInfo(
        jti=claims["jti"],
        payer=str(auth["from"]).lower(),
        plan_id=accepted["planId"],
        scheme=accepted["scheme"],
        network=str(accepted.get("network") or DEFAULT_NETWORK[accepted["scheme"]]),
        agent_id=agent if isinstance(agent, str) and agent else None,
        delegation_id=auth["delegationId"],
        expires_at=float(exp),
    )
