"""Hermes child scenario ``failclosed``: a metered host tool where the svc plugin's
``tool_execution`` middleware does not run (issue 43, item 12). Upstream's query mode, cron,
dashboard and TUI workers deliver hooks but not the middleware (#105827); 0.19.0 always delivers
it, so the scenario takes the middleware out of the list Hermes runs (the one fault injected) and
drives real agent turns and Hermes's own hook entry points. Imported by ``hermes_child.py``."""

from __future__ import annotations

import json
from typing import Any

from hermes_child import discovery, run_section
from hermes_hosted import register_host_tool, turn


def scenario_failclosed(params: dict[str, Any], report: dict[str, Any]) -> None:
    runs: list[dict[str, Any]] = []
    run_section(report, "discovery", discovery)

    def without_middleware() -> dict[str, Any]:
        from hermes_cli.plugins import get_plugin_manager

        register_host_tool(runs)
        listed = get_plugin_manager()._middleware["tool_execution"]
        (ours,) = [cb for cb in listed if cb.__name__ == "svc_tool_execution"]
        listed.remove(ours)  # this surface runs tools without it
        try:
            out = turn("42")
        finally:
            listed.append(ours)
        out["runs"] = len(runs)
        return out

    run_section(report, "without_middleware", without_middleware)

    def bypass() -> dict[str, Any]:
        """A surface that runs hooks and the tool, but not the middleware: the guard lets the
        first call through (the middleware is listed), learns from ``post_tool_call`` that it
        ran unmetered, and blocks every later one."""
        from hermes_cli.plugins import invoke_hook, resolve_pre_tool_block
        from tools.registry import registry

        ids = {"task_id": "t-bypass", "session_id": "s-bypass", "tool_call_id": "call-bypass"}
        allowed = resolve_pre_tool_block("image_gen", {"prompt": "a dog"}, **ids)
        before = len(runs)
        result = registry.dispatch("image_gen", {"prompt": "a dog"}, task_id="t-bypass")
        invoke_hook(
            "post_tool_call",
            tool_name="image_gen",
            args={"prompt": "a dog"},
            result=result,
            status="ok",
            duration_ms=1,
            **ids,
        )
        ran = len(runs) - before
        later = turn("42")
        return {
            "allowed": allowed,
            "ran": ran,
            "later": later,
            "later_runs": len(runs) - before - ran,
            "blocked_free_tool": resolve_pre_tool_block("read_file", {"path": "x"}, **ids),
        }

    run_section(report, "bypass", bypass)
    report["runs"] = json.loads(json.dumps(runs))
