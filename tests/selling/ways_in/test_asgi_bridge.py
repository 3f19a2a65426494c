"""The ASGI bridge (selling/ways_in/asgi.py) that serves the MCP and A2A SDKs' Starlette apps
from an aiohttp app: what it does with an app that sends other messages, or no response."""

from __future__ import annotations

from collections.abc import AsyncIterator, MutableMapping
from typing import Any

import httpx
import pytest
from aiohttp import web

from svc_gateway.selling.ways_in.asgi import aiohttp_bridge
from tests.support import serve_app

Message = MutableMapping[str, Any]


async def chatty(scope: Any, receive: Any, send: Any) -> None:
    """Sends a message type the bridge does not write (trailers), then its answer."""
    await send({"type": "http.response.start", "status": 200, "headers": [(b"x-a", b"1")]})
    await send({"type": "http.response.trailers", "headers": []})
    await send({"type": "http.response.body", "body": b"hello", "more_body": False})


async def silent(scope: Any, receive: Any, send: Any) -> None:
    """Reads its request and never answers."""
    await receive()


@pytest.fixture
async def origin() -> AsyncIterator[str]:
    app = web.Application()
    app.router.add_route("*", "/chatty", aiohttp_bridge(chatty))
    app.router.add_route("*", "/silent", aiohttp_bridge(silent))
    async with serve_app(app, access_log=None) as origin:
        yield origin


async def test_messages_other_than_start_and_body_are_skipped(origin: str) -> None:
    async with httpx.AsyncClient(timeout=10) as http:
        response = await http.get(origin + "/chatty")
    assert (response.status_code, response.text, response.headers["x-a"]) == (200, "hello", "1")


async def test_an_app_that_never_answers_gets_a_500_not_a_hang(origin: str) -> None:
    async with httpx.AsyncClient(timeout=10) as http:
        response = await http.post(origin + "/silent", json={"a": 1})
    assert response.status_code == 500
    assert response.json() == {"error": "no response"}
