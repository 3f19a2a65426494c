"""The OAuth 2.1 routes at the sandbox's origin: discovery, registration, consent page, token.

The issuer is the sandbox origin, the one a paid MCP server's protected-resource metadata names
(``authorization_servers``, the backend origin as the payments TS SDK names it). A standard MCP
client discovers this server, registers (RFC 7591), sends the subscriber's browser to
``/oauth/authorize`` with PKCE S256 and ``resource`` = the MCP server's URL, and exchanges the
code at ``/oauth/token`` for a service access token for the agent's plan.

The agent and plan come from the resource's own protected-resource metadata (RFC 9728, its
``agent_id`` and ``plan_id`` fields), fetched when the request arrives; the consent page shows
them, the client and where the answer goes. The subscriber identifies with a sandbox API key
(the sandbox has no passwords, as on ``/login``) and approves or denies.
"""

from __future__ import annotations

import base64
import binascii
import html
import json
import logging
import secrets
from typing import Any
from urllib.parse import urlsplit

import aiohttp
from aiohttp import web
from yarl import URL

from . import oauth
from .accounts import authenticate
from .agents import get_agent, is_associated, plan_ids_of
from .context import origin_of, store_of
from .errors import ApiError
from .frontend import link_page
from .oauth import OAuthError, OAuthState, Pending
from .plans import Plan, get_plan

log = logging.getLogger("svc_gateway.sandbox")
routes = web.RouteTableDef()
OAUTH: web.AppKey[OAuthState] = web.AppKey("svc_sandbox_oauth", OAuthState)
AUTHORIZE, TOKEN, REGISTER = "/oauth/authorize", "/oauth/token", "/oauth/register"
JWKS = "/.well-known/jwks.json"
WELL_KNOWN = ("/.well-known/oauth-authorization-server", "/.well-known/openid-configuration", JWKS)
MAX_METADATA_BYTES = 64 * 1024
FETCH_TIMEOUT_SECS = 5.0


def install(app: web.Application) -> None:
    app[OAUTH] = OAuthState()
    app.add_routes(routes)
    for path in (*WELL_KNOWN, REGISTER, TOKEN):
        app.router.add_route("OPTIONS", path, preflight)


def metadata(issuer: str, *, openid: bool = False) -> dict[str, Any]:
    """RFC 8414 authorization server metadata (OpenID discovery adds its required fields)."""
    document: dict[str, Any] = {
        "issuer": issuer,
        "authorization_endpoint": issuer + AUTHORIZE,
        "token_endpoint": issuer + TOKEN,
        "registration_endpoint": issuer + REGISTER,
        "jwks_uri": issuer + JWKS,
        "response_types_supported": ["code"],
        "grant_types_supported": ["authorization_code"],
        "code_challenge_methods_supported": ["S256"],
        "token_endpoint_auth_methods_supported": list(oauth.AUTH_METHODS),
        "scopes_supported": oauth.SCOPES,
        "authorization_response_iss_parameter_supported": True,
    }
    if openid:
        document["subject_types_supported"] = ["public"]
        document["id_token_signing_alg_values_supported"] = ["RS256"]
    return document


#: Browser-based clients (MCP Inspector) read discovery and call registration and the token
#: endpoint from a web page: those answer any origin (no cookies are involved).
CORS = {
    "Access-Control-Allow-Origin": "*",
    "Access-Control-Allow-Methods": "GET, POST, OPTIONS",
    "Access-Control-Allow-Headers": "Authorization, Content-Type, MCP-Protocol-Version",
}


def _json(body: Any, status: int = 200, headers: dict[str, str] | None = None) -> web.Response:
    return web.json_response(
        body, status=status, headers={"Cache-Control": "no-store", **CORS, **(headers or {})}
    )


async def preflight(request: web.Request) -> web.Response:
    """CORS preflight of the endpoints a browser-based client calls."""
    return web.Response(status=204, headers={**CORS, "Access-Control-Max-Age": "600"})


@routes.get(WELL_KNOWN[0], allow_head=False)
async def as_metadata(request: web.Request) -> web.Response:
    """OAuth authorization server metadata (RFC 8414)."""
    return _json(metadata(origin_of(request)))


@routes.get(WELL_KNOWN[1], allow_head=False)
async def openid_configuration(request: web.Request) -> web.Response:
    """OpenID Connect discovery (the same server; no ID tokens are issued)."""
    return _json(metadata(origin_of(request), openid=True))


@routes.get(JWKS, allow_head=False)
async def jwks(request: web.Request) -> web.Response:
    """The signing keys: none, the access tokens are service tokens, verified by the service."""
    return _json({"keys": []})


@routes.post(REGISTER)
async def register(request: web.Request) -> web.Response:
    """Dynamic client registration (RFC 7591)."""
    try:
        body = json.loads(await request.read())
    except (ValueError, UnicodeDecodeError):
        body = None
    if not isinstance(body, dict):
        return _json({"error": "invalid_client_metadata", "error_description": "send JSON"}, 400)
    try:
        return _json(oauth.register_client(store_of(request), body), 201)
    except OAuthError as error:
        return _json(error.body(), error.status)


def _page(title: str, paragraphs: list[str], status: int = 200) -> web.Response:
    """The sandbox's page (paragraphs are trusted HTML built here; callers escape data), never
    framed: a consent page inside another site's frame could be clicked through."""
    page = link_page(title, paragraphs, status)
    page.headers["X-Frame-Options"] = "DENY"
    return page


def _redirect(target: str, params: dict[str, str | None], issuer: str) -> web.Response:
    query = {k: v for k, v in params.items() if v is not None}
    url = URL(target).with_fragment(None).extend_query({**query, "iss": issuer})
    return web.Response(status=302, headers={"Location": str(url), "Cache-Control": "no-store"})


def _metadata_urls(resource: str) -> list[str]:
    """Where the resource publishes its metadata: RFC 9728's path form, then beside it."""
    parts = urlsplit(resource)
    origin = f"{parts.scheme}://{parts.netloc}"
    path = parts.path.rstrip("/")
    urls = [f"{origin}/.well-known/oauth-protected-resource{path}"]
    parent = path.rsplit("/", 1)[0] if path else ""
    urls.append(f"{origin}{parent}/.well-known/oauth-protected-resource")
    return list(dict.fromkeys(urls))


async def _resource_metadata(resource: str) -> dict[str, Any] | None:
    timeout = aiohttp.ClientTimeout(total=FETCH_TIMEOUT_SECS)
    async with aiohttp.ClientSession(timeout=timeout) as session:
        for url in _metadata_urls(resource):
            try:
                async with session.get(url, allow_redirects=False) as answer:
                    raw = await answer.content.read(MAX_METADATA_BYTES + 1)
                    if answer.status != 200 or len(raw) > MAX_METADATA_BYTES:
                        continue
                document = json.loads(raw)
            except (TimeoutError, aiohttp.ClientError, ValueError, UnicodeDecodeError):
                continue
            if isinstance(document, dict) and document.get("resource") == resource:
                return document
    return None


async def _agent_and_plan(request: web.Request, resource: str) -> tuple[str, Plan]:
    """The agent and plan the resource sells, from its metadata, checked with the store."""
    document = await _resource_metadata(resource)
    if document is None:
        raise OAuthError(
            "invalid_target",
            "the resource publishes no protected-resource metadata naming itself",
        )
    store = store_of(request)
    agent_id = document.get("agent_id")
    agent = get_agent(store, agent_id) if isinstance(agent_id, str) and agent_id else None
    if agent is None:
        raise OAuthError("invalid_target", "the resource names no agent known to this service")
    oauth.check_resource(store, agent.id, resource)
    wanted = document.get("plan_id")
    plan_id = wanted if isinstance(wanted, str) and is_associated(store, agent.id, wanted) else None
    plan_id = plan_id or next(iter(plan_ids_of(store, agent.id)), None)
    plan = get_plan(store, plan_id) if plan_id else None
    if plan is None:
        raise OAuthError("invalid_target", "the resource's agent sells no plan")
    return agent.id, plan


def _consent(
    pending: Pending, agent_name: str, problem: str = "", status: int = 200
) -> web.Response:
    esc = html.escape
    plan = pending.plan
    target = urlsplit(pending.redirect_uri)
    form = (
        f"<form method='post' action='{AUTHORIZE}'>"
        f"<input type='hidden' name='request' value='{esc(pending.id)}'>"
        "<label>Your sandbox API key (local:…): "
        "<input type='password' name='api_key' autocomplete='off' size='40'></label> "
        "<button type='submit' name='decision' value='approve'>Approve</button> "
        "<button type='submit' name='decision' value='deny'>Deny</button></form>"
    )
    paragraphs = [
        f"<b>{esc(pending.client.name)}</b> asks to pay the MCP server "
        f"<code>{esc(pending.resource)}</code> for you.",
        f"Agent: <b>{esc(agent_name)}</b>. Plan: <b>{esc(plan.name)}</b> "
        f"({esc(plan.price_text())} for {plan.credits_amount} "
        f"credit{'' if plan.credits_amount == 1 else 's'}). Approving lets it spend "
        "your credits of this plan, and buy the plan once when they run out, for the next hour.",
        f"The answer goes to <code>{esc(target.scheme)}://{esc(target.netloc)}</code>.",
        form,
        "No key yet? <a href='/permissions/global-permissions'>Create one</a>, or use the one "
        "your chat's <code>/svc_login</code> gave you.",
    ]
    if problem:
        paragraphs.insert(0, f"<b>{esc(problem)}</b>")
    return _page("Approve a payment", paragraphs, status)


@routes.get(AUTHORIZE, allow_head=False)
async def authorize(request: web.Request) -> web.Response:
    """Authorization endpoint (code flow, PKCE S256 and resource required): the consent page."""
    store, issuer = store_of(request), origin_of(request)
    query = dict(request.query)
    try:
        client, redirect_uri, given = oauth.client_and_redirect(store, query)
    except OAuthError as error:
        return _page("Authorization failed", [html.escape(error.description)], 400)
    state = query.get("state")
    try:
        challenge, resource, scope = oauth.check_request(query)
        agent_id, plan = await _agent_and_plan(request, resource)
    except OAuthError as error:
        params = {"error": error.error, "error_description": error.description, "state": state}
        return _redirect(redirect_uri, params, issuer)
    oauth_state = request.app[OAUTH]
    oauth_state.forget_expired(store.now())
    if len(oauth_state.pending) >= oauth.MAX_PENDING:
        params = {"error": "temporarily_unavailable", "state": state}
        return _redirect(redirect_uri, params, issuer)
    pending = Pending(
        id=secrets.token_urlsafe(24),
        client=client,
        redirect_uri=redirect_uri,
        redirect_given=given,
        state=state,
        challenge=challenge,
        resource=resource,
        scope=scope,
        agent_id=agent_id,
        plan=plan,
        expires_at=store.now() + oauth.REQUEST_TTL_SECS,
    )
    oauth_state.pending[pending.id] = pending
    agent = get_agent(store, agent_id)
    return _consent(pending, agent.name if agent else agent_id)


_UNREADABLE = OAuthError("invalid_request", "the form body is not UTF-8 form data")


async def _form(request: web.Request) -> dict[str, str] | None:
    """The posted form's fields as text; ``None`` when it cannot be read (not UTF-8)."""
    try:
        return {k: str(v) for k, v in (await request.post()).items()}
    except (UnicodeDecodeError, ValueError):
        return None


@routes.post(AUTHORIZE)
async def decide(request: web.Request) -> web.Response:
    """The consent form: approve (with the subscriber's API key) or deny."""
    store, issuer = store_of(request), origin_of(request)
    form = await _form(request)
    if form is None:
        return _json(_UNREADABLE.body(), 400)
    oauth_state = request.app[OAUTH]
    oauth_state.forget_expired(store.now())
    pending = oauth_state.pending.get(str(form.get("request") or ""))
    if pending is None:
        return _page(
            "Authorization failed",
            ["This request is unknown or expired: start again from your MCP client."],
            400,
        )
    params: dict[str, str | None] = {"state": pending.state}
    if form.get("decision") != "approve":
        del oauth_state.pending[pending.id]
        params.update(error="access_denied", error_description="the subscriber denied access")
        return _redirect(pending.redirect_uri, params, issuer)
    account = authenticate(store, f"Bearer {str(form.get('api_key') or '').strip()}")
    agent = get_agent(store, pending.agent_id)
    if account is None:
        name = agent.name if agent else pending.agent_id
        return _consent(pending, name, "That is not a valid sandbox API key.", 401)
    del oauth_state.pending[pending.id]
    try:
        code = oauth.approve(store, oauth_state, pending, account.address)
    except ApiError as error:  # the delegation was refused: tell the client, not a 500
        log.info("OAuth approval failed: %s", error.code)
        params.update(error="server_error", error_description="the plan cannot be paid for")
        return _redirect(pending.redirect_uri, params, issuer)
    return _redirect(pending.redirect_uri, {"code": code, **params}, issuer)


def _basic(header: str | None) -> tuple[str, str] | None:
    if not header or not header.lower().startswith("basic "):
        return None
    try:
        raw = base64.b64decode(header[6:].strip(), validate=True).decode()
    except (binascii.Error, UnicodeDecodeError):
        return None
    user, sep, secret = raw.partition(":")
    return (user, secret) if sep else None


@routes.post(TOKEN)
async def token(request: web.Request) -> web.Response:
    """Token endpoint: an authorization code and its PKCE verifier for an access token."""
    if request.content_type != "application/x-www-form-urlencoded":
        error = OAuthError("invalid_request", "send application/x-www-form-urlencoded")
        return _json(error.body(), 400)
    form = await _form(request)
    if form is None:
        return _json(_UNREADABLE.body(), 400)
    basic = _basic(request.headers.get("Authorization"))
    try:
        answer = oauth.exchange(store_of(request), request.app[OAUTH], form, basic)
    except OAuthError as error:
        headers = {"WWW-Authenticate": "Basic"} if error.status == 401 and basic else {}
        return _json(error.body(), error.status, headers)
    return _json(answer)
