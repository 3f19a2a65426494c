"""Hermes child scenario ``startup``: how long the svc plugin's ``register()`` holds Hermes's
plugin loading with a paid endpoint configured, and that the endpoint comes up after it. The
endpoint's ``agentHandler`` (``slow_handler``) is slow to import until the parent's gate file
exists: register must not wait for it (upstream bounds import + register() by 10 s). Imported
by ``hermes_child.py``."""

from __future__ import annotations

import logging
import os
import socket
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from hermes_child import discovery, run_section


def listening(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0


def scenario_startup(params: dict[str, Any], report: dict[str, Any]) -> None:
    os.environ["SVC_TEST_HANDLER_GATE"] = params["gate"]
    port = int(params["port"])
    import svc_gateway.hosts.hermes as adapter

    seen: dict[str, Any] = {}
    register = adapter.register

    def timed_register(ctx: Any) -> None:  # what Hermes's loader calls, measured
        started = time.monotonic()
        register(ctx)
        seen["register_secs"] = round(time.monotonic() - started, 3)
        handle: Any = adapter.current_handle()
        seen["bound_at_return"] = listening(port)
        seen["started_at_return"] = handle.extras["started"].done()

    told: list[tuple[str, str]] = []  # the start-up check's log line, as Hermes's log gets it

    class Told(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            told.append((record.levelname, record.getMessage()))

    logging.getLogger("svc_gateway.start").addHandler(Told())
    adapter.register = timed_register  # type: ignore[assignment]
    run_section(report, "discovery", discovery)
    report["at_return"] = seen

    def after() -> dict[str, Any]:
        handle: Any = adapter.current_handle()
        Path(params["gate"]).touch()
        handle.extras["started"].result(timeout=20)
        check = handle.extras["start_check"].result(timeout=10)
        request = urllib.request.Request(
            handle.extras["paid_endpoint"].url,
            data=b'{"prompt": "hi"}',
            headers={"Content-Type": "application/json"},
            method="POST",
        )
        try:
            with urllib.request.urlopen(request, timeout=10) as answer:
                status = answer.status
        except urllib.error.HTTPError as error:
            status = error.code
        return {
            "bound": listening(port),
            "status": status,
            "check": {"line": check.line, "ok": check.ok},
            "told": told,
        }

    run_section(report, "after", after)
