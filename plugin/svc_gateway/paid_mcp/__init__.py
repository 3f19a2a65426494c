"""Deprecated import path: the paid MCP server lives in :mod:`svc_gateway.selling.ways_in.mcp`.

``from svc_gateway.paid_mcp import Options, create_server, serve`` keeps working and warns once.
"""

import warnings

from ..selling.ways_in.mcp import (
    Options,
    PaidMcp,
    PaidMcpServer,
    attach_paid_mcp,
    create_server,
    mount,
    serve,
)

warnings.warn(
    "svc_gateway.paid_mcp is deprecated: import the same names from "
    "svc_gateway.selling.ways_in.mcp",
    DeprecationWarning,
    stacklevel=2,
)

__all__ = [
    "Options",
    "PaidMcp",
    "PaidMcpServer",
    "attach_paid_mcp",
    "create_server",
    "mount",
    "serve",
]
