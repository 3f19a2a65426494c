"""Deprecated import path: selling lives in :mod:`svc_gateway.selling` (same names).

``from svc_gateway.paid import RouteConfig, build_payment_app`` keeps working and warns once.
"""

import warnings

from ..selling import (
    PAYMENTS,
    AgentHandler,
    CreditsFn,
    Outcome,
    PaidEndpoint,
    PaidOutcome,
    PaidRequest,
    PaymentMiddleware,
    RouteConfig,
    attach_paid_endpoint,
    build_payment_app,
    payment_middleware,
)

warnings.warn(
    "svc_gateway.paid is deprecated: import the same names from svc_gateway.selling",
    DeprecationWarning,
    stacklevel=2,
)

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
