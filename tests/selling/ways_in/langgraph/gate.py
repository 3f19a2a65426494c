"""The gate of the in-process server's ``http.app`` (:mod:`.gate_app`): langgraph-api reads its
configuration once per process, but each test sells with its own seller and routes, so
:class:`Gate` (installed as the app's middleware) passes each request to the
``PaymentMiddleware`` the running test built (conftest.py's ``sell``), or straight through. It
lives in a module of its own: langgraph-api loads the app file by path, as a module of another
name, and this class must be the one the tests set."""

from __future__ import annotations

from typing import Any

from svc_gateway.selling.ways_in.langgraph import PaymentMiddleware


class Gate:
    #: what the running test sells with: ``{"payments": ..., "routes": ...}``, or ``None``
    options: dict[str, Any] | None = None
    current: PaymentMiddleware | None = None

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or Gate.options is None:
            await self.app(scope, receive, send)
            return
        if Gate.current is None:
            Gate.current = PaymentMiddleware(self.app, **Gate.options)
        await Gate.current(scope, receive, send)
