"""The ``http.app`` the in-process LangGraph server mounts (``LANGGRAPH_HTTP``): a Starlette
app with its middleware installed the way a builder does it, ``Middleware(...)`` (the gate
passes each request to the test's ``PaymentMiddleware``: :mod:`.gate`)."""

from __future__ import annotations

from starlette.applications import Starlette
from starlette.middleware import Middleware

from tests.selling.ways_in.langgraph.gate import Gate

app = Starlette(middleware=[Middleware(Gate)])
