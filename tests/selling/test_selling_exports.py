"""``svc_gateway.selling`` offers the seller's names only (issue 42): each name in ``__all__``
imports, none is private, and the list is pinned (a change to it is a change to the API)."""

from __future__ import annotations

import importlib

import svc_gateway.selling as selling

SELLERS_NAMES = [
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


def test_the_exported_names_are_pinned() -> None:
    assert sorted(selling.__all__) == sorted(SELLERS_NAMES)
    assert len(set(selling.__all__)) == len(selling.__all__)


def test_every_exported_name_imports_and_none_is_private() -> None:
    module = importlib.import_module("svc_gateway.selling")
    for name in selling.__all__:
        assert not name.startswith("_"), name
        assert getattr(module, name) is not None, name
        exec(f"from svc_gateway.selling import {name}", {})
