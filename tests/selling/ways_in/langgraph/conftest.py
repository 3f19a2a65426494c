"""A real LangGraph server in-process (``langgraph_api.server:app``, the app ``langgraph dev``
serves), offline, on a uvicorn of its own thread and loop for the whole session; its ``http.app``
is :mod:`.gate_app`, whose middleware sells with what each test sets (:func:`sell`).

langgraph-api reads its configuration from the environment once, at import: the variables are
set here before the first import (LANGGRAPH.md §1).

The blocking-call detector: ``langgraph dev`` activates blockbuster for the whole process, every
frame scanned, which here would also catch the loopback sandbox (sqlite, on its own loop in this
process: not the code under test). So the server runs with ``LANGGRAPH_ALLOW_BLOCKING=true``
and :func:`blocking_detector` activates the same detector, with the same exemptions
langgraph-runtime-inmem grants (its ``_enable_blockbuster``), on every call whose stack passes
through ``svc_gateway`` outside the sandbox: a sync socket, sqlite or file-system call of the
gate on a loop raises ``BlockingError`` (the request then fails, and so does its test).
``tests/selling/ways_in/langgraph/test_dev_server.py`` runs ``langgraph dev`` itself, detector
and all."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import threading
import time
from collections.abc import Callable, Coroutine, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import httpx
import pytest

from svc_gateway.service.seller import Payments
from tests.support.sellers import Seller, SellerFactory, make_seller_fixture  # noqa: F401

HERE = Path(__file__).resolve().parent
T = TypeVar("T")
GRAPHS = {name: f"{HERE / 'graphs.py'}:{name}" for name in ("echo", "boom", "slow")}
OFFLINE = {
    "LANGGRAPH_CLI_NO_ANALYTICS": "1",
    "LANGGRAPH_NO_VERSION_CHECK": "true",
    "LANGSMITH_TRACING": "false",
}


@dataclass
class LangGraphServer:
    origin: str
    loop: asyncio.AbstractEventLoop

    def run(self, work: Coroutine[Any, Any, T]) -> T:
        """``work`` on the server's loop (what the middleware's clients live on)."""
        return asyncio.run_coroutine_threadsafe(work, self.loop).result(30)


@pytest.fixture(scope="session")
def langgraph_server() -> Iterator[LangGraphServer]:
    os.environ.pop("LANGSMITH_API_KEY", None)
    os.environ.update(OFFLINE)
    os.environ.update(
        {
            "LANGSERVE_GRAPHS": json.dumps(GRAPHS),
            "LANGGRAPH_HTTP": json.dumps({"app": f"{HERE / 'gate_app.py'}:app"}),
            "DATABASE_URI": ":memory:",
            "REDIS_URI": "fake",
            "MIGRATIONS_PATH": "__inmem",
            "LANGGRAPH_RUNTIME_EDITION": "inmem",
            "LANGSMITH_LANGGRAPH_API_VARIANT": "local_dev",
            "N_JOBS_PER_WORKER": "4",
            "LANGGRAPH_DISABLE_FILE_PERSISTENCE": "true",
            "LANGGRAPH_ALLOW_BLOCKING": "true",  # blocking_detector() instead (docstring)
        }
    )
    import uvicorn
    from langgraph_api.server import app

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    config = uvicorn.Config(app, log_level="warning", lifespan="on", access_log=False)
    server = uvicorn.Server(config)
    loop = asyncio.new_event_loop()
    thread = threading.Thread(
        target=loop.run_until_complete, args=(server.serve(sockets=[sock]),), daemon=True
    )
    thread.start()
    origin = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while not server.started:
        assert time.monotonic() < deadline and thread.is_alive(), (
            "the LangGraph server did not start"
        )
        time.sleep(0.02)
    assert httpx.get(origin + "/ok").json()["ok"] is True
    detector = blocking_detector()
    detector.activate()
    try:
        yield LangGraphServer(origin, loop)
    finally:
        detector.deactivate()
    server.should_exit = True
    thread.join(30)
    sock.close()


#: what langgraph-runtime-inmem's detector lets block (``_enable_blockbuster``, 0.36.7)
ALLOWED = (
    "os.stat",
    "os.listdir",
    "os.remove",
    "io.BufferedReader.read",
    "io.BufferedWriter.write",
    "io.TextIOWrapper.read",
    "io.TextIOWrapper.write",
    "threading.Lock.acquire",
)


def blocking_detector() -> Any:
    """blockbuster as ``langgraph dev`` configures it, scanning the gate's code (docstring)."""
    from blockbuster import BlockBuster

    detector = BlockBuster(
        scanned_modules=["svc_gateway"], excluded_modules=["svc_gateway.sandbox"]
    )
    for name in [*ALLOWED, *(f for f in detector.functions if f.startswith("os.path."))]:
        detector.functions.pop(name, None)
    return detector


Sell = Callable[..., Any]


@pytest.fixture
def sell(langgraph_server: LangGraphServer) -> Iterator[Sell]:
    """``sell(seller, routes, **settings)``: the server's gate sells ``routes`` with a
    ``Payments`` handle on ``seller``'s builder (the test's own); undone at teardown."""
    from .gate import Gate

    made: list[Payments] = []

    def start(seller: Seller, routes: dict[str, Any], **settings: Any) -> Payments:
        payments = Payments.connect(
            seller.builder_key,
            environment="local",
            base_url=settings.pop("base_url", seller.sandbox.base_url),
            settleQueuePath=seller.queue_path,
            **settings,
        )
        made.append(payments)
        Gate.current = None
        Gate.options = {"payments": payments, "routes": routes}
        return payments

    yield start
    gate, Gate.options, Gate.current = Gate.current, None, None
    if gate is not None:
        langgraph_server.run(gate.aclose())
    for payments in made:
        langgraph_server.run(payments.aclose())
