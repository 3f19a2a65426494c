"""Metering fails closed inside real Hermes (issue 43, item 12): where the svc plugin's
``tool_execution`` middleware does not run, a metered tool is blocked with a clear message by
``pre_tool_call``; it never runs free."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("hermes_cli")

from .hermes_support import run_child, section

pytestmark = pytest.mark.hermes
FINAL = "Here is your image."  # hermes_hosted.FINAL


def test_a_metered_tool_is_blocked_where_the_middleware_does_not_run(tmp_path: Path) -> None:
    settings = {
        "environment": "local",
        "baseUrl": "http://127.0.0.1:9/api/v1",  # nothing reaches the service: blocked before
        "planId": "plan-1",
        "meteredTools": {"image_gen": 1},
        "approval": "model",
    }
    run = run_child("failclosed", tmp_path, settings)
    assert section(run, "discovery")["plugin"]["error"] is None

    blocked = section(run, "without_middleware")
    assert blocked["runs"] == 0  # the tool never ran
    assert blocked["final"] == FINAL
    (message,) = blocked["tool_messages"]
    assert "image_gen is a paid tool" in message and "cannot meter it here" in message
    assert "did not run and nothing was charged" in message

    bypass = section(run, "bypass")
    assert bypass["allowed"] is None and bypass["ran"] == 1  # let through: it looked metered
    assert bypass["later_runs"] == 0  # learnt from post_tool_call: blocked from then on
    (later,) = bypass["later"]["tool_messages"]
    assert "without its tool_execution middleware" in later
    assert bypass["blocked_free_tool"] is None  # a tool nobody meters is never blocked
    logged = (run.home / "hermes" / "logs" / "errors.log").read_text()
    assert "without the svc plugin's tool_execution middleware" in logged
