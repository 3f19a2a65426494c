"""The paid MCP market of tests/e2e/mcp, for the OAuth tests (which run against mcp 1.x only: the
mcp 2.x venv runs tests/e2e/mcp, and these drive the SDK's own OAuth client)."""

from __future__ import annotations

from ..mcp.conftest import make_mcp_market  # noqa: F401  (a fixture, re-exported)
