"""The nine svc_* tools. Importing this package declares them in :data:`TOOLS`."""

from __future__ import annotations

from . import builder, query, subscriber
from .base import TOOLS, Tool, execute, to_spec

TOOL_NAMES: tuple[str, ...] = (
    "svc_checkBalance",
    "svc_getAccessToken",
    "svc_orderPlan",
    "svc_orderFiatPlan",
    "svc_listPaymentMethods",
    "svc_queryAgent",
    "svc_registerAgent",
    "svc_createPlan",
    "svc_listPlans",
)

__all__ = ["TOOLS", "TOOL_NAMES", "Tool", "builder", "execute", "query", "subscriber", "to_spec"]
