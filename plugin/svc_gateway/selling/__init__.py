"""Selling: the paid flow (``flow/``), its state (``state/``) and the ways in (``ways_in/``).

What a seller builds with, and nothing else: the flow and its seam (:class:`PaidFlow`,
:class:`PaidRequest`, :class:`PaidOutcome`), the seller's handle on the service
(:class:`Payments`, or any :class:`Seller`, with its :class:`SellerSettings`), routes of an
aiohttp app (:class:`RouteConfig`, :func:`payment_middleware`, :func:`build_payment_app`) and
the chat plugin's paid endpoint (:class:`PaidEndpoint`, :func:`attach_paid_endpoint`). Selling
over MCP and A2A has its own packages (``ways_in.mcp``, ``ways_in.a2a``: optional extras).
"""

from ..service.seller import Payments, Seller, SellerSettings
from .flow.flow import PaidFlow
from .types import Outcome, PaidOutcome, PaidRequest
from .ways_in.endpoint import AgentHandler, CreditsFn, PaidEndpoint, attach_paid_endpoint
from .ways_in.middleware import PAYMENTS, PaymentMiddleware, build_payment_app, payment_middleware
from .ways_in.routes import RouteConfig

__all__ = [
    "PAYMENTS",
    "AgentHandler",
    "CreditsFn",
    "Outcome",
    "PaidEndpoint",
    "PaidFlow",
    "PaidOutcome",
    "PaidRequest",
    "PaymentMiddleware",
    "Payments",
    "RouteConfig",
    "Seller",
    "SellerSettings",
    "attach_paid_endpoint",
    "build_payment_app",
    "payment_middleware",
]
