"""``svc``: the command-line client of the payments service (SPEC.md, "Client operations").

Built on the plugin's async :class:`~svc_gateway.service.client.ServiceClient` and its
credential store. Nothing in the plugin imports this package: loading the plugin never
imports click.
"""

from __future__ import annotations

from .main import cli, main

__all__ = ["cli", "main"]
