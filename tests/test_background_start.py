"""``register(..., background_start=True)``: a host that bounds how long loading may take
(Hermes: import + ``register()`` under 10 s) gets the tools, commands and hook at once; the paid
endpoint starts on the plugin loop after register returned (issue 43, item 11)."""

from __future__ import annotations

import logging
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

import svc_gateway
from svc_gateway.config import ConfigError
from svc_gateway.host import CollectingGateway
from tests.support import LogCollector, until


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def listening(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0


@pytest.fixture
def gate(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The slow agentHandler's import waits until this file exists."""
    path = tmp_path / "gate-open"
    monkeypatch.setenv("SVC_TEST_HANDLER_GATE", str(path))
    yield path
    path.touch()  # never leave the plugin loop waiting


def settings(tmp_path: Path, port: int, handler: str) -> dict[str, Any]:
    return {
        "environment": "local",
        "baseUrl": "http://127.0.0.1:9/api/v1",  # never called: the start makes no service call
        "planId": "plan-1",
        "enablePaidEndpoint": True,
        "paidEndpointPort": port,
        "agentHandler": handler,
        "settleQueuePath": str(tmp_path / "queue.json"),
    }


def test_the_paid_endpoint_starts_after_register_returned(
    tmp_path: Path, gate: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SVC_GATEWAY_CONFIG_DIR", str(tmp_path / "svc"))
    port = free_port()
    api = CollectingGateway(
        settings(tmp_path, port, "tests.hosts.hermes.slow_handler:answer"),
        logging.getLogger("test"),
    )
    handle = svc_gateway.register(api, background_start=True)
    try:
        # returned while the endpoint's start still waits: tools handed over, nothing bound
        assert "svc_checkBalance" in api.tools and "svc_login" in api.commands
        started = handle.extras["started"]
        assert not started.done()
        assert "paid_endpoint" not in handle.extras and not listening(port)
        gate.touch()
        started.result(timeout=20)
        endpoint = handle.extras["paid_endpoint"]
        assert endpoint.url.endswith(f":{port}/svc/agent") and listening(port)
        assert handle.core.paid_endpoint_url == endpoint.url
        answer = httpx.post(endpoint.url, json={"prompt": "hi"}, timeout=10)
        assert answer.status_code == 503  # served; the service is closed here: no free answer
    finally:
        handle.close()
    assert not listening(port)


async def test_a_start_that_fails_after_register_is_logged_not_raised(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, all_logs: LogCollector
) -> None:
    monkeypatch.setenv("SVC_GATEWAY_CONFIG_DIR", str(tmp_path / "svc"))
    port = free_port()
    api = CollectingGateway(
        settings(tmp_path, port, "no_such_module_here:answer"), logging.getLogger("test")
    )
    handle = svc_gateway.register(api, background_start=True)
    try:
        started = handle.extras["started"]
        with pytest.raises(ConfigError, match="cannot import module 'no_such_module_here'"):
            started.result(timeout=20)
        assert "svc_checkBalance" in api.tools  # the tools stay
        assert not listening(port)
        await until(lambda: "did not start" in all_logs.text)  # said by the future's callback
        (failure,) = [line for line in all_logs.lines if "did not start" in line]
        assert failure.startswith("ERROR") and "no_such_module_here" in failure
    finally:
        handle.close()
