"""Selling: the paid flow (``flow``) and its two ways in, the paid endpoint and the middleware.

Hosts and tests import :class:`PaidEndpoint` and :func:`attach_paid_endpoint` from here;
builders import :class:`RouteConfig`, :func:`payment_middleware` and
:func:`build_payment_app` to sell routes of their own aiohttp app.
"""

from .endpoint import AgentHandler, CreditsFn, PaidEndpoint, attach_paid_endpoint
from .middleware import PAYMENTS, PaymentMiddleware, build_payment_app, payment_middleware
from .outcome import Outcome, PaidOutcome, PaidRequest
from .routes import RouteConfig

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
