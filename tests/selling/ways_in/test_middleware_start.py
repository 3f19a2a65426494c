"""Issue 44: an app selling routes with an unreachable ``stateUrl`` says so at start, in one
line naming Redis (never its password) and what to do, not later as refused requests."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from aiohttp import web

from svc_gateway.sandbox import SandboxServer
from svc_gateway.selling import RouteConfig, build_payment_app
from tests.helpers import fake_key
from tests.service.test_unreachable import closed_port

pytest.importorskip("redis")


async def test_an_unreachable_state_url_is_one_line_at_start(
    sandbox: SandboxServer, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="svc_gateway.start")
    port = closed_port()
    app = build_payment_app(
        {"GET /paid": RouteConfig(plan_id="1")},
        {
            "environment": "local",
            "baseUrl": sandbox.base_url,
            "svcApiKey": fake_key("local"),
            "stateUrl": f"redis://:hunter2@127.0.0.1:{port}/0",
            "settleQueuePath": str(tmp_path / "queue.json"),
        },
    )
    runner = web.AppRunner(app)
    try:
        await runner.setup()  # the app's startup runs the check
    finally:
        await runner.cleanup()
    (line,) = [r.getMessage() for r in caplog.records if r.name == "svc_gateway.start"]
    assert line.startswith(f"Start-up check failed: Redis at 127.0.0.1:{port}/0 (stateUrl)")
    assert "connection refused" in line and "fix stateUrl" in line and "hunter2" not in line
