"""Build manifest.json from the code, so the two cannot drift (a test compares them).

Run ``python -m svc_gateway.manifest`` to rewrite manifest.json after changing config or tools.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from . import __version__
from .config import config_schema
from .tools import TOOL_NAMES, TOOLS

COMMANDS = [
    {
        "name": "svc_login",
        "description": "Log in to the payments service (browser, or <env>:<API_KEY> headless)",
        "args": "[env | env:API_KEY | status]",
    },
    {"name": "svc_logout", "description": "Log out of the payments service and forget the key"},
    {"name": "svc_spend", "description": "What you paid for on this gateway"},
    {"name": "svc_earnings", "description": "What this gateway earned (operator only)"},
    {
        "name": "svc_approve",
        "description": "Approve a pending purchase with its code (only you can)",
        "args": "<code>",
    },
    {"name": "svc_deny", "description": "Drop a pending purchase", "args": "<code>"},
    {
        "name": "svc_allow",
        "description": "Let paid queries spend up to an amount without a code (or list, or off)",
        "args": "[5 USD per day | off]",
    },
]


def build_manifest() -> dict[str, Any]:
    return {
        "id": "svc",
        "name": "Agent Payments Service",
        "version": __version__,
        "description": (
            "Pay and get paid from a chat gateway: nine svc_* tools, /svc_login and "
            "/svc_logout, the credit balance in context, and a paid agent endpoint."
        ),
        "entryPoints": {
            "python": "svc_gateway:register",
            "hermes_agent.plugins": "svc_gateway.hosts.hermes",
            "console": "svc-gateway",
        },
        "tools": [{"name": n, "description": TOOLS[n].description} for n in TOOL_NAMES],
        "commands": COMMANDS,
        "hooks": ["before_prompt_build", "around_tool_call"],
        "configSchema": config_schema(),
    }


def render() -> str:
    return json.dumps(build_manifest(), indent=2, ensure_ascii=False) + "\n"


if __name__ == "__main__":  # pragma: no cover
    target = Path(sys.argv[1]) if len(sys.argv) > 1 else Path("manifest.json")
    target.write_text(render())
    print(f"wrote {target}")
