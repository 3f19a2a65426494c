"""Selling over MCP: tools, resources and prompts paid in band (``_meta["x402/payment"]``).

Needs the ``mcp`` extra; importing this package does not import the SDK (only using it does).
"""

from .serve import PaidMcp, attach_paid_mcp, create_server, mount, paid_server, serve
from .server import Options, PaidMcpServer

__all__ = [
    "Options",
    "PaidMcp",
    "PaidMcpServer",
    "attach_paid_mcp",
    "create_server",
    "mount",
    "paid_server",
    "serve",
]
