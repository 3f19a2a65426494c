"""Selling: the paid flow (``flow/``), its state (``state/``) and the ways in (``ways_in/``).

Hosts and tests import :class:`PaidEndpoint` and :func:`attach_paid_endpoint` from here;
builders import :class:`RouteConfig`, :func:`payment_middleware` and
:func:`build_payment_app` to sell routes of their own aiohttp app.
"""

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
    "PaidOutcome",
    "PaidRequest",
    "PaymentMiddleware",
    "RouteConfig",
    "attach_paid_endpoint",
    "build_payment_app",
    "payment_middleware",
]
