"""x402 access tokens: issuing them (``POST /x402/permissions``) and reading them back.

A token is the service's own format (WIRE.md §3.2): base64url of an x402 PaymentPayload
(``payload.authorization.from`` is the payer) sealed with an HMAC in ``payload.signature``,
so ``payments_py.x402.token.decode_access_token`` reads it and verify tells a forged or
altered token from a real one.

Version 2 (the default) is a reusable bearer token. Version 3 (``tokenVersion: 3`` with
``resource.url`` and ``accepted.extra.httpVerb``) is bound to the agent, the resource URL
and the verb, and carries a one-time ``payload.authorization.nonce`` that its first settle
consumes. A ``resource.url`` outside the agent's endpoint allow-list is refused at mint
with ``BCK.PROTOCOL.0031``.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass
from typing import Any

from ..encoding import is_address, token_authorization
from . import validation as v
from .agents import is_associated, require_agent
from .db import Store
from .delegations import create_delegation, usable_delegation
from .errors import (
    AGENT_PLAN_MISMATCH,
    DELEGATION_MISSING,
    DELEGATION_OTHER_PLAN,
    ENDPOINT_NOT_ALLOWED,
    SCHEME_PLAN_MISMATCH,
    SCHEME_PROVIDER_MISMATCH,
    TOKEN_REQUEST_INVALID,
    ApiError,
    bad_request,
)
from .plans import require_plan
from .tokens import open_access_token, random_hex, seal_access_token, sign

SCHEMES = ("svc:erc4337", "svc:card-delegation")
NETWORKS: dict[str, tuple[str, ...]] = {
    "svc:erc4337": ("eip155:84532", "eip155:8453"),
    "svc:card-delegation": ("stripe", "braintree", "visa"),
}
DEFAULT_NETWORK = {"svc:erc4337": "eip155:84532", "svc:card-delegation": "stripe"}
TOKEN_TTL_SECS = 3600
TOKEN_VERSIONS = (2, 3)
#: Deprecated inline delegation fields (WIRE.md §3.1): without a ``delegationId`` they make
#: the service create a delegation on the fly, which the sandbox does too.
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
    version: int = 2
    nonce: str | None = None
    resource_url: str | None = None
    http_verb: str | None = None


def _inline_delegation(
    store: Store, payer: str, scheme: str, network: str, config: dict[str, Any]
) -> str:
    """The deprecated create-on-the-fly path: a delegation made from the inline fields."""
    body: dict[str, Any] = {
        key: config[key]
        for key in ("spendingLimitCents", "durationSecs", "currency", "planId", "maxTransactions")
        if config.get(key) is not None
    }
    if scheme == "svc:erc4337":
        body["provider"] = "erc4337"
    else:
        body["provider"] = network if network in ("stripe", "braintree", "visa") else "stripe"
        method = config.get("providerPaymentMethodId") or config.get("cardId")
        if method is not None:
            body["providerPaymentMethodId"] = method
    return create_delegation(store, payer, body)


def _delegation_id(
    store: Store, payer: str, scheme: str, network: str, body: dict[str, Any]
) -> str:
    config = body.get("delegationConfig")
    if config is not None and not isinstance(config, dict):
        raise bad_request("delegationConfig must be an object")
    config = config or {}
    delegation_id = config.get("delegationId")
    if delegation_id is not None and (
        not isinstance(delegation_id, str) or not delegation_id.strip()
    ):
        raise bad_request(
            "delegationConfig.delegationId must be a delegation id",
            "Create a delegation with POST /delegation/create and send its delegationId",
            code=DELEGATION_MISSING,
        )
    if delegation_id is None and any(config.get(f) is not None for f in INLINE_FIELDS):
        return _inline_delegation(store, payer, scheme, network, config)
    if delegation_id is None:
        raise bad_request(
            "The token request has no delegation (delegationConfig.delegationId)",
            "Create a delegation with POST /delegation/create (erc4337 + usdc for crypto plans, "
            "a card + usd for fiat plans) and send its delegationId",
            code=DELEGATION_MISSING,
        )
    return delegation_id.strip()


def _binding(body: dict[str, Any], extra: dict[str, Any]) -> tuple[int, str | None, str | None]:
    """``(tokenVersion, resource.url, httpVerb)`` of a token request, checked."""
    raw_version = body.get("tokenVersion", 2)
    version = (
        raw_version if isinstance(raw_version, int) and not isinstance(raw_version, bool) else None
    )
    if isinstance(raw_version, str) and raw_version.strip().isdigit():
        version = int(raw_version.strip())
    if version not in TOKEN_VERSIONS:
        raise bad_request(
            "tokenVersion must be 2 (reusable, the default) or 3 (single use, bound to a resource)",
            code=TOKEN_REQUEST_INVALID,
        )
    resource = body.get("resource")
    if resource is not None and not isinstance(resource, dict):
        raise bad_request('resource must be an object such as {"url": "https://..."}')
    url = resource.get("url") if isinstance(resource, dict) else None
    if url is not None and (not isinstance(url, str) or not url.strip() or len(url) > 2048):
        raise bad_request("resource.url must be the URL of the protected resource")
    verb = extra.get("httpVerb")
    if verb is not None and (not isinstance(verb, str) or not verb.strip() or len(verb) > 16):
        raise bad_request("accepted.extra.httpVerb must be an HTTP verb such as POST")
    if version == 3 and (url is None or verb is None):
        raise bad_request(
            "A version 3 token is bound to one resource: send resource.url and "
            "accepted.extra.httpVerb with tokenVersion 3",
            code=TOKEN_REQUEST_INVALID,
        )
    return version, url, verb.strip().upper() if isinstance(verb, str) else None


def issue_token(store: Store, payer: str, body: dict[str, Any]) -> str:
    """Check a token request (WIRE.md §3.1) and seal the token."""
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
    version, resource_url, verb = _binding(body, extra)
    if version == 3 and agent_id is None:
        raise bad_request(
            "A version 3 token is bound to one agent: send accepted.extra.agentId",
            code=TOKEN_REQUEST_INVALID,
        )
    plan = require_plan(store, plan_id)
    if plan.scheme != scheme:
        raise bad_request(
            f"Plan {plan.id} is paid with {plan.scheme}, not {scheme}",
            "Fiat plans (isCrypto false) take svc:card-delegation tokens; crypto plans take "
            "svc:erc4337",
            code=SCHEME_PLAN_MISMATCH,
        )
    if agent_id is not None:
        agent = require_agent(store, agent_id)
        if not is_associated(store, agent_id, plan.id):
            raise bad_request(
                f"Agent {agent_id} does not sell plan {plan.id}",
                "Ask for a token for one of the agent's plans (GET /protocol/agents/{id}/plans)",
                code=AGENT_PLAN_MISMATCH,
            )
        if resource_url is not None and agent.endpoints and agent.match(resource_url, verb) is None:
            raise bad_request(
                f"resource.url {resource_url!r} ({verb or 'any verb'}) is not one of the "
                "agent's registered endpoints",
                "Use the URL and verb of an endpoint the agent registered "
                '(agentApiAttributes.endpoints, {"POST": "https://..."})',
                code=ENDPOINT_NOT_ALLOWED,
            )
    delegation = usable_delegation(
        store, payer, _delegation_id(store, payer, scheme, network, body)
    )
    if delegation.scheme != scheme:
        raise bad_request(
            f"A {delegation.provider} delegation cannot back a {scheme} token",
            "Use an erc4337 delegation for svc:erc4337 and a card delegation "
            "(stripe, braintree) for svc:card-delegation",
            code=SCHEME_PROVIDER_MISMATCH,
        )
    if delegation.plan_id is not None and delegation.plan_id != plan.id:
        raise ApiError(403, DELEGATION_OTHER_PLAN, "This delegation is limited to another plan")
    now = store.now()
    expires = math.floor(min(delegation.expires_at, now + TOKEN_TTL_SECS))
    accepted_extra: dict[str, Any] = {"version": "1"}
    if agent_id is not None:
        accepted_extra["agentId"] = agent_id
    if verb is not None:
        accepted_extra["httpVerb"] = verb
    authorization: dict[str, Any] = {
        "from": payer,
        "sessionKeysProvider": "sandbox" if scheme == "svc:erc4337" else delegation.provider,
        "sessionKeys": [{"id": "redeem", "data": "0x" + random_hex(32)}],
        "planId": plan.id,
        "agentId": agent_id,
        "delegationId": delegation.id,
        "validAfter": str(int(now)),
        "validBefore": str(expires),
    }
    if version == 3:  # the binding, signed with the rest (payments TS e2e reads these three)
        authorization["nonce"] = "0x" + random_hex(32)
        authorization["resourceUrl"] = resource_url
        authorization["httpVerb"] = verb
    payload: dict[str, Any] = {"authorization": authorization}
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
    document: dict[str, Any] = {"x402Version": 2}
    if resource_url is not None:
        document["resource"] = {"url": resource_url}
    document["accepted"] = {
        "scheme": scheme,
        "network": network,
        "planId": plan.id,
        "extra": accepted_extra,
    }
    document["payload"] = payload
    document["extensions"] = {}
    return seal_access_token(document, store.token_signing)


def _text(value: object) -> str | None:
    return value if isinstance(value, str) and value else None


def read_token(store: Store, token: str) -> TokenInfo:
    """A genuine token's grant; :class:`InvalidToken` for forged, altered or foreign ones."""
    document = open_access_token(token, store.token_signing)
    if document is None:
        raise InvalidToken("invalid access token: signature check failed")
    accepted = document.get("accepted")
    auth = token_authorization(document)
    expires = auth.get("validBefore")
    if (
        not isinstance(accepted, dict)
        or not is_address(auth.get("from"))
        or not isinstance(auth.get("delegationId"), str)
        or not isinstance(expires, str)
        or not expires.isdigit()
        or accepted.get("scheme") not in SCHEMES
        or not isinstance(accepted.get("planId"), str)
    ):
        raise InvalidToken("not an x402 access token")
    extra = accepted.get("extra")
    resource = document.get("resource")
    nonce = _text(auth.get("nonce"))
    signature = str(document["payload"]["signature"])
    return TokenInfo(
        jti=hashlib.sha256(signature.encode()).hexdigest()[:32],
        payer=str(auth["from"]).lower(),
        plan_id=accepted["planId"],
        scheme=accepted["scheme"],
        network=str(accepted.get("network") or DEFAULT_NETWORK[accepted["scheme"]]),
        agent_id=_text(auth.get("agentId")),
        delegation_id=auth["delegationId"],
        expires_at=float(expires),
        version=3 if nonce else 2,
        nonce=nonce,
        resource_url=_text(resource.get("url")) if isinstance(resource, dict) else None,
        http_verb=_text(extra.get("httpVerb")) if isinstance(extra, dict) else None,
    )
