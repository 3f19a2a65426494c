"""The local sandbox of the Agent Payments Service: its REST API on loopback over SQLite.

A faithful stand-in for the hosted service (SPEC.md, WIRE.md §2–§8), so the plugin and its
tests run offline against the same HTTP the hosted service sees.
"""

from __future__ import annotations

from .app import create_app
from .clock import ManualClock
from .server import SandboxServer, main_sandbox, start_sandbox

__all__ = ["ManualClock", "SandboxServer", "create_app", "main_sandbox", "start_sandbox"]
