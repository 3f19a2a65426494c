"""The one place that knows the official ``mcp`` SDK's API, for both majors (1.2x and 2.x).

Everything else in the plugin speaks plain JSON (the MCP wire shapes: ``{"content": [...],
"isError": ..., "_meta": {...}}``) and :class:`RpcError`; this module turns them into the
installed SDK's models and back. What differs between the majors:

* server: 1.x registers request handlers ``(request) -> ServerResult`` keyed by request type and
  exposes the current request through ``server.request_context``; 2.x takes ``on_*`` handlers
  ``(ctx, params) -> Result`` in the constructor;
* errors: 1.x ``McpError(ErrorData(...))``, 2.x ``MCPError(code, message, data)``;
* client: 1.x's transport uses ``httpx`` and yields three values, 2.x's uses ``httpx2`` and
  yields two; 1.x's ``read_resource``/``get_prompt`` take no ``meta`` (sent with the session's
  own ``send_request`` instead).

The session manager (``StreamableHTTPSessionManager``: ``run()``, ``handle_request``) and the
models' camelCase validation are the same in both. Nothing here is imported unless MCP is used.
"""

from __future__ import annotations

import importlib
import importlib.metadata
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from ..config import ConfigError
from ..redact import get_logger, install

#: JSON-RPC error codes of the payment layer (payments-py ``mcp/utils/errors.py``)
PAYMENT_REQUIRED_CODE = -32003
MISCONFIGURATION_CODE = -32002
INTERNAL_ERROR_CODE = -32603
INVALID_PARAMS_CODE = -32602


def sdk_version() -> tuple[int, int]:
    """``(major, minor)`` of the installed ``mcp``; a ConfigError saying what to install."""
    try:
        raw = importlib.metadata.version("mcp")
    except importlib.metadata.PackageNotFoundError:
        raise ConfigError(
            "MCP needs the official mcp SDK: from a checkout, pip install -e '.[mcp]'"
        ) from None
    parts = [int(p) if p.isdigit() else 0 for p in raw.split(".")[:2]] + [0]
    major, minor = parts[0], parts[1]
    if not (major == 2 or (major == 1 and minor >= 20)):
        raise ConfigError(f"mcp {raw} is not supported: install mcp >= 1.20, < 3")
    return major, minor


def major() -> int:
    return sdk_version()[0]


class RpcError(Exception):
    """A JSON-RPC error, either to send (server) or received (client)."""

    def __init__(self, code: int, message: str, data: Any = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.data = data


@dataclass(frozen=True)
class Incoming:
    """One request as a handler sees it: its arguments, its ``_meta`` and the session bearer."""

    arguments: dict[str, Any]
    meta: dict[str, Any]
    bearer: str | None = field(repr=False)


class Handlers(Protocol):
    """What the paid server answers; plain JSON in, plain JSON (wire shapes) out."""

    async def list_tools(self) -> list[dict[str, Any]]: ...
    async def call_tool(self, name: str, call: Incoming) -> dict[str, Any]: ...
    async def list_resources(self) -> list[dict[str, Any]]: ...
    async def read_resource(self, uri: str, call: Incoming) -> dict[str, Any]: ...
    async def list_prompts(self) -> list[dict[str, Any]]: ...
    async def get_prompt(self, name: str, call: Incoming) -> dict[str, Any]: ...


def bearer_of(header: str | None) -> str | None:
    """The token of an ``Authorization: Bearer <token>`` header, else ``None``."""
    if not header:
        return None
    scheme, _, token = header.strip().partition(" ")
    token = token.strip()
    return token if scheme.lower() == "bearer" and token else None


def sdk_types() -> Any:
    return importlib.import_module("mcp.types")


def dump_model(model: Any) -> dict[str, Any]:
    if model is None:
        return {}
    if isinstance(model, dict):
        return dict(model)
    dumped: dict[str, Any] = model.model_dump(by_alias=True, mode="json", exclude_none=True)
    return dumped


def _headers_bearer(request: Any) -> str | None:
    headers = getattr(request, "headers", None)
    return bearer_of(headers.get("authorization")) if headers is not None else None


# -- server ------------------------------------------------------------------------------------


def build_server(name: str, version: str, handlers: Handlers) -> Any:
    """A low-level ``mcp`` server whose requests go to ``handlers``."""
    v = major()
    server = _server_v1(name, version, handlers) if v == 1 else _server_v2(name, version, handlers)
    redact_sdk_logs()
    return server


def redact_sdk_logs() -> None:
    """The SDK logs whole messages at DEBUG, ``_meta["x402/payment"]`` included: its loggers
    get the plugin's redacting filter (which masks the payment's signature). So does the root
    logger: mcp 1.x logs messages it cannot validate with ``logging.warning(...)``, a record
    of the root logger itself, which the filters of the ``mcp`` loggers never see."""
    importlib.import_module("mcp.server.streamable_http_manager")
    importlib.import_module("mcp.client.streamable_http")
    install("mcp")
    get_logger("")  # the root logger (records logged on it directly)


def _server_v1(name: str, version: str, handlers: Handlers) -> Any:
    types = sdk_types()
    lowlevel = importlib.import_module("mcp.server.lowlevel")
    shared = importlib.import_module("mcp.shared.exceptions")
    server = lowlevel.Server(name, version)

    def incoming(arguments: Any, meta: Any) -> Incoming:
        try:
            request = server.request_context.request
        except LookupError:  # pragma: no cover - always set while a request is served
            request = None
        return Incoming(dict(arguments or {}), dump_model(meta), _headers_bearer(request))

    def wrap(result_type: Any, call: Callable[[Any], Awaitable[Any]]) -> Any:
        async def handler(req: Any) -> Any:
            try:
                wire = await call(req)
            except RpcError as exc:
                error = types.ErrorData(code=exc.code, message=exc.message, data=exc.data)
                raise shared.McpError(error) from None
            return types.ServerResult(result_type.model_validate(wire))

        return handler

    async def list_tools(_req: Any) -> Any:
        return {"tools": await handlers.list_tools()}

    async def call_tool(req: Any) -> Any:
        p = req.params
        return await handlers.call_tool(p.name, incoming(p.arguments, p.meta))

    async def list_resources(_req: Any) -> Any:
        return {"resources": await handlers.list_resources()}

    async def read_resource(req: Any) -> Any:
        p = req.params
        return await handlers.read_resource(str(p.uri), incoming({}, p.meta))

    async def list_prompts(_req: Any) -> Any:
        return {"prompts": await handlers.list_prompts()}

    async def get_prompt(req: Any) -> Any:
        p = req.params
        return await handlers.get_prompt(p.name, incoming(p.arguments, p.meta))

    table = server.request_handlers
    table[types.ListToolsRequest] = wrap(types.ListToolsResult, list_tools)
    table[types.CallToolRequest] = wrap(types.CallToolResult, call_tool)
    table[types.ListResourcesRequest] = wrap(types.ListResourcesResult, list_resources)
    table[types.ReadResourceRequest] = wrap(types.ReadResourceResult, read_resource)
    table[types.ListPromptsRequest] = wrap(types.ListPromptsResult, list_prompts)
    table[types.GetPromptRequest] = wrap(types.GetPromptResult, get_prompt)
    return server


def _server_v2(name: str, version: str, handlers: Handlers) -> Any:
    types = sdk_types()
    lowlevel = importlib.import_module("mcp.server.lowlevel")
    shared = importlib.import_module("mcp.shared.exceptions")

    def incoming(ctx: Any, arguments: Any, meta: Any) -> Incoming:
        return Incoming(dict(arguments or {}), dump_model(meta), _headers_bearer(ctx.request))

    def wrap(result_type: Any, call: Callable[[Any, Any], Awaitable[Any]]) -> Any:
        async def handler(ctx: Any, params: Any) -> Any:
            try:
                wire = await call(ctx, params)
            except RpcError as exc:
                raise shared.MCPError(exc.code, exc.message, exc.data) from None
            return result_type.model_validate(wire)

        return handler

    async def list_tools(_ctx: Any, _p: Any) -> Any:
        return {"tools": await handlers.list_tools()}

    async def call_tool(ctx: Any, p: Any) -> Any:
        return await handlers.call_tool(p.name, incoming(ctx, p.arguments, p.meta))

    async def list_resources(_ctx: Any, _p: Any) -> Any:
        return {"resources": await handlers.list_resources()}

    async def read_resource(ctx: Any, p: Any) -> Any:
        return await handlers.read_resource(str(p.uri), incoming(ctx, {}, p.meta))

    async def list_prompts(_ctx: Any, _p: Any) -> Any:
        return {"prompts": await handlers.list_prompts()}

    async def get_prompt(ctx: Any, p: Any) -> Any:
        return await handlers.get_prompt(p.name, incoming(ctx, p.arguments, p.meta))

    return lowlevel.Server(
        name,
        version=version,
        on_list_tools=wrap(types.ListToolsResult, list_tools),
        on_call_tool=wrap(types.CallToolResult, call_tool),
        on_list_resources=wrap(types.ListResourcesResult, list_resources),
        on_read_resource=wrap(types.ReadResourceResult, read_resource),
        on_list_prompts=wrap(types.ListPromptsResult, list_prompts),
        on_get_prompt=wrap(types.GetPromptResult, get_prompt),
    )


def session_manager(
    server: Any, *, allowed_hosts: list[str] | None, stateless: bool = False
) -> Any:
    """The SDK's streamable-HTTP session manager (JSON responses; stateful sessions, or with
    ``stateless`` a fresh transport per request, no ``initialize`` needed).

    ``allowed_hosts``: ``Host`` header patterns accepted (DNS-rebinding protection, as the SDK
    turns on for loopback servers); ``None`` turns the check off (behind a proxy)."""
    manager = importlib.import_module("mcp.server.streamable_http_manager")
    security = importlib.import_module("mcp.server.transport_security")
    settings = (
        security.TransportSecuritySettings(
            enable_dns_rebinding_protection=True,
            allowed_hosts=allowed_hosts,
            allowed_origins=[f"http://{h}" for h in allowed_hosts],
        )
        if allowed_hosts
        else security.TransportSecuritySettings(enable_dns_rebinding_protection=False)
    )
    return manager.StreamableHTTPSessionManager(
        app=server, json_response=True, stateless=stateless, security_settings=settings
    )


# -- client ------------------------------------------------------------------------------------
