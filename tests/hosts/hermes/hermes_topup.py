"""Hermes child scenario ``topup``: a metered host tool in human approval mode. Chat user 77
opens an account with no credits; the call asks for a code that names the plan's purchase; the
person approves it through the real gateway pipeline; the same call then runs, buys the plan
(automatic top-up) and its tool message carries the plugin's notice of what it bought.
Imported by ``hermes_child.py``."""

from __future__ import annotations

import json
import re
from typing import Any

from hermes_child import discovery, run_section
from hermes_hosted import gateway_message, register_host_tool, turn


def scenario_topup(params: dict[str, Any], report: dict[str, Any]) -> None:
    runs: list[dict[str, Any]] = []
    run_section(report, "discovery", discovery)

    def approved_call() -> dict[str, Any]:
        register_host_tool(runs)
        opened = gateway_message("/svc_login new", "77")
        asked = turn("77")
        error = json.loads(asked["tool_messages"][0])["error"]
        code = error["pending"]["code"]
        shown = gateway_message(f"/svc_approve {code}", "77") or ""
        word = re.search(rf"/svc_approve {code} (\S+)", shown)
        approved = gateway_message(f"/svc_approve {code} {word[1] if word else ''}", "77")
        ran = turn("77")
        return {
            "opened": opened,
            "asked": error,
            "approved": approved,
            "runs": len(runs),
            "tool_messages": ran["tool_messages"],
            "spend": gateway_message("/svc_spend", "77"),
        }

    run_section(report, "approved_call", approved_call)
