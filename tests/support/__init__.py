"""What tests in every folder share: serve an app on loopback, wait for a condition, collect logs.

Fixtures built on these (markets, stub markets, a redis-server, ``all_logs``) are in
:mod:`tests.support.fixtures`, registered for the whole suite by ``tests/conftest.py``; the
pieces they are made of are beside it (``market``, ``sellers``, ``stub_service``,
``redis_server``, ``replica``). This module needs only aiohttp and the standard library, so the
MCP, A2A and AstrBot environments can import it too.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any

from aiohttp import web

from svc_gateway.encoding import decode_b64_json


@asynccontextmanager
async def serve_app(app: web.Application, **runner: Any) -> AsyncIterator[str]:
    """Serve ``app`` on 127.0.0.1 (a free port) on the running loop; yields its origin,
    ``http://127.0.0.1:PORT``, and cleans the runner up on exit. ``runner`` goes to
    :class:`aiohttp.web.AppRunner` (``access_log=None``, ``shutdown_timeout=0.1``...)."""
    app_runner = web.AppRunner(app, **runner)
    await app_runner.setup()
    try:
        await web.TCPSite(app_runner, "127.0.0.1", 0).start()
        yield f"http://127.0.0.1:{app_runner.addresses[0][1]}"
    finally:
        await app_runner.cleanup()


async def until(condition: Callable[[], object], seconds: float = 10.0) -> None:
    """Wait (bounded: ``seconds``) for ``condition()`` to become true, polling every 20 ms."""
    for _ in range(max(1, int(seconds / 0.02))):
        if condition():
            return
        await asyncio.sleep(0.02)
    raise AssertionError(f"the condition never became true (waited {seconds:g} s)")


class LogCollector(logging.Handler):
    """Every formatted log line of a test (setup to teardown, any thread, tracebacks too)."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(self.format(record))

    @property
    def text(self) -> str:
        return "\n".join(self.lines)


@contextmanager
def collecting_logs() -> Iterator[LogCollector]:
    """Collect every log line (DEBUG and up, every logger) while the block runs."""
    root = logging.getLogger()
    collector, level = LogCollector(), root.level
    root.addHandler(collector)
    root.setLevel(logging.DEBUG)
    try:
        yield collector
    finally:
        root.removeHandler(collector)
        root.setLevel(level)


# every API key and access token starts with base64 '{"'; so do the (public) payment headers
_B64_JSON = re.compile(r"eyJ[A-Za-z0-9_+/=.-]{8,}")


def leaked_secrets(text: str) -> list[str]:
    """Base64-JSON strings in ``text`` that are not a payment envelope or receipt (which are
    public, and which httpcore's debug log shows as response headers)."""
    leaks = []
    for match in _B64_JSON.findall(text):
        parts = match.split(".")
        decoded = decode_b64_json(parts[1] if len(parts) == 3 else match)
        # an envelope, or a receipt (a refused settle's has no creditsRedeemed)
        receipt = {"success", "transaction"} <= set(decoded or {})
        if decoded is not None and (
            "accepts" in decoded or "creditsRedeemed" in decoded or receipt
        ):
            continue
        leaks.append(match[:12] + "...")
    return leaks
