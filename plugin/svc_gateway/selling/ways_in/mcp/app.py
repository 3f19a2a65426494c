"""The managed MCP server's HTTP routes (ASGI): /mcp behind a bearer check, and the rest.

Server info, health, the OAuth discovery documents and dynamic client registration (SPEC.md
endpoints table): one authorization server, the service's (:mod:`.authorization`).

``/mcp`` itself is the SDK's streamable-HTTP session manager (POST JSON-RPC, GET SSE, DELETE
session), stateful for a client that opens a session (``initialize``, then ``Mcp-Session-Id``)
and stateless for one that does not: a POST without a session that opens none is served on its
own, so a client that keeps no session (stateless HTTP, the bearer on every request) pays per
request; on mcp 2.x the SDK serves the newest revision (2026-07-28: no session, per-request
auth) from either. Every request needs its bearer: missing → HTTP 401 with
``WWW-Authenticate`` naming the protected-resource metadata (a layer distinct from
payment-required, which travels in band).

The app needs the session manager's task group running: as an ASGI lifespan (uvicorn), or with
:meth:`McpAsgiApp.running` (the aiohttp bridge).
"""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import AsyncIterator, Awaitable, Callable, MutableMapping
from typing import Any

from ....interop import mcp_sdk as sdk
from ....redact import get_logger
from .authorization import UNAVAILABLE, ServiceAuthorization, Unavailable
from .server import PaidMcpServer

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

log = get_logger("svc_gateway.paid_mcp")

MCP_PATH = "/mcp"
MAX_REGISTER_BYTES = 16 * 1024
#: the largest JSON-RPC POST body read (the SDK's own limit for one message)
MAX_MESSAGE_BYTES = 4 * 1024 * 1024
SCOPES = ["openid", "profile", "credits"]
WELL_KNOWN = (
    "/.well-known/oauth-protected-resource",
    "/.well-known/oauth-authorization-server",
    "/.well-known/openid-configuration",
)

#: discovery paths and the document each serves (the RFC 9728 path form included)
DISCOVERY = {**{p: p for p in WELL_KNOWN}, WELL_KNOWN[0] + MCP_PATH: WELL_KNOWN[0]}
#: browser-based clients (MCP Inspector) read the discovery documents from a web page
CORS = {
    "Access-Control-Allow-Origin": "*",
    "Access-Control-Allow-Methods": "GET, POST, OPTIONS",
    "Access-Control-Allow-Headers": "Content-Type, MCP-Protocol-Version",
}
REGISTER = "/register"


def api_origin(base_url: str) -> str:
    """The service's API origin: its REST root without the ``/api/vN`` suffix."""
    return re.sub(r"/api/v\d+$", "", base_url.rstrip("/"))


async def send_json(
    send: Send, status: int, body: Any, headers: dict[str, str] | None = None
) -> None:
    raw = b"" if body is None else json.dumps(body, separators=(",", ":")).encode()
    head = [(b"content-type", b"application/json"), (b"content-length", str(len(raw)).encode())]
    head += [(k.lower().encode(), v.encode()) for k, v in (headers or {}).items()]
    await send({"type": "http.response.start", "status": status, "headers": head})
    await send({"type": "http.response.body", "body": raw})


def request_without_id(body: bytes) -> str | None:
    """Why a JSON-RPC POST body is refused before the SDK sees it: a message without an id
    (or a null one) whose method is not a notification's. The SDK would take it for a
    notification, fail to validate it and log it whole (mcp 1.x: at WARNING, on the root
    logger), a paid ``tools/call``'s ``_meta["x402/payment"]`` included. ``None``: pass it on
    (a body that is not JSON gets the SDK's own parse error)."""
    try:
        message = json.loads(body)
    except ValueError:
        return None
    for item in message if isinstance(message, list) else [message]:
        if not isinstance(item, dict) or "method" not in item:
            continue
        method, ident = item.get("method"), item.get("id")
        has_id = isinstance(ident, str | int) and not isinstance(ident, bool)
        if not has_id and not (isinstance(method, str) and method.startswith("notifications/")):
            shown = method[:60] if isinstance(method, str) else "this method"
            return f"{shown} is a request: send it with an id (a notification cannot be one)"
    return None


def opens_session(body: bytes) -> bool:
    """Whether a JSON-RPC POST body opens a session (holds an ``initialize`` request)."""
    try:
        message = json.loads(body)
    except (ValueError, RecursionError):
        return False
    items = message if isinstance(message, list) else [message]
    return any(isinstance(item, dict) and item.get("method") == "initialize" for item in items)


def _rpc_error(code: int, message: str) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": None, "error": {"code": code, "message": message}}


async def _read_body(receive: Receive, limit: int) -> bytes | None:
    """The whole request body, ``None`` when it is over ``limit`` bytes."""
    body = bytearray()
    while True:
        message = await receive()
        if message.get("type") != "http.request":
            break  # the client left: the SDK sees an empty body
        body += message.get("body", b"")
        if len(body) > limit:
            return None
        if not message.get("more_body"):
            break
    return bytes(body)


def _replay(body: bytes, receive: Receive) -> Receive:
    """``receive`` for the SDK: the body already read, then the client's own messages."""
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope.get("headers") or []:
        if key.lower() == name:
            return bytes(value).decode("latin-1")
    return None


class McpAsgiApp:
    """ASGI application of the managed server; ``prefix`` is where it is mounted ('' at root).

    ``manager`` serves sessions, ``stateless`` a POST that belongs to none and opens none;
    ``base_url(scope)`` gives the public origin + prefix (for the discovery documents)."""

    def __init__(
        self,
        server: PaidMcpServer,
        manager: Any,
        *,
        stateless: Any,
        base_url: Callable[[Scope], str],
        prefix: str = "",
    ) -> None:
        self.server = server
        self.manager = manager
        #: the SDK's stateless manager: a POST that belongs to no session and opens none
        self.stateless = stateless
        self.base_url = base_url
        self.prefix = prefix.rstrip("/")
        #: the service, as the one authorization server (its documents, its registration)
        self.authorization = ServiceAuthorization(lambda: api_origin(server.core.base_url))

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        """The session managers' task groups (enter and leave in one task)."""
        async with self.manager.run(), self.stateless.run():
            yield

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        path = str(scope.get("path") or "/")
        if self.prefix and path.startswith(self.prefix):
            path = path[len(self.prefix) :] or "/"
        method = str(scope.get("method") or "GET").upper()
        if path.rstrip("/") == MCP_PATH:
            await self._mcp(scope, receive, send)
        elif (path in DISCOVERY or path == REGISTER) and method == "OPTIONS":  # a preflight
            await send_json(send, 204, None, {**CORS, "Access-Control-Max-Age": "600"})
        elif path in DISCOVERY and method == "GET":
            await self._discovery(send, DISCOVERY[path], self.base_url(scope))
        elif path == REGISTER and method == "POST":
            await self._register(receive, send)
        elif path == "/health" and method == "GET":
            await send_json(send, 200, {"status": "ok", "serverName": self.server.server_name})
        elif path == "/" and method == "GET":
            await send_json(send, 200, await self._info(self.base_url(scope)))
        else:
            await send_json(send, 404, {"error": "not_found", "message": f"No route {path}"})

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        await receive()  # lifespan.startup
        async with self.running():
            await send({"type": "lifespan.startup.complete"})
            await receive()  # lifespan.shutdown
        await send({"type": "lifespan.shutdown.complete"})

    async def _mcp(self, scope: Scope, receive: Receive, send: Send) -> None:
        if sdk.bearer_of(_header(scope, b"authorization")) is None:
            metadata = self.base_url(scope) + WELL_KNOWN[0]
            await send_json(
                send,
                401,
                {
                    "error": "invalid_token",
                    "error_description": "Send Authorization: Bearer <access token>: get one "
                    "for this agent's plan with svc_getAccessToken, or through OAuth (an MCP "
                    "client that supports it starts from resource_metadata in WWW-Authenticate)",
                },
                {"WWW-Authenticate": f'Bearer resource_metadata="{metadata}"'},
            )
            return
        manager = self.manager
        if str(scope.get("method") or "").upper() == "POST":
            body = await _read_body(receive, MAX_MESSAGE_BYTES)
            if body is None:
                await send_json(send, 413, _rpc_error(-32600, "The message is too large"))
                return
            problem = request_without_id(body)
            if problem is not None:
                await send_json(send, 400, _rpc_error(-32600, problem))
                return
            receive = _replay(body, receive)
            if _header(scope, b"mcp-session-id") is None and not opens_session(body):
                manager = self.stateless  # no session to keep: served on its own
        if self.prefix:  # the SDK routes on its own path
            scope = {**scope, "path": MCP_PATH, "root_path": self.prefix}
        await manager.handle_request(scope, receive, send)

    async def _discovery(self, send: Send, path: str, base: str) -> None:
        """The protected-resource metadata, ours; the authorization server's documents, the
        service's own (read from it), so a client that looks here sees the same server."""
        if path == WELL_KNOWN[0]:
            # agent_id and plan_id (RFC 9728 §2 allows more fields) tell the authorization
            # server what a token is for
            document: dict[str, Any] = {
                "resource": base + MCP_PATH,
                "authorization_servers": [self.authorization.issuer()],
                "scopes_supported": SCOPES,
                "bearer_methods_supported": ["header"],
                "resource_name": self.server.server_name,
            }
            agent_id, plan_id = self.server.agent_id(), self.server.plan_id()
            if agent_id:
                document["agent_id"] = agent_id
            if plan_id:
                document["plan_id"] = plan_id
            await send_json(send, 200, document, CORS)
            return
        try:
            await send_json(send, 200, await self.authorization.document(path), CORS)
        except Unavailable as exc:
            log.warning("the service's %s could not be read (%s)", path, exc)
            await send_json(send, 503, UNAVAILABLE, CORS)

    async def _info(self, base: str) -> dict[str, Any]:
        server = self.server
        oauth: dict[str, Any] = {
            "authorization_servers": [self.authorization.issuer()],
            "resource_metadata": base + WELL_KNOWN[0],
            "registration_endpoint": base + REGISTER,
        }
        try:
            document = await self.authorization.document(WELL_KNOWN[1])
        except Unavailable:
            document = {}
        for key in ("issuer", "authorization_endpoint", "token_endpoint"):
            if isinstance(document.get(key), str):
                oauth[key] = document[key]
        info: dict[str, Any] = {
            "name": server.server_name,
            "version": server.version,
            "planId": server.plan_id(),
            "endpoints": {"mcp": base + MCP_PATH, "health": base + "/health"},
            "oauth": oauth,
            "tools": [uri for uri in server.logical_uris()],
        }
        agent_id = server.agent_id()
        if agent_id:
            info["agentId"] = agent_id
            oauth["client_id"] = agent_id  # SPEC.md: agentId fills it (informational)
        return info

    async def _register(self, receive: Receive, send: Send) -> None:
        """RFC 7591 dynamic client registration, with the service (the authorization server):
        the client's request as it came, the service's answer as it came back."""
        body = await _read_body(receive, MAX_REGISTER_BYTES)
        if body is None:
            await send_json(send, 413, {"error": "invalid_request"}, CORS)
            return
        try:
            answer = await self.authorization.register(body)
        except Unavailable as exc:
            log.warning("a client registration could not be passed to the service (%s)", exc)
            await send_json(send, 503, UNAVAILABLE, CORS)
            return
        await send_json(send, answer.status, answer.body, CORS)
