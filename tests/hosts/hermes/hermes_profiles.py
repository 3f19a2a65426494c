"""Hermes child scenario ``profiles``: two profiles of one gateway process register the svc
plugin (upstream multiplexes profiles in one gateway: one ``PluginManager`` per profile, each
calling ``register()`` with its own ``PluginContext``), and both keep a live plugin whose tools
answer. Imported by ``hermes_child.py``."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from hermes_child import discovery, run_section


def scenario_profiles(params: dict[str, Any], report: dict[str, Any]) -> None:
    run_section(report, "discovery", discovery)

    def two_profiles() -> dict[str, Any]:
        from hermes_cli.plugins import PluginContext, PluginManager, get_plugin_manager
        from tools.registry import registry

        import svc_gateway.hosts.hermes as adapter

        args = {"planId": params["planId"]}
        entry = registry.get_entry("svc_checkBalance")
        assert entry is not None
        first_handle, first_tool = adapter.current_handle(), entry.handler
        # the second profile: a plugin manager of its own, the same plugin module
        (manifest,) = [
            p.manifest for p in get_plugin_manager()._plugins.values() if p.manifest.key == "svc"
        ]
        second_ctx = PluginContext(manifest, PluginManager())
        adapter.register(second_ctx)
        second_handle = adapter.current_handle()
        entry = registry.get_entry("svc_checkBalance")
        assert entry is not None
        second_tool = entry.handler
        return {
            "distinct_handles": first_handle is not second_handle,
            "first_closed": first_handle.runtime.closed,  # type: ignore[union-attr]
            "second_closed": second_handle.runtime.closed,  # type: ignore[union-attr]
            "first_answer": json.loads(asyncio.run(first_tool(args, session_id="p1"))),
            "second_answer": json.loads(asyncio.run(second_tool(args, session_id="p2"))),
        }

    run_section(report, "two_profiles", two_profiles)
