"""Sell a LangGraph deployment (or any ASGI app): the ``langgraph`` extra.

``build_payment_app(payments, routes)`` and the pure-ASGI ``PaymentMiddleware`` gate the
routes of a Starlette/FastAPI app, such as the one ``langgraph.json``'s ``http.app`` names
(:mod:`.asgi`). Nothing here imports Starlette, FastAPI or LangSmith until it is used.
"""

from ..routes import RouteConfig
from .asgi import PaymentMiddleware, Routes, build_payment_app

__all__ = ["PaymentMiddleware", "RouteConfig", "Routes", "build_payment_app"]
