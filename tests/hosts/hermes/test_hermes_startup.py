"""The svc plugin's ``register()`` stays light inside real Hermes (issue 43, item 11): upstream
runs import + ``register()`` under a 10 s deadline and drops what registers later, so the paid
endpoint starts on the plugin's loop after ``register()`` returned, never inside it."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

pytest.importorskip("hermes_cli")

from .hermes_support import run_child, section

pytestmark = pytest.mark.hermes
#: what import + register() may take upstream before Hermes gives up on the plugin
LOAD_DEADLINE_SECS = 10.0


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_register_returns_before_the_paid_endpoint_starts(tmp_path: Path) -> None:
    port = free_port()
    settings = {
        "environment": "local",
        "baseUrl": "http://127.0.0.1:9/api/v1",  # nothing answers: the check says so, after
        "planId": "plan-1",
        "enablePaidEndpoint": True,
        "paidEndpointPort": port,
        "agentHandler": "slow_handler:answer",  # its import waits for the gate
        "settleQueuePath": str(tmp_path / "queue.json"),
    }
    gate = tmp_path / "gate-open"
    run = run_child("startup", tmp_path, settings, {"gate": str(gate), "port": port})
    plugin = section(run, "discovery")["plugin"]
    assert plugin["enabled"] is True and plugin["error"] is None and plugin["tools"] == 9
    at_return = run.report["at_return"]
    # register() returned with the endpoint's start still waiting on the gate: nothing bound
    assert at_return["started_at_return"] is False and at_return["bound_at_return"] is False
    assert at_return["register_secs"] < LOAD_DEADLINE_SECS / 2, at_return  # measured: 0.6 s
    after = section(run, "after")
    assert after["bound"] is True and after["status"] == 503  # served; the service is closed
    # the one start-up check ran on the plugin loop after register() returned, and Hermes's log
    # got one WARNING line naming the service it could not reach and what to do
    line = after["check"]["line"]
    assert after["check"]["ok"] is False and after["told"] == [["WARNING", line]]
    assert line.startswith("Start-up check failed: the service at http://127.0.0.1:9 cannot be ")
    assert "check baseUrl" in line and "'svc-gateway sandbox'" in line and "\n" not in line
