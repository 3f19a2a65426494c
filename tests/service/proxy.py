"""A recording, fault-injecting reverse proxy on 127.0.0.1, in front of the local sandbox.

Real HTTP on both sides, so a fault test sees exactly what a client would: the service did the
work but the answer was lost, the connection dropped, the service hung or dripped its answer.
Every request is recorded (method, path, query, headers, body), even when upstream answers 404.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import aiohttp
from aiohttp import web
from yarl import URL

HOP_BY_HOP = frozenset(
    {"connection", "keep-alive", "transfer-encoding", "content-length", "host", "upgrade"}
)


@dataclass(frozen=True)
class Recorded:
    """One request as it arrived at the proxy."""

    method: str
    path: str
    query: str
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body) if self.body else None


@dataclass(frozen=True)
class Forwarded:
    """Upstream's answer to a forwarded request."""

    status: int
    headers: dict[str, str]
    body: bytes

    def response(self) -> web.Response:
        return web.Response(status=self.status, body=self.body, headers=self.headers)


CLOSING = web.AppKey("closing", asyncio.Event)
"""Set when the proxy closes: hung handlers end instead of holding the test's teardown."""

Forward = Callable[[], Awaitable[Forwarded]]
Fault = Callable[[web.Request, Forward], Awaitable[web.StreamResponse | None]]
"""Answer a request: forward it (or not) and return the response, or ``None`` to drop the
connection without an answer."""


@dataclass
class FaultProxy:
    upstream: str
    """Upstream origin, e.g. ``http://127.0.0.1:8123`` (paths are passed through unchanged)."""
    calls: Counter[str] = field(default_factory=Counter)
    faults: dict[str, list[Fault]] = field(default_factory=dict)
    always: dict[str, Fault] = field(default_factory=dict)
    recorded: list[Recorded] = field(default_factory=list)
    _runner: web.AppRunner | None = None
    _session: aiohttp.ClientSession | None = None
    _closing: asyncio.Event | None = None
    origin: str = ""

    async def start(self) -> FaultProxy:
        app = web.Application(client_max_size=16 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", self._handle)
        app[CLOSING] = self._closing = asyncio.Event()
        self._runner = web.AppRunner(
            app, access_log=None, handle_signals=False, shutdown_timeout=0.5
        )
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        server = site._server
        assert server is not None and server.sockets  # type: ignore[union-attr]
        port = server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.origin = f"http://127.0.0.1:{port}"
        self._session = aiohttp.ClientSession(cookie_jar=aiohttp.DummyCookieJar())
        return self

    def url(self, upstream_url: str) -> str:
        """The proxy's URL for an upstream URL (e.g. the sandbox's ``base_url``)."""
        return self.origin + URL(upstream_url).path.rstrip("/")

    def clear(self) -> None:
        self.recorded.clear()
        self.calls.clear()

    async def close(self) -> None:
        if self._closing is not None:
            self._closing.set()
        if self._session is not None:
            await self._session.close()
        if self._runner is not None:
            await self._runner.cleanup()

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.read()
        headers = {k: v for k, v in request.headers.items()}
        self.recorded.append(
            Recorded(request.method, request.path, request.query_string, headers, body)
        )
        key = request.path.split("/api/v1/", 1)[-1]
        self.calls[key] += 1

        async def forward() -> Forwarded:
            assert self._session is not None
            out = {k: v for k, v in headers.items() if k.lower() not in HOP_BY_HOP}
            target = URL(self.upstream + request.path_qs, encoded=True)
            async with self._session.request(
                request.method, target, headers=out, data=body, allow_redirects=False
            ) as answer:
                raw = await answer.read()
                kept = {k: v for k, v in answer.headers.items() if k.lower() not in HOP_BY_HOP}
                return Forwarded(answer.status, kept, raw)

        queue = self.faults.get(key)
        fault = queue.pop(0) if queue else self.always.get(key)
        if fault is None:
            return (await forward()).response()
        result = await fault(request, forward)
        if result is None:
            if request.transport is not None:
                request.transport.abort()
            return web.Response(status=204)
        return result


async def start_proxy(upstream_base_url: str) -> FaultProxy:
    origin = str(URL(upstream_base_url).origin())
    return await FaultProxy(origin).start()


# -- faults ----------------------------------------------------------------------------------


def canned(status: int, body: Any = None, **headers: str) -> Fault:
    """Answer without asking upstream (a JSON body, or raw text when ``body`` is a str)."""

    async def fault(request: web.Request, forward: Forward) -> web.StreamResponse:
        if isinstance(body, str):
            return web.Response(status=status, text=body, headers=headers)
        return web.json_response(body if body is not None else {}, status=status, headers=headers)

    return fault


def answer_lost(status: int = 500) -> Fault:
    """Upstream did the work; its answer never arrived, an error came instead."""

    async def fault(request: web.Request, forward: Forward) -> web.StreamResponse:
        await forward()
        return web.json_response({"code": "TEST.LOST", "message": "answer lost"}, status=status)

    return fault


def reset_after_forward() -> Fault:
    """Upstream did the work, then the connection dropped before any answer."""

    async def fault(request: web.Request, forward: Forward) -> None:
        await forward()
        return None

    return fault


def drop() -> Fault:
    """The connection drops before upstream sees the request."""

    async def fault(request: web.Request, forward: Forward) -> None:
        return None

    return fault


def slow_drip(interval: float, chunks: int, status: int = 200) -> Fault:
    """Headers at once, then one byte of a JSON body every ``interval`` seconds."""

    async def fault(request: web.Request, forward: Forward) -> web.StreamResponse:
        response = web.StreamResponse(status=status, headers={"Content-Type": "application/json"})
        response.content_length = chunks + 2
        await response.prepare(request)
        await response.write(b"{")
        for _ in range(chunks):
            await asyncio.sleep(interval)
            await response.write(b" ")
        await response.write(b"}")
        return response

    return fault


def hang(seconds: float) -> Fault:
    """Accept the request and say nothing for ``seconds`` (or until the proxy closes)."""

    async def fault(request: web.Request, forward: Forward) -> web.StreamResponse:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(request.app[CLOSING].wait(), seconds)
        return web.json_response({})

    return fault
