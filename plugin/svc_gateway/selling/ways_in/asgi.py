"""An ASGI app (the MCP and A2A SDKs' Starlette apps) served by an aiohttp handler, on the
aiohttp app's own loop: how a host's web app, or the paid endpoint's, also serves them."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from aiohttp import web

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]


def aiohttp_bridge(asgi: Callable[..., Awaitable[None]]) -> Callable[..., Awaitable[Any]]:
    """An aiohttp handler that runs the ASGI app for the request (same loop)."""

    async def handle(request: web.Request) -> web.StreamResponse:
        transport = request.transport
        sockname = transport.get_extra_info("sockname") if transport is not None else None
        host, port = (sockname or ("127.0.0.1", 0))[:2]
        scope: Scope = {
            "type": "http",
            "asgi": {"version": "3.0"},
            "http_version": "1.1",
            "method": request.method,
            "scheme": request.scheme,
            "path": request.path,
            "raw_path": request.raw_path.split("?")[0].encode(),
            "query_string": request.query_string.encode(),
            "root_path": "",
            "headers": [(k.lower(), v) for k, v in request.raw_headers],
            "server": (host, port),
            "client": (request.remote or "", 0),
        }
        state: dict[str, Any] = {"response": None, "body_done": False}

        async def receive() -> Message:
            if not state["body_done"]:
                chunk = await request.content.read(64 * 1024)
                state["body_done"] = request.content.at_eof()
                return {"type": "http.request", "body": chunk, "more_body": not state["body_done"]}
            await asyncio.Event().wait()  # no disconnect signal: wait until cancelled
            return {"type": "http.disconnect"}  # pragma: no cover

        async def send(message: Message) -> None:
            if message["type"] == "http.response.start":
                response = web.StreamResponse(status=int(message["status"]))
                for key, value in message.get("headers") or []:
                    response.headers.add(
                        bytes(key).decode("latin-1"), bytes(value).decode("latin-1")
                    )
                await response.prepare(request)
                state["response"] = response
            elif message["type"] == "http.response.body":
                response = state["response"]
                await response.write(bytes(message.get("body") or b""))
                if not message.get("more_body"):
                    await response.write_eof()

        await asgi(scope, receive, send)
        response = state["response"]
        if response is None:
            return web.json_response({"error": "no response"}, status=500)
        assert isinstance(response, web.StreamResponse)
        return response

    return handle
