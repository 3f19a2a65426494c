"""The sandbox's OAuth 2.1 authorization server: client registration, PKCE codes, token exchange.

What a standard MCP client needs to pay a paid MCP server offline: RFC 7591 registration
(``redirect_uris`` checked and kept), the authorization-code grant with PKCE S256 required
(RFC 7636; no ``plain``, no PKCE-less flow), RFC 8707 ``resource`` required, bound to the code
and one of the named agent's registered endpoints (at authorize and again at token), codes
single use and short lived, bound to the client and the redirect URI. The access token is a
service access token (:mod:`.permissions`) for the agent's plan, backed by a delegation the
subscriber approved on the consent page (:mod:`.routes_oauth`). Errors are RFC 6749 §5.2
JSON (``error``, ``error_description``); an unregistered redirect URI is never redirected to.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import re
import secrets
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from .accounts import card_id
from .agents import get_agent
from .db import Store
from .delegations import create_delegation
from .errors import ApiError
from .permissions import TOKEN_TTL_SECS, issue_token, read_token
from .plans import Plan
from .topup import CENT_CURRENCIES, price_cents

CODE_TTL_SECS = 60.0
#: how long the consent page may stay open before its request expires
REQUEST_TTL_SECS = 600.0
MAX_REDIRECT_URIS = 10
MAX_PENDING = 1000
SCOPES = ["openid", "profile", "credits"]
AUTH_METHODS = ("none", "client_secret_post", "client_secret_basic")
_VERIFIER = re.compile(r"^[A-Za-z0-9\-._~]{43,128}$")
_CHALLENGE = re.compile(r"^[A-Za-z0-9\-_]{43}$")


class OAuthError(Exception):
    """An RFC 6749 error: ``error`` code, description, HTTP status."""

    def __init__(self, error: str, description: str, status: int = 400) -> None:
        super().__init__(description)
        self.error = error
        self.description = description
        self.status = status

    def body(self) -> dict[str, str]:
        return {"error": self.error, "error_description": self.description}


@dataclass(frozen=True)
class Client:
    client_id: str
    name: str
    redirect_uris: tuple[str, ...]
    auth_method: str
    secret_hash: str | None


@dataclass
class Pending:
    """An authorization request waiting on the consent page."""

    id: str
    client: Client
    redirect_uri: str
    redirect_given: bool
    state: str | None
    challenge: str
    resource: str
    scope: str
    agent_id: str
    plan: Plan
    expires_at: float


@dataclass
class Code:
    """An issued authorization code (kept under its hash)."""

    client_id: str
    redirect_uri: str
    redirect_given: bool
    challenge: str
    resource: str
    scope: str
    payer: str
    agent_id: str
    plan_id: str
    scheme: str
    delegation_id: str
    expires_at: float
    used: bool = False


@dataclass
class OAuthState:
    """Consent requests and codes live in memory: both expire within minutes."""

    pending: dict[str, Pending] = field(default_factory=dict)
    codes: dict[str, Code] = field(default_factory=dict)

    def forget_expired(self, now: float) -> None:
        for key in [k for k, p in self.pending.items() if p.expires_at <= now]:
            del self.pending[key]
        for key in [k for k, c in self.codes.items() if c.expires_at + 3600 <= now]:
            del self.codes[key]


def _digest(value: str) -> str:
    return hashlib.sha256(value.encode()).hexdigest()


def valid_redirect_uri(uri: object) -> bool:
    """An absolute URL without fragment or credentials; ``http`` only for loopback hosts
    (RFC 8252 §7.3: a native app's local callback), ``https`` anywhere."""
    if not isinstance(uri, str) or not uri or len(uri) > 2048:
        return False
    try:
        parts = urlsplit(uri)
    except ValueError:
        return False
    if parts.fragment or "@" in parts.netloc or not parts.hostname:
        return False
    if parts.scheme == "https":
        return True
    return parts.scheme == "http" and parts.hostname in ("127.0.0.1", "localhost", "::1")


def register_client(store: Store, body: dict[str, Any]) -> dict[str, Any]:
    """RFC 7591 §3.2.1: the registered metadata with a new ``client_id`` (and a secret for a
    confidential client)."""
    uris = body.get("redirect_uris")
    if not isinstance(uris, list) or not uris or len(uris) > MAX_REDIRECT_URIS:
        raise OAuthError(
            "invalid_redirect_uri",
            f"redirect_uris is required: a list of 1 to {MAX_REDIRECT_URIS} URLs",
        )
    for uri in uris:
        if not valid_redirect_uri(uri):
            raise OAuthError(
                "invalid_redirect_uri",
                "each redirect URI must be https://..., or http:// on 127.0.0.1, localhost "
                "or [::1], without a fragment",
            )
    method = body.get("token_endpoint_auth_method") or "none"
    if method not in AUTH_METHODS:
        raise OAuthError(
            "invalid_client_metadata",
            f"token_endpoint_auth_method must be one of {', '.join(AUTH_METHODS)}",
        )
    grants = body.get("grant_types") or ["authorization_code"]
    if not isinstance(grants, list) or not all(
        grant in ("authorization_code", "refresh_token") for grant in grants
    ):
        raise OAuthError(
            "invalid_client_metadata", "grant_types: this server grants authorization_code only"
        )
    responses = body.get("response_types") or ["code"]
    if responses != ["code"]:
        raise OAuthError("invalid_client_metadata", 'response_types must be ["code"]')
    name = body.get("client_name")
    now = store.now()
    answer: dict[str, Any] = {
        "client_id": "svc-oauth-client-" + secrets.token_hex(12),
        "client_id_issued_at": int(now),
        "client_name": str(name)[:200] if isinstance(name, str) and name else "MCP client",
        "redirect_uris": list(uris),
        "grant_types": ["authorization_code"],
        "response_types": ["code"],
        "token_endpoint_auth_method": method,
        "scope": " ".join(SCOPES),
    }
    secret = None
    if method != "none":
        secret = secrets.token_urlsafe(32)
        answer["client_secret"] = secret
        answer["client_secret_expires_at"] = 0
    doc = {k: v for k, v in answer.items() if k != "client_secret"}
    with store.tx():
        store.run(
            "INSERT INTO oauth_clients (client_id, doc, secret_hash, created_at) "
            "VALUES (?, ?, ?, ?)",
            (answer["client_id"], json.dumps(doc), secret and _digest(secret), now),
        )
    return answer


def get_client(store: Store, client_id: object) -> Client | None:
    if not isinstance(client_id, str) or not client_id or len(client_id) > 200:
        return None
    row = store.one("SELECT doc, secret_hash FROM oauth_clients WHERE client_id = ?", (client_id,))
    if row is None:
        return None
    doc = json.loads(row["doc"])
    return Client(
        client_id,
        str(doc["client_name"]),
        tuple(doc["redirect_uris"]),
        str(doc["token_endpoint_auth_method"]),
        row["secret_hash"],
    )


def client_and_redirect(store: Store, query: dict[str, str]) -> tuple[Client, str, bool]:
    """The client and the redirect URI to answer on, checked before anything is redirected
    (RFC 6749 §4.1.2.1: a bad client or redirect URI is shown, never redirected to)."""
    client = get_client(store, query.get("client_id"))
    if client is None:
        raise OAuthError("invalid_client", "client_id is not a registered client", 401)
    given = query.get("redirect_uri")
    if given is None:
        if len(client.redirect_uris) != 1:
            raise OAuthError(
                "invalid_request", "redirect_uri is required (the client registered several)"
            )
        return client, client.redirect_uris[0], False
    if given not in client.redirect_uris:
        raise OAuthError("invalid_request", "redirect_uri is not one the client registered")
    return client, given, True


def _absolute_url(value: str) -> bool:
    """An http(s) URL with a host and no fragment; a malformed one (``http://[::1/mcp``, a
    port that is no number) is refused, not raised."""
    try:
        parts = urlsplit(value)
        port_valid = parts.port is None or parts.port >= 0
    except ValueError:
        return False
    usable = parts.scheme in ("http", "https") and bool(parts.hostname) and not parts.fragment
    return port_valid and usable


def check_request(query: dict[str, str]) -> tuple[str, str, str]:
    """``(code_challenge, resource, scope)`` of an authorization request; errors here are
    redirected to the (already checked) redirect URI."""
    if query.get("response_type") != "code":
        raise OAuthError("unsupported_response_type", "response_type must be code")
    challenge = query.get("code_challenge") or ""
    if not challenge:
        raise OAuthError("invalid_request", "PKCE is required: send code_challenge (S256)")
    if query.get("code_challenge_method") != "S256":
        raise OAuthError("invalid_request", "code_challenge_method must be S256")
    if not _CHALLENGE.match(challenge):
        raise OAuthError("invalid_request", "code_challenge must be a base64url SHA-256")
    resource = query.get("resource") or ""
    if not resource:
        raise OAuthError(
            "invalid_target", "resource is required: the URL of the MCP server (RFC 8707)"
        )
    if not _absolute_url(resource):
        raise OAuthError("invalid_target", "resource must be an absolute URL without fragment")
    scope = query.get("scope") or " ".join(SCOPES)
    return challenge, resource, scope[:500]


def check_resource(store: Store, agent_id: str, resource: str) -> None:
    """RFC 8707: the agent's token pays only at one of its registered endpoints. A resource
    naming an agent it is not registered for (a server anyone runs may publish any agent's id)
    is refused, with the facilitator's own endpoint match (:meth:`.agents.Agent.match`)."""
    agent = get_agent(store, agent_id)
    if agent is None or agent.match(resource, None) is None:
        raise OAuthError(
            "invalid_target",
            "the resource is not an endpoint registered for the agent its metadata names",
        )


def _delegation_body(store: Store, payer: str, plan: Plan) -> dict[str, Any]:
    """A delegation that lets the token buy the plan once when the credits run out."""
    label, _ = plan.unit()
    cents = max(1, price_cents(plan) or 0)
    body: dict[str, Any] = {
        "spendingLimitCents": cents,
        "durationSecs": int(TOKEN_TTL_SECS),
        "planId": plan.id,
    }
    currency = CENT_CURRENCIES.get(label)
    if plan.is_crypto:
        return {**body, "provider": "erc4337", "currency": currency or "usdc"}
    return {
        **body,
        "provider": "stripe",
        "currency": currency if currency in ("usd", "eur") else "usd",
        "providerPaymentMethodId": card_id(store, payer, "stripe"),
    }


def approve(store: Store, state: OAuthState, pending: Pending, payer: str) -> str:
    """The subscriber approved: a delegation for the plan and a new code for the client."""
    delegation_id = create_delegation(store, payer, _delegation_body(store, payer, pending.plan))
    code = secrets.token_urlsafe(32)
    state.codes[_digest(code)] = Code(
        client_id=pending.client.client_id,
        redirect_uri=pending.redirect_uri,
        redirect_given=pending.redirect_given,
        challenge=pending.challenge,
        resource=pending.resource,
        scope=pending.scope,
        payer=payer,
        agent_id=pending.agent_id,
        plan_id=pending.plan.id,
        scheme=pending.plan.scheme,
        delegation_id=delegation_id,
        expires_at=store.now() + CODE_TTL_SECS,
    )
    return code


def _authenticate(client: Client, form: dict[str, str], basic: tuple[str, str] | None) -> None:
    if client.auth_method == "none":
        return
    secret = basic[1] if client.auth_method == "client_secret_basic" and basic else None
    if client.auth_method == "client_secret_post":
        secret = form.get("client_secret")
    if not secret or client.secret_hash is None:
        raise OAuthError("invalid_client", "client authentication failed", 401)
    if not hmac.compare_digest(_digest(secret), client.secret_hash):
        raise OAuthError("invalid_client", "client authentication failed", 401)


def revoke(store: Store, delegation_id: str) -> None:
    """Withdraw an approval: its delegation goes, so every token it backs fails verify."""
    with store.tx():
        store.run("DELETE FROM delegations WHERE id = ?", (delegation_id,))


def pkce_matches(verifier: str, challenge: str) -> bool:
    digest = hashlib.sha256(verifier.encode("ascii")).digest()
    expected = base64.urlsafe_b64encode(digest).decode().rstrip("=")
    return hmac.compare_digest(expected, challenge)


def exchange(
    store: Store, state: OAuthState, form: dict[str, str], basic: tuple[str, str] | None
) -> dict[str, Any]:
    """``POST /oauth/token``: an authorization code (with its PKCE verifier) for a token."""
    grant = form.get("grant_type")
    if not grant:
        raise OAuthError("invalid_request", "grant_type is required")
    if grant != "authorization_code":
        raise OAuthError("unsupported_grant_type", "this server grants authorization_code only")
    client_id = basic[0] if basic else form.get("client_id")
    client = get_client(store, client_id)
    if client is None:
        raise OAuthError("invalid_client", "client_id is not a registered client", 401)
    _authenticate(client, form, basic)
    raw = form.get("code") or ""
    verifier = form.get("code_verifier") or ""
    if not raw:
        raise OAuthError("invalid_request", "code is required")
    if not _VERIFIER.match(verifier):
        raise OAuthError("invalid_request", "code_verifier is required (43-128 characters)")
    code = state.codes.get(_digest(raw))
    now = store.now()
    if code is None or code.expires_at <= now:
        raise OAuthError("invalid_grant", "the code is unknown or expired")
    if code.used:  # replayed: the token it gave stops paying too (RFC 6749 §4.1.2)
        revoke(store, code.delegation_id)
        raise OAuthError("invalid_grant", "the code was already used")
    if code.client_id != client.client_id:
        raise OAuthError("invalid_grant", "the code was issued to another client")
    if code.redirect_given and form.get("redirect_uri") != code.redirect_uri:
        raise OAuthError("invalid_grant", "redirect_uri differs from the authorization request")
    if not pkce_matches(verifier, code.challenge):
        raise OAuthError("invalid_grant", "code_verifier does not match the code_challenge")
    resource = form.get("resource")
    if resource is not None and resource != code.resource:
        raise OAuthError("invalid_target", "resource differs from the authorization request")
    code.used = True  # spent by any well-formed attempt that reached this far
    check_resource(store, code.agent_id, code.resource)  # the agent may have dropped it since
    try:
        token = issue_token(
            store,
            code.payer,
            {
                "accepted": {
                    "scheme": code.scheme,
                    "planId": code.plan_id,
                    "extra": {"agentId": code.agent_id},
                },
                "delegationConfig": {"delegationId": code.delegation_id},
            },
        )
    except ApiError as error:  # the plan or agent changed since the approval
        raise OAuthError("invalid_grant", error.message) from None
    expires_in = max(1, int(read_token(store, token).expires_at - now))
    return {
        "access_token": token,
        "token_type": "Bearer",
        "expires_in": expires_in,
        "scope": code.scope,
    }
