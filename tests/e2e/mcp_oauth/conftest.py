"""The paid MCP market of tests/e2e/mcp, for the OAuth tests. Each file runs on the mcp major it
drives: the docs' recipe on mcp 2.x (what ``pip install -e '.[mcp]'`` installs; CI runs this
folder in its mcp 2.x venv too), the flow driven through the SDK's 1.x OAuth client on mcp 1.x
(the main environment: payments-py in the test extra pins mcp < 2). A file not for this major is
not collected, so ``SVC_REQUIRE_ALL=1`` sees no skips."""

from __future__ import annotations

from importlib.metadata import version

from ..mcp.conftest import make_mcp_market  # noqa: F401  (a fixture, re-exported)

MCP_MAJOR = int(version("mcp").split(".")[0])
collect_ignore = ["test_oauth_flow.py"] if MCP_MAJOR >= 2 else ["test_docs_oauth.py"]
