"""The buyer's MCP client session on the official SDK (both majors), capped in what it reads."""

from __future__ import annotations

import asyncio
import contextlib
import importlib
from collections.abc import AsyncIterator, Awaitable, Callable
from types import TracebackType
from typing import Any

from .mcp_sdk import RpcError, dump_model, major, redact_sdk_logs, sdk_types


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

    def __init__(
        self,
        inner: Any,
        limit: int,
        over: Callable[[bytes], None],
        error: type[ResponseTooLarge] = ResponseTooLarge,
    ) -> None:
        self._inner = inner
        self._limit = limit
        self._over = over
        self._error = error

    async def __aiter__(self) -> AsyncIterator[bytes]:
        seen: list[bytes] = []
        size = 0
        async for chunk in self._inner:
            if size + len(chunk) > self._limit:
                head = b"".join(seen) + chunk[: self._limit - size]
                self._over(head)
                raise self._error(self._limit, b"")  # the SDK may log it: no content
            seen.append(chunk)
            size += len(chunk)
            yield chunk

    async def aclose(self) -> None:
        await self._inner.aclose()


_CAPPED_TYPES: dict[type, tuple[type, type[ResponseTooLarge]]] = {}


def _capped(http: Any, inner: Any, limit: int, over: Callable[[bytes], None]) -> Any:
    """:class:`_Capped` as the ``AsyncByteStream`` of ``http`` (httpx for mcp 1.x, httpx2 for
    2.x), which a response's reader insists on. Its error is also ``http``'s ``StreamError``:
    mcp 2.x's transport answers that one as a failed read (1.x catches any error there), where
    another error would fail the session's task group and cancel the caller."""
    base: type = http.AsyncByteStream
    kinds = _CAPPED_TYPES.get(base)
    if kinds is None:
        error = type("ResponseTooLarge", (ResponseTooLarge, http.StreamError), {})
        kinds = _CAPPED_TYPES[base] = (type("CappedStream", (_Capped, base), {}), error)
    return kinds[0](inner, limit, over, kinds[1])


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
            return dump_model(await self._bounded(coro))
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
        types = sdk_types()
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
        types = sdk_types()
        params = types.GetPromptRequestParams.model_validate(
            {"name": name, "arguments": arguments, **({"_meta": meta} if meta else {})}
        )
        request = types.ClientRequest(types.GetPromptRequest(params=params))
        return await self._call(self._session.send_request(request, types.GetPromptResult))
