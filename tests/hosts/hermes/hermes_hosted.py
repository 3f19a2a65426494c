"""Hermes child scenario ``hosted``: a host tool metered through the ``tool_execution``
middleware in a real agent turn (fake model), per chat user.

The host's own tool ``image_gen`` is registered in Hermes's tool registry (toolset
``hosttools``). Chat user 42 links their own key through the real gateway pipeline
(``GatewayRunner._handle_message``, which fires ``pre_gateway_dispatch`` first); then agent turns
run as user 42 (credits: the tool runs, one call is charged) and as user 77 (no account: the tool
is blocked and never runs). Imported by ``hermes_child.py``.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from typing import Any

from hermes_child import discovery, gateway_command, hermes, run_section

FINAL = "Here is your image."
_runners: dict[str, Any] = {}


def gateway_message(text: str, user_id: str) -> str | None:
    """``text`` sent by Telegram user ``user_id`` through ``GatewayRunner._handle_message``."""
    config = hermes("gateway.config")
    runner = _runners.get("runner")
    if runner is None:  # one gateway per process, as in a real deployment
        runner = _runners["runner"] = hermes("gateway.run").GatewayRunner(config.GatewayConfig())
    source = hermes("gateway.session").SessionSource(
        platform=config.Platform.TELEGRAM,
        chat_id=f"chat-{user_id}",
        chat_type="dm",
        user_id=user_id,
        user_name=f"user {user_id}",
    )
    event = hermes("gateway.platforms.base").MessageEvent(text=text, source=source)
    reply: str | None = asyncio.run(runner._handle_message(event))
    return reply


def register_host_tool(runs: list[dict[str, Any]]) -> None:
    from tools.registry import registry

    def image_gen(args: dict[str, Any], **_kwargs: Any) -> str:
        runs.append(dict(args))
        return json.dumps({"image": f"img-{len(runs)}", "prompt": args.get("prompt")})

    registry.register(
        name="image_gen",
        toolset="hosttools",
        schema={
            "name": "image_gen",
            "description": "Draw an image",
            "parameters": {"type": "object", "properties": {"prompt": {"type": "string"}}},
        },
        handler=image_gen,
        description="Draw an image",
    )


def turn(user_id: str) -> dict[str, Any]:
    from run_agent import AIAgent

    fake_llm = hermes("fake_llm").FakeLLM("image_gen", {"prompt": "a cat"}, FINAL)
    with fake_llm as llm:
        agent = AIAgent(
            base_url=llm.base_url,
            api_key="sk-fake",
            provider="custom",
            model="fake-model",
            quiet_mode=True,
            enabled_toolsets=["hosttools"],
            skip_context_files=True,
            skip_memory=True,
            platform="telegram",
            user_id=user_id,
            max_iterations=4,
            tool_delay=0,
        )
        result = agent.run_conversation(
            user_message="Draw a cat", task_id=f"task-{uuid.uuid4().hex[:8]}"
        )
        tool_messages = [
            m.get("content")
            for body in llm.requests
            for m in body.get("messages") or []
            if m.get("role") == "tool"
        ]
    return {"final": result.get("final_response"), "tool_messages": tool_messages}


def scenario_hosted(params: dict[str, Any], report: dict[str, Any]) -> None:
    runs: list[dict[str, Any]] = []
    run_section(report, "discovery", discovery)

    def setup() -> dict[str, Any]:
        register_host_tool(runs)
        from hermes_cli.plugins import get_plugin_manager

        middleware = get_plugin_manager()._middleware.get("tool_execution", [])
        linked = gateway_command(f"/svc_login {params['userKey']}")  # sent by user 42
        return {"middleware": len(middleware), "linked": linked}

    run_section(report, "setup", setup)

    def paid_turn() -> dict[str, Any]:
        out = turn("42")
        out["runs"] = len(runs)
        return out

    run_section(report, "paid_turn", paid_turn)

    def blocked_turn() -> dict[str, Any]:
        before = len(runs)
        out = turn("77")
        out["ran"] = len(runs) - before
        return out

    run_section(report, "blocked_turn", blocked_turn)

    def onboarded_turn() -> dict[str, Any]:
        """User 77 consents in the chat (the real gateway pipeline names them), then tries
        again: an account of their own, but no credits: blocked with the price."""
        opened = gateway_message("/svc_login new", "77")
        before = len(runs)
        out = turn("77")
        out["opened"] = opened
        out["ran"] = len(runs) - before
        out["status_77"] = gateway_message("/svc_login status", "77")
        return out

    run_section(report, "onboarded_turn", onboarded_turn)

    def receipts() -> dict[str, Any]:
        from hermes_cli.plugins import get_plugin_command_handler, resolve_plugin_command_result

        earnings = get_plugin_command_handler("svc-earnings")
        return {
            "spend_42": gateway_command("/svc_spend"),  # the gateway's sender: user 42
            "earnings_cli": resolve_plugin_command_result(earnings("")),  # CLI: the operator
            "earnings_42": gateway_command("/svc_earnings"),
        }

    run_section(report, "receipts", receipts)
