"""The sandbox's API documentation, generated from its live router so it cannot drift.

``GET /api/v1/openapi.json`` is an OpenAPI 3.1 document and ``GET /docs`` a plain HTML page
(no scripts, no CDN) listing the same routes. Both are built from ``app.router.routes()``
plus the metadata in :data:`ROUTE_DOCS`, keyed by ``(method, path)``; a route without
metadata still appears, with a generic entry, so a route added later is never missing.
"""

from __future__ import annotations

import html
import json
import re
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from .context import API_PREFIX

OPENAPI_PATH = API_PREFIX + "/openapi.json"
DOCS_PATH = "/docs"
_PARAM = re.compile(r"\{([^}:]+)(?::[^}]*)?\}")

#: auth values: "key" needs ``Authorization: Bearer <key>``; "public" sends none;
#: "optional" accepts either (the key, when sent, decides the version pin); "unknown" is
#: a route nobody has described yet (no ``security`` in the document).
KEY, PUBLIC, OPTIONAL, UNKNOWN = "key", "public", "optional", "unknown"

ADDRESS = {"type": "string", "pattern": "^0x[a-fA-F0-9]{40}$"}
BIGINT = {
    "oneOf": [{"type": "string", "pattern": "^[0-9]+$"}, {"type": "integer", "minimum": 0}],
    "description": "a big integer, sent as a decimal string",
}
USDC = "0x036CbD53842c5426634e7929541eC2318f3dCF7e"
_ENVELOPE = {
    "type": "object",
    "description": "the x402 PaymentRequired envelope (x402Version 2)",
    "required": ["x402Version", "accepts"],
    "properties": {
        "x402Version": {"const": 2},
        "resource": {"type": "object", "properties": {"url": {"type": "string"}}},
        "accepts": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["scheme", "planId"],
                "properties": {
                    "scheme": {"enum": ["svc:erc4337", "svc:card-delegation"]},
                    "network": {"type": "string"},
                    "planId": {"type": "string"},
                    "extra": {"type": "object"},
                },
            },
        },
        "extensions": {"type": "object"},
    },
}
_PAYMENT_CALL: dict[str, Any] = {
    "type": "object",
    "required": ["paymentRequired", "x402AccessToken"],
    "properties": {
        "paymentRequired": _ENVELOPE,
        "x402AccessToken": {"type": "string"},
        "maxAmount": BIGINT,
    },
}
_ENVELOPE_EXAMPLE = {
    "x402Version": 2,
    "resource": {"url": "<the endpoint URL the agent registered>"},
    "accepts": [
        {
            "scheme": "svc:erc4337",
            "network": "eip155:84532",
            "planId": "<planId>",
            "extra": {"version": "1", "agentId": "<agentId>", "httpVerb": "POST"},
        }
    ],
    "extensions": {},
}
_VERIFY_EXAMPLE = {
    "paymentRequired": _ENVELOPE_EXAMPLE,
    "x402AccessToken": "<accessToken>",
    "maxAmount": "1",
}
_VERIFY_ANSWER = {
    "type": "object",
    "required": ["isValid"],
    "properties": {
        "isValid": {"type": "boolean"},
        "invalidReason": {"type": "string", "description": "why not, when isValid is false"},
        "payer": ADDRESS,
        "network": {"type": "string"},
        "agentRequestId": {"type": "string", "description": "send it back to settle"},
        "urlMatching": {"type": ["string", "null"]},
        "agentRequest": {"type": "object"},
    },
}
_SETTLE_ANSWER = {
    "type": "object",
    "required": ["success", "transaction"],
    "properties": {
        "success": {"type": "boolean", "description": "check it: a 200 can still be a refusal"},
        "errorReason": {"type": "string"},
        "payer": ADDRESS,
        "network": {"type": "string"},
        "transaction": {"type": "string", "description": "the burn's hash; empty on failure"},
        "creditsRedeemed": BIGINT,
        "remainingBalance": BIGINT,
        "orderTx": {
            "type": "string",
            "description": "the order of an automatic top-up through the token's delegation",
        },
    },
}
_METADATA = {
    "type": "object",
    "required": ["name"],
    "properties": {
        "name": {"type": "string"},
        "description": {"type": "string"},
        "tags": {"type": "array", "items": {"type": "string"}},
    },
}
_PLAN = {
    "type": "object",
    "required": ["metadataAttributes", "priceConfig", "creditsConfig"],
    "properties": {
        "metadataAttributes": _METADATA,
        "priceConfig": {
            "type": "object",
            "required": ["amounts", "receivers"],
            "properties": {
                "tokenAddress": {**ADDRESS, "description": "all zeros = the native token"},
                "amounts": {"type": "array", "items": BIGINT, "description": "minor units"},
                "receivers": {"type": "array", "items": ADDRESS},
                "isCrypto": {"type": "boolean"},
                "currency": {"type": "string"},
            },
        },
        "creditsConfig": {
            "type": "object",
            "required": ["amount"],
            "properties": {
                "isRedemptionAmountFixed": {"type": "boolean"},
                "redemptionType": {"type": "integer"},
                "durationSecs": BIGINT,
                "amount": BIGINT,
                "minAmount": BIGINT,
                "maxAmount": BIGINT,
            },
        },
        "isTrialPlan": {"type": "boolean"},
        "nonce": BIGINT,
    },
}
_AGENT_API = {
    "type": "object",
    "properties": {
        "endpoints": {
            "type": "array",
            "items": {"type": "object", "description": 'one verb as key: {"POST": "<url>"}'},
        },
        "agentDefinitionUrl": {"type": "string"},
        "authType": {"enum": ["none", "basic", "oauth", "bearer"]},
    },
}


@dataclass(frozen=True)
class RouteDoc:
    summary: str
    auth: str = KEY
    tag: str = "sandbox"
    body: dict[str, Any] | None = None
    example: dict[str, Any] | None = None
    query: tuple[str, ...] = ()
    status: int = 200
    notes: str = ""
    extra: dict[str, Any] = field(default_factory=dict)
    #: the success answer: its schema and an example (shown on /docs)
    answer: dict[str, Any] | None = None
    answer_example: dict[str, Any] | None = None


_P = API_PREFIX + "/protocol"
_A = API_PREFIX

#: per-route metadata, keyed exactly as aiohttp registers the route
ROUTE_DOCS: dict[tuple[str, str], RouteDoc] = {
    ("POST", _A + "/sandbox/accounts"): RouteDoc(
        "Open a sandbox account: returns a new API key and its address",
        auth=PUBLIC,
        body={
            "type": "object",
            "properties": {"label": {"type": "string"}, "apiVersion": {"type": "string"}},
        },
        example={"label": "builder"},
        status=201,
    ),
    ("GET", _A + "/sandbox/ledger/{planId}/{holderAddress}"): RouteDoc(
        "Audit one holder's credits: granted, burned, expired, balance", auth=OPTIONAL
    ),
    ("GET", _A + "/meta/versions"): RouteDoc(
        "Version discovery (any key; exempt from Service-Version checks)", tag="meta"
    ),
    ("GET", OPENAPI_PATH): RouteDoc("This document (OpenAPI 3.1)", auth=OPTIONAL, tag="meta"),
    ("POST", _P + "/plans"): RouteDoc(
        "Register a plan (you are its owner)",
        tag="plans",
        body=_PLAN,
        example={
            "metadataAttributes": {"name": "Starter"},
            "priceConfig": {
                "tokenAddress": USDC,
                "amounts": ["1000000"],
                "receivers": ["<your address>"],
                "isCrypto": True,
            },
            "creditsConfig": {
                "isRedemptionAmountFixed": True,
                "redemptionType": 4,
                "durationSecs": "0",
                "amount": "100",
                "minAmount": "1",
                "maxAmount": "1",
            },
        },
        status=201,
    ),
    ("GET", _P + "/plans"): RouteDoc(
        "List your plans", tag="plans", query=("page", "offset", "sortBy", "sortOrder")
    ),
    ("GET", _P + "/plans/{planId}"): RouteDoc("Get a plan", auth=OPTIONAL, tag="plans"),
    ("POST", _P + "/plans/{planId}/order"): RouteDoc(
        "Order (buy) a crypto plan: grants its credits to you", tag="plans"
    ),
    ("POST", _P + "/plans/mint"): RouteDoc(
        "Owner only: mint credits of your plan to a receiver",
        tag="plans",
        body={
            "type": "object",
            "required": ["planId", "amount", "creditsReceiver"],
            "properties": {
                "planId": {"type": "string"},
                "amount": BIGINT,
                "creditsReceiver": ADDRESS,
            },
        },
    ),
    ("POST", _P + "/plans/mintExpirable"): RouteDoc(
        "Owner only: mint credits that expire after creditsDuration seconds (0: never)",
        tag="plans",
        body={
            "type": "object",
            "required": ["planId", "creditsAmount", "creditsReceiver"],
            "properties": {
                "planId": {"type": "string"},
                "creditsAmount": BIGINT,
                "creditsReceiver": ADDRESS,
                "creditsDuration": BIGINT,
            },
        },
    ),
    ("POST", _P + "/plans/burn"): RouteDoc(
        "Burn credits you hold",
        tag="plans",
        body={
            "type": "object",
            "required": ["planId", "creditsAmount"],
            "properties": {"planId": {"type": "string"}, "creditsAmount": BIGINT},
        },
    ),
    ("POST", _P + "/plans/redeem"): RouteDoc(
        "Owner only: redeem a holder's credits for an agent request",
        tag="plans",
        body={
            "type": "object",
            "required": ["agentRequestId", "planId", "redeemFrom", "amount"],
            "properties": {
                "agentRequestId": {"type": "string"},
                "planId": {"type": "string"},
                "redeemFrom": ADDRESS,
                "amount": BIGINT,
            },
        },
    ),
    ("GET", _P + "/plans/{planId}/balance/{holderAddress}"): RouteDoc(
        "A holder's balance of a plan", auth=OPTIONAL, tag="plans"
    ),
    ("GET", _P + "/plans/{planId}/agents"): RouteDoc(
        "Agents selling a plan", auth=OPTIONAL, tag="agents", query=("page", "offset")
    ),
    ("POST", _P + "/agents"): RouteDoc(
        "Register an agent and attach plans",
        tag="agents",
        body={
            "type": "object",
            "required": ["metadataAttributes"],
            "properties": {
                "metadataAttributes": _METADATA,
                "agentApiAttributes": _AGENT_API,
                "plans": {"type": "array", "items": {"type": "string"}},
            },
        },
        status=201,
    ),
    ("POST", _P + "/agents/plans"): RouteDoc(
        "Register an agent and a new plan in one call",
        tag="agents",
        body={
            "type": "object",
            "required": ["plan", "agent"],
            "properties": {
                "plan": _PLAN,
                "agent": {
                    "type": "object",
                    "properties": {
                        "metadataAttributes": _METADATA,
                        "agentApiAttributes": _AGENT_API,
                    },
                },
            },
        },
        status=201,
    ),
    ("GET", _P + "/agents"): RouteDoc(
        "List your agents", tag="agents", query=("page", "offset", "sortBy", "sortOrder")
    ),
    ("GET", _P + "/agents/{agentId}"): RouteDoc("Get an agent", auth=OPTIONAL, tag="agents"),
    ("PUT", _P + "/agents/{agentId}"): RouteDoc(
        "Owner only: replace your agent's metadata and API attributes (plans are kept)",
        tag="agents",
        body={
            "type": "object",
            "required": ["metadataAttributes"],
            "properties": {"metadataAttributes": _METADATA, "agentApiAttributes": _AGENT_API},
        },
    ),
    ("GET", _P + "/agents/{agentId}/plans"): RouteDoc(
        "Plans an agent sells", auth=OPTIONAL, tag="agents", query=("page", "offset")
    ),
    ("POST", _P + "/agents/{agentId}/plan/{planId}"): RouteDoc(
        "Owner only: attach one of your plans to one of your agents (idempotent)", tag="agents"
    ),
    ("DELETE", _P + "/agents/{agentId}/plan/{planId}"): RouteDoc(
        "Owner only: detach a plan from an agent", tag="agents"
    ),
    ("POST", _A + "/fiat/stripe/payment"): RouteDoc(
        "Order a card (fiat) plan: returns a checkout link to open in a browser",
        tag="payments",
        body={
            "type": "object",
            "required": ["planId"],
            "properties": {
                "planId": {"type": "string"},
                "sessionType": {"enum": ["embedded", "hosted"]},
            },
        },
        example={"planId": "<planId>", "sessionType": "embedded"},
    ),
    ("GET", _A + "/payment-methods"): RouteDoc(
        "Your cards and crypto wallet", tag="payments", query=("provider", "accessible")
    ),
    ("PATCH", _A + "/payment-methods/{methodId}"): RouteDoc(
        "Rename a payment method or limit it to some API keys",
        tag="payments",
        body={
            "type": "object",
            "properties": {
                "alias": {"type": "string"},
                "allowedApiKeyIds": {"type": ["array", "null"], "items": {"type": "string"}},
            },
        },
    ),
    ("POST", _A + "/delegation/create"): RouteDoc(
        "Create a spending delegation (needed before an access token)",
        tag="payments",
        body={
            "type": "object",
            "required": ["provider", "spendingLimitCents", "durationSecs", "currency"],
            "properties": {
                "provider": {"enum": ["erc4337", "stripe", "braintree", "visa"]},
                "spendingLimitCents": BIGINT,
                "durationSecs": BIGINT,
                "currency": {"enum": ["usdc", "eurc", "usd", "eur"]},
                "providerPaymentMethodId": {"type": "string"},
                "planId": {"type": "string"},
                "maxTransactions": {"type": "integer"},
            },
        },
        example={
            "provider": "erc4337",
            "spendingLimitCents": "10000",
            "durationSecs": "86400",
            "currency": "usdc",
        },
        status=201,
    ),
    ("GET", _A + "/delegation"): RouteDoc(
        "Your delegations", tag="payments", query=("accessible",)
    ),
    ("POST", _A + "/x402/permissions"): RouteDoc(
        "Get an x402 access token for a plan you hold credits of",
        tag="x402",
        body={
            "type": "object",
            "required": ["accepted", "delegationConfig"],
            "properties": {
                "accepted": {
                    "type": "object",
                    "required": ["planId"],
                    "properties": {
                        "scheme": {"enum": ["svc:erc4337", "svc:card-delegation"]},
                        "network": {"type": "string"},
                        "planId": {"type": "string"},
                        "extra": {"type": "object"},
                    },
                },
                "delegationConfig": {
                    "type": "object",
                    "properties": {"delegationId": {"type": "string"}},
                },
                "tokenVersion": {"enum": [2, 3]},
                "resource": {"type": "object", "properties": {"url": {"type": "string"}}},
            },
        },
        example={
            "accepted": {
                "scheme": "svc:erc4337",
                "network": "eip155:84532",
                "planId": "<planId>",
                "extra": {},
            },
            "delegationConfig": {"delegationId": "<delegationId>"},
        },
    ),
    ("POST", _A + "/x402/verify"): RouteDoc(
        "Seller: check a token can pay maxAmount credits (burns and reserves nothing; "
        "counts one automatic top-up order when the balance is short)",
        tag="x402",
        body=_PAYMENT_CALL,
        example=_VERIFY_EXAMPLE,
        answer=_VERIFY_ANSWER,
        answer_example={
            "isValid": True,
            "payer": "0x<payer>",
            "network": "eip155:84532",
            "agentRequestId": "<agentRequestId>",
            "urlMatching": "<the endpoint URL the agent registered>",
            "agentRequest": {"agentRequestId": "<agentRequestId>", "agentId": "<agentId>"},
        },
    ),
    ("POST", _A + "/x402/settle"): RouteDoc(
        "Seller: burn the credits of a verified request (idempotent on agentRequestId); "
        "a short balance is topped up through the token's delegation (orderTx)",
        tag="x402",
        body={
            **_PAYMENT_CALL,
            "properties": {**_PAYMENT_CALL["properties"], "agentRequestId": {"type": "string"}},
        },
        example={**_VERIFY_EXAMPLE, "agentRequestId": "<agentRequestId from verify>"},
        answer=_SETTLE_ANSWER,
        answer_example={
            "success": True,
            "payer": "0x<payer>",
            "network": "eip155:84532",
            "transaction": "0x<burn hash>",
            "creditsRedeemed": "1",
            "remainingBalance": "99",
            "orderTx": "0x<order hash: only after an automatic top-up>",
        },
    ),
    **{
        ("POST", f"{_A}/mpp/{name}"): RouteDoc(
            "MPP (not configured here): always 501 BCK.MPP.0002", auth=PUBLIC, tag="mpp"
        )
        for name in ("permissions", "challenge", "verify", "settle")
    },
    ("GET", _A + "/organizations/my-memberships"): RouteDoc(
        "Organizations you belong to (your own is created on first use)", tag="organizations"
    ),
    ("POST", _A + "/organizations/members"): RouteDoc(
        "Admin: list your organization's members (X-Current-Org-Id picks the organization)",
        tag="organizations",
        body={
            "type": "object",
            "properties": {
                "page": {"type": "integer"},
                "offset": {"type": "integer"},
                "role": {"enum": ["Admin", "Member", "Client"]},
                "isActive": {"type": "boolean"},
            },
        },
    ),
    ("POST", _A + "/organizations/account"): RouteDoc(
        "Admin: onboard a white-label customer or enrol a member; returns its own API key "
        "(walletResult.hash)",
        tag="organizations",
        body={
            "type": "object",
            "properties": {
                "email": {"type": "string"},
                "as": {"const": "customer"},
                "uniqueExternalId": {"type": "string"},
                "role": {"enum": ["Admin", "Member"]},
            },
        },
        example={"email": "customer@example.com", "as": "customer"},
        status=201,
    ),
    ("GET", _A + "/organizations/{orgId}/activity"): RouteDoc(
        "Your organization's activity feed, newest first",
        tag="organizations",
        query=("eventType", "actorUserId", "page", "limit"),
    ),
    ("GET", "/"): RouteDoc(
        "Deployment info: the sandbox's (made-up) contract addresses", auth=PUBLIC, tag="meta"
    ),
    ("GET", "/permissions/global-permissions"): RouteDoc(
        "API key page: a button that creates a sandbox key", PUBLIC, "pages"
    ),
    ("POST", "/permissions/global-permissions"): RouteDoc(
        "Create a sandbox account and show its API key once", PUBLIC, "pages", status=201
    ),
    ("GET", DOCS_PATH): RouteDoc("This API reference as a web page", auth=PUBLIC, tag="pages"),
    ("GET", "/login"): RouteDoc("Sandbox login page (links to key creation)", PUBLIC, "pages"),
    ("GET", "/auth/cli"): RouteDoc(
        "Browser login: create an account and redirect its key to a loopback callback_url",
        auth=PUBLIC,
        tag="pages",
        query=("callback_url",),
        status=302,
    ),
    ("GET", "/.well-known/oauth-authorization-server"): RouteDoc(
        "OAuth 2.1 authorization server metadata (RFC 8414)", PUBLIC, "oauth"
    ),
    ("GET", "/.well-known/openid-configuration"): RouteDoc(
        "OpenID Connect discovery of the same authorization server", PUBLIC, "oauth"
    ),
    ("GET", "/.well-known/jwks.json"): RouteDoc(
        "Signing keys (none: access tokens are service tokens)", PUBLIC, "oauth"
    ),
    ("POST", "/oauth/register"): RouteDoc(
        "Dynamic client registration (RFC 7591): redirect_uris in, client_id out",
        PUBLIC,
        "oauth",
        status=201,
    ),
    ("GET", "/oauth/authorize"): RouteDoc(
        "Authorization endpoint: the consent page (code flow, PKCE S256 and resource required)",
        PUBLIC,
        "oauth",
        query=(
            "response_type",
            "client_id",
            "redirect_uri",
            "state",
            "code_challenge",
            "code_challenge_method",
            "resource",
            "scope",
        ),
    ),
    ("POST", "/oauth/authorize"): RouteDoc(
        "The consent form: approve with a sandbox API key, or deny; redirects with code or "
        "error=access_denied",
        PUBLIC,
        "oauth",
        status=302,
    ),
    ("POST", "/oauth/token"): RouteDoc(
        "Token endpoint: authorization_code + code_verifier (form-encoded) for an access token",
        PUBLIC,
        "oauth",
    ),
    ("GET", "/sandbox/checkout/{sessionId}"): RouteDoc(
        "Checkout page of a fiat order: opening it pays the order once", PUBLIC, "pages"
    ),
}
ROUTE_DOCS.update(
    {
        ("OPTIONS", path): RouteDoc(
            "CORS preflight (browser-based MCP clients such as MCP Inspector)",
            PUBLIC,
            "oauth",
            status=204,
        )
        for path in (
            "/.well-known/oauth-authorization-server",
            "/.well-known/openid-configuration",
            "/.well-known/jwks.json",
            "/oauth/register",
            "/oauth/token",
        )
    }
)
#: for a route without metadata: its handler's docstring (first sentence) when it has one
GENERIC = RouteDoc("(no description yet)", auth=UNKNOWN, tag="other")


def _served(app: web.Application) -> dict[tuple[str, str], Any]:
    """``(METHOD, path) -> handler`` of every route the app serves (no HEAD twins of GET)."""
    seen: dict[tuple[str, str], Any] = {}
    for route in app.router.routes():
        info = route.resource.get_info() if route.resource is not None else {}
        path = info.get("formatter") or info.get("path")
        if route.method in ("HEAD", "*") or not path:
            continue
        seen.setdefault((route.method, str(path)), route.handler)
    return seen


def _docstring_summary(handler: Any) -> str | None:
    text = " ".join((getattr(handler, "__doc__", None) or "").split())
    if not text:
        return None
    return text.split(". ")[0].rstrip(".").replace("``", "`")[:200]


def doc_for(method: str, path: str, handler: Any = None) -> RouteDoc:
    doc = ROUTE_DOCS.get((method, path))
    if doc is not None:
        return doc
    summary = _docstring_summary(handler)
    return RouteDoc(summary, auth=UNKNOWN, tag="other") if summary else GENERIC


def _success(doc: RouteDoc) -> dict[str, Any]:
    answer: dict[str, Any] = {"description": "success"}
    if doc.answer is not None:
        content: dict[str, Any] = {"schema": doc.answer}
        if doc.answer_example is not None:
            content["example"] = doc.answer_example
        answer["content"] = {"application/json": content}
    return answer


def _operation(method: str, path: str, handler: Any = None) -> dict[str, Any]:
    doc = doc_for(method, path, handler)
    params: list[dict[str, Any]] = [
        {"name": name, "in": "path", "required": True, "schema": {"type": "string"}}
        for name in _PARAM.findall(path)
    ]
    params += [
        {"name": name, "in": "query", "required": False, "schema": {"type": "string"}}
        for name in doc.query
    ]
    operation: dict[str, Any] = {
        "summary": doc.summary,
        "operationId": f"{method.lower()}_{re.sub(r'[^A-Za-z0-9]+', '_', path).strip('_')}",
        "tags": [doc.tag],
        "responses": {
            str(doc.status): _success(doc),
            "4XX": {
                "description": "error envelope",
                "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}},
            },
        },
    }
    if params:
        operation["parameters"] = params
    if doc.auth == KEY:
        operation["security"] = [{"apiKey": []}]
    elif doc.auth == OPTIONAL:
        operation["security"] = [{}, {"apiKey": []}]
    elif doc.auth == PUBLIC:
        operation["security"] = []
    if doc.body is not None:
        content: dict[str, Any] = {"schema": doc.body}
        if doc.example is not None:
            content["example"] = doc.example
        operation["requestBody"] = {"required": True, "content": {"application/json": content}}
    return operation


def build_document(app: web.Application) -> dict[str, Any]:
    """The OpenAPI 3.1 document of every route ``app`` serves."""
    paths: dict[str, dict[str, Any]] = {}
    for (method, path), handler in sorted(_served(app).items(), key=lambda i: i[0][::-1]):
        paths.setdefault(path, {})[method.lower()] = _operation(method, path, handler)
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "Agent Payments Service: local sandbox",
            "version": "1.1",
            "description": (
                "The local sandbox of the Agent Payments Service. Every /api/v1 call accepts "
                "a Service-Version header (e.g. 1.1); authenticated calls send "
                "'Authorization: Bearer <API key>' (POST /api/v1/sandbox/accounts creates "
                "one). Big integers travel as decimal strings."
            ),
        },
        "servers": [{"url": "/", "description": "this sandbox"}],
        "paths": paths,
        "components": {
            "securitySchemes": {
                "apiKey": {"type": "http", "scheme": "bearer", "description": "<env>:<jwt>"}
            },
            "schemas": {
                "Error": {
                    "type": "object",
                    "required": ["code", "message", "hint"],
                    "properties": {
                        "code": {"type": "string"},
                        "message": {"type": "string"},
                        "hint": {"type": "string", "description": "what to do next"},
                        "httpStatus": {"type": "integer"},
                    },
                }
            },
        },
    }


def document_of(app: web.Application) -> dict[str, Any]:
    """Built on each request: cheap (a few dozen routes) and never stale."""
    return build_document(app)


async def openapi_json(request: web.Request) -> web.Response:
    return web.json_response(document_of(request.app))


_AUTH_TEXT = {
    KEY: "API key",
    PUBLIC: "public",
    OPTIONAL: "key optional",
    UNKNOWN: "auth not documented",
}


def render_docs(document: dict[str, Any]) -> str:
    """The document as one self-contained HTML page (no scripts, no external assets)."""
    esc = html.escape
    groups: dict[str, list[str]] = {}
    for path, operations in document["paths"].items():
        for method, op in operations.items():
            security = op.get("security")
            if security is None:
                auth = UNKNOWN
            else:
                auth = PUBLIC if not security else (OPTIONAL if {} in security else KEY)
            body = op.get("requestBody", {}).get("content", {}).get("application/json", {})
            sample = body.get("example")
            shown = (
                f"<p>Body:</p><pre>{esc(json.dumps(sample, indent=2))}</pre>"
                if sample is not None
                else (f"<p>Body: JSON, see {esc(OPENAPI_PATH)}</p>" if body else "")
            )
            for answer in op["responses"].values():
                content = answer.get("content", {}).get("application/json", {})
                if "example" in content and "schema" in content and "$ref" not in content["schema"]:
                    fields = ", ".join(content["schema"].get("properties", {}))
                    shown += (
                        f"<p>Answer ({esc(fields)}):</p>"
                        f"<pre>{esc(json.dumps(content['example'], indent=2))}</pre>"
                    )
            groups.setdefault(op["tags"][0], []).append(
                f"<li id='{esc(op['operationId'])}'><code><b>{esc(method.upper())}</b> "
                f"{esc(path)}</code> <small>({esc(_AUTH_TEXT[auth])})</small>"
                f"<br>{esc(op['summary'])}{shown}</li>"
            )
    sections = "".join(
        f"<h2>{esc(tag)}</h2><ul>{''.join(items)}</ul>" for tag, items in sorted(groups.items())
    )
    info = document["info"]
    return (
        "<!doctype html><html><head><meta charset='utf-8'>"
        f"<title>{esc(info['title'])}</title>"
        "<style>body{font-family:sans-serif;max-width:60em;margin:auto}"
        "li{margin:.6em 0}pre{background:#f4f4f4;padding:.5em}</style></head><body>"
        f"<h1>{esc(info['title'])}</h1><p>{esc(info['description'])}</p>"
        f"<p>Machine-readable: <a href='{esc(OPENAPI_PATH)}'>{esc(OPENAPI_PATH)}</a></p>"
        f"{sections}</body></html>"
    )


async def docs_page(request: web.Request) -> web.Response:
    return web.Response(text=render_docs(document_of(request.app)), content_type="text/html")


def install(app: web.Application) -> None:
    """Add the two documentation routes; call after every other route is added."""
    app.router.add_get(OPENAPI_PATH, openapi_json, allow_head=False)
    app.router.add_get(DOCS_PATH, docs_page, allow_head=False)
