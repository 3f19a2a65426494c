"""The AstrBot adapter's guards, each in its own AstrBot process: an executor of another shape
refuses the plugin loudly (never a metered tool run unpaid), and a one-account gateway is logged
in only by AstrBot's admins."""

from __future__ import annotations

from pathlib import Path

import pytest

from svc_gateway.tools import TOOL_NAMES
from tests.hosts.hermes.hermes_support import Sandbox

from .support import PLAIN, AstrBotChild, ScriptedModel

pytestmark = pytest.mark.astrbot


def test_an_executor_of_another_shape_refuses_the_plugin_and_astrbot_runs_on(
    astr_sandbox: Sandbox, astr_plan: str, model: ScriptedModel, tmp_path: Path
) -> None:
    settings = {
        "environment": "local",
        "baseUrl": astr_sandbox.base_url,
        "svcApiKey": astr_sandbox.builder.api_key,
        "planId": astr_plan,
        "meteredTools": {"image_gen": 1},
    }
    spec = {"settings": settings, "model_url": model.base_url, "break_executor": True}
    child = AstrBotChild(tmp_path, spec)
    try:
        failed = child.ready["failed"]
        assert list(failed) == ["svc"], failed
        assert "meteredTools cannot be metered on this AstrBot" in failed["svc"]
        assert "call_id" in failed["svc"]  # names what changed
        assert child.ready["wrapped"] is False
        assert child.send("hello", "5001")["replies"] == [PLAIN]  # AstrBot runs on, without svc
        assert not set(TOOL_NAMES) & set(model.tools_offered())
        assert "image_gen" in model.tools_offered()
    finally:
        child.close()


def test_a_one_account_gateway_is_logged_in_and_out_only_by_astrbot_admins(
    astr_sandbox: Sandbox, model: ScriptedModel, tmp_path: Path
) -> None:
    settings = {"environment": "local", "baseUrl": astr_sandbox.base_url}
    spec = {"settings": settings, "model_url": model.base_url, "admins": ["9"]}
    child = AstrBotChild(tmp_path, spec)
    try:
        assert not child.ready["failed"], child.ready["failed"]
        key = astr_sandbox.subscriber.api_key
        refused = child.send(f"/svc_login {key}", "5002")["replies"]
        assert refused == [
            "Only an authorised user of this gateway may log it in to the payments service."
        ]
        assert "Logged in" in child.send(f"/svc_login {key}", "9")["replies"][0]
        status = child.send("/svc_login status", "9")["replies"][0]
        assert astr_sandbox.subscriber.address.lower() in status.lower()
        assert "Only an authorised" in child.send("/svc_logout", "5002")["replies"][0]
        assert "Logged out" in child.send("/svc_logout", "9")["replies"][0]
    finally:
        child.close()


def test_the_meters_notice_is_a_text_part_of_the_tools_last_result() -> None:
    """Issue 44, item 6: AstrBot makes one tool message of a ``CallToolResult``'s text parts,
    so a top-up's notice joins the last one (a message of its own when there is none)."""
    import mcp.types

    from svc_gateway.hosts.astrbot.metering import with_text_parts

    drawn = mcp.types.CallToolResult(content=[mcp.types.TextContent(type="text", text="img")])
    (joined,) = with_text_parts([drawn, "[svc] bought"])
    assert [part.text for part in joined.content] == ["img", "[svc] bought"]
    assert [part.text for part in drawn.content] == ["img"]  # the tool's own result untouched
    (alone,) = with_text_parts(["[svc] bought"])
    assert [part.text for part in alone.content] == ["[svc] bought"]
