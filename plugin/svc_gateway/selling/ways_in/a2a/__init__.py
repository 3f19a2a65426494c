"""Selling over A2A 1.x: the gateway's agent through the official a2a-sdk server, paid in band.

Needs the ``a2a`` extra; importing this package imports the SDK, so only ``enablePaidA2A`` (or a
caller that wants it) imports it.
"""

from .serve import PaidA2A, attach_paid_a2a, build_app, serve

__all__ = ["PaidA2A", "attach_paid_a2a", "build_app", "serve"]
