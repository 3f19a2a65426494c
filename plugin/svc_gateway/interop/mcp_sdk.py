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

import asyncio
import contextlib
import importlib
import importlib.metadata
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from types import TracebackType
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
            "MCP needs the official mcp SDK: pip install 'svc-gateway-plugin[mcp]'"
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


def _types() -> Any:
    return importlib.import_module("mcp.types")


def _dump(model: Any) -> dict[str, Any]:
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
    types = _types()
    lowlevel = importlib.import_module("mcp.server.lowlevel")
    shared = importlib.import_module("mcp.shared.exceptions")
    server = lowlevel.Server(name, version)

    def incoming(arguments: Any, meta: Any) -> Incoming:
        try:
            request = server.request_context.request
        except LookupError:  # pragma: no cover - always set while a request is served
            request = None
        return Incoming(dict(arguments or {}), _dump(meta), _headers_bearer(request))

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
    types = _types()
    lowlevel = importlib.import_module("mcp.server.lowlevel")
    shared = importlib.import_module("mcp.shared.exceptions")

    def incoming(ctx: Any, arguments: Any, meta: Any) -> Incoming:
        return Incoming(dict(arguments or {}), _dump(meta), _headers_bearer(ctx.request))

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


def session_manager(server: Any, *, allowed_hosts: list[str] | None) -> Any:
    """The SDK's streamable-HTTP session manager (JSON responses, stateful sessions).

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
        app=server, json_response=True, stateless=False, security_settings=settings
    )


# -- client ------------------------------------------------------------------------------------


class ResponseTooLarge(Exception):
    """An HTTP response of the session grew past its byte limit; ``head`` is what came first
    (at most the limit). The message names the limit only, never the content."""

    def __init__(self, limit: int, head: bytes) -> None:
        super().__init__(f"an MCP response larger than {limit} bytes")
        self.limit = limit
        self.head = head


class _Capped:
    """A response body that stops at ``limit`` bytes and tells its session why (mixed into the
    installed httpx's ``AsyncByteStream``: :func:`_capped`)."""

    def __init__(self, inner: Any, limit: int, over: Callable[[bytes], None]) -> None:
        self._inner = inner
        self._limit = limit
        self._over = over

    async def __aiter__(self) -> AsyncIterator[bytes]:
        seen: list[bytes] = []
        size = 0
        async for chunk in self._inner:
            if size + len(chunk) > self._limit:
                head = b"".join(seen) + chunk[: self._limit - size]
                self._over(head)
                raise ResponseTooLarge(self._limit, b"")  # the SDK may log it: no content
            seen.append(chunk)
            size += len(chunk)
            yield chunk

    async def aclose(self) -> None:
        await self._inner.aclose()


_CAPPED_TYPES: dict[type, type] = {}


def _capped(http: Any, inner: Any, limit: int, over: Callable[[bytes], None]) -> Any:
    """:class:`_Capped` as the ``AsyncByteStream`` of ``http`` (httpx for mcp 1.x, httpx2 for
    2.x), which a response's reader insists on."""
    base: type = http.AsyncByteStream
    kind = _CAPPED_TYPES.get(base)
    if kind is None:
        kind = _CAPPED_TYPES[base] = type("CappedStream", (_Capped, base), {})
    return kind(inner, limit, over)


class ClientSession:
    """An MCP client session over streamable HTTP with ``Authorization: Bearer``; enter and
    leave it in one task (the SDK's transport runs an anyio task group).

    With ``max_response_bytes`` no HTTP response of the session is read past that many bytes:
    the request waiting for it raises :class:`ResponseTooLarge` with the response's first bytes
    at once (the SDK itself would only log the error and leave the request waiting)."""

    def __init__(
        self,
        url: str,
        bearer: str | None,
        *,
        timeout: float,
        max_response_bytes: int | None = None,
    ) -> None:
        self.url = url
        self._bearer = bearer
        self._timeout = timeout
        self._stack = contextlib.AsyncExitStack()
        self._session: Any = None
        self._limit = max_response_bytes
        self._too_large: ResponseTooLarge | None = None
        self._over = asyncio.Event()
        self._http: Any = None

    def _overflowed(self, head: bytes) -> None:
        if self._too_large is None and self._limit is not None:
            self._too_large = ResponseTooLarge(self._limit, head)
        self._over.set()

    async def _cap(self, response: Any) -> None:
        """httpx response hook: runs before the body is read."""
        if self._limit is not None:
            response.stream = _capped(self._http, response.stream, self._limit, self._overflowed)

    async def _bounded(self, coro: Awaitable[Any]) -> Any:
        """``coro``, or :class:`ResponseTooLarge` as soon as a response outgrew the limit."""
        if self._limit is None:
            return await coro
        if self._too_large is not None:
            close = getattr(coro, "close", None)
            if callable(close):
                close()
            raise self._too_large
        call = asyncio.ensure_future(coro)
        over = asyncio.ensure_future(self._over.wait())
        try:
            await asyncio.wait({call, over}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (call, over):
                if not task.done():
                    task.cancel()
            await asyncio.gather(call, over, return_exceptions=True)
        if call.done() and not call.cancelled() and call.exception() is None:
            return call.result()
        if self._too_large is not None:
            raise self._too_large
        return call.result()

    def __repr__(self) -> str:
        return f"ClientSession(url={self.url!r})"

    async def __aenter__(self) -> ClientSession:
        v = major()
        http = self._http = importlib.import_module("httpx" if v == 1 else "httpx2")
        utils = importlib.import_module("mcp.shared._httpx_utils")
        transport = importlib.import_module("mcp.client.streamable_http")
        session_mod = importlib.import_module("mcp.client.session")
        headers = {"Authorization": f"Bearer {self._bearer}"} if self._bearer else {}
        try:
            client = await self._stack.enter_async_context(
                utils.create_mcp_http_client(headers=headers, timeout=http.Timeout(self._timeout))
            )
            client.event_hooks["response"].append(self._cap)
            streams = await self._stack.enter_async_context(
                transport.streamable_http_client(self.url, http_client=client)
            )
            session = await self._stack.enter_async_context(
                session_mod.ClientSession(streams[0], streams[1])
            )
            redact_sdk_logs()
            await self._bounded(session.initialize())
        except BaseException:
            await self._stack.aclose()
            raise
        self._session = session
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._session = None
        await self._stack.aclose()

    async def _call(self, coro: Awaitable[Any]) -> dict[str, Any]:
        try:
            return _dump(await self._bounded(coro))
        except Exception as exc:
            error: Any = getattr(exc, "error", None)
            code = getattr(error, "code", None)
            if isinstance(code, int):
                raise RpcError(code, str(error.message), error.data) from None
            raise

    async def list_tools(self) -> list[dict[str, Any]]:
        tools: list[dict[str, Any]] = (await self._call(self._session.list_tools())).get(
            "tools", []
        )
        return tools

    async def call_tool(
        self, name: str, arguments: dict[str, Any], meta: dict[str, Any] | None
    ) -> dict[str, Any]:
        return await self._call(self._session.call_tool(name, arguments, meta=meta))

    async def read_resource(self, uri: str, meta: dict[str, Any] | None) -> dict[str, Any]:
        if major() >= 2:
            return await self._call(self._session.read_resource(uri, meta=meta))
        types = _types()
        params = types.ReadResourceRequestParams.model_validate(
            {"uri": uri, **({"_meta": meta} if meta else {})}
        )
        request = types.ClientRequest(types.ReadResourceRequest(params=params))
        return await self._call(self._session.send_request(request, types.ReadResourceResult))

    async def get_prompt(
        self, name: str, arguments: dict[str, str], meta: dict[str, Any] | None
    ) -> dict[str, Any]:
        if major() >= 2:
            return await self._call(self._session.get_prompt(name, arguments, meta=meta))
        types = _types()
        params = types.GetPromptRequestParams.model_validate(
            {"name": name, "arguments": arguments, **({"_meta": meta} if meta else {})}
        )
        request = types.ClientRequest(types.GetPromptRequest(params=params))
        return await self._call(self._session.send_request(request, types.GetPromptResult))
