"""The paid agent endpoint: state machine (``flow``), handlers, plan facts, HTTP glue, assembly.

Hosts and tests import :class:`PaidEndpoint` and :func:`attach_paid_endpoint` from here.
"""

from .endpoint import AgentHandler, CreditsFn, PaidEndpoint, attach_paid_endpoint

__all__ = ["AgentHandler", "CreditsFn", "PaidEndpoint", "attach_paid_endpoint"]
