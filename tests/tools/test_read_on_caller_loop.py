"""Read-only tools run on the caller's own loop (no thread hop); the others on the plugin loop.

Observed where it happens: the plugin's client records the thread each HTTP request to the
sandbox was sent from, and each aiohttp session it made (real HTTP over loopback).
"""

from __future__ import annotations

import asyncio
import gc
import logging
import threading
import warnings
from collections.abc import Callable, Coroutine
from typing import Any

import aiohttp
import pytest

from svc_gateway.account.loop_clients import MAX_LOOPS, LoopClients
from svc_gateway.host import ToolResult
from svc_gateway.runtime import RuntimeClosed
from svc_gateway.sandbox import SandboxServer
from svc_gateway.service.client import ServiceClient
from tests.conftest import CountingTransport, HostFactory

PLUGIN_THREAD = "svc-plugin-loop"
#: What closing a client on a dead loop must not say.
NOISE = ("nclosed", "Event loop is closed", "destroyed but it is pending", "never awaited")


class ThreadRecorder(CountingTransport):
    """Records the thread each request was sent from and the thread each session was made on."""

    def __init__(self) -> None:
        super().__init__()
        self.sent_from: list[tuple[str, str, str]] = []  # (method, path, thread)
        self.sessions: list[tuple[aiohttp.ClientSession, str]] = []

    async def before(self, method: str, path: str) -> None:
        self.sent_from.append((method, path, threading.current_thread().name))

    def __call__(self) -> aiohttp.ClientSession:
        session = super().__call__()
        self.sessions.append((session, threading.current_thread().name))
        return session

    def last(self, method: str, fragment: str) -> str:
        """The thread the latest matching request was sent from."""
        found = [t for m, path, t in self.sent_from if m == method and fragment in path]
        assert found, f"no {method} {fragment} request in {self.sent_from}"
        return found[-1]

    def sessions_on(self, thread: str) -> list[aiohttp.ClientSession]:
        return [s for s, t in self.sessions if t == thread]


def ok(result: ToolResult) -> dict[str, Any]:
    assert not result.isError, result.structuredContent
    return result.structuredContent


def in_own_loop(
    work: Callable[[], Coroutine[Any, Any, Any]], *, close_abruptly: bool = False
) -> tuple[str, Any]:
    """Run ``work`` in this thread's own new loop: with ``asyncio.run``, or closed abruptly
    (no task cancelled, no async generator closed), as a careless host would."""
    name = threading.current_thread().name
    if not close_abruptly:
        return name, asyncio.run(work())
    loop = asyncio.new_event_loop()
    try:
        return name, loop.run_until_complete(work())
    finally:
        loop.close()


async def test_a_read_tool_runs_on_the_callers_thread_from_its_second_call(
    make_host: HostFactory, subscriber: dict[str, str], plan_id: str
) -> None:
    recorder = ThreadRecorder()
    gateway, _ = await make_host(subscriber["apiKey"], planId=plan_id, transport=recorder)
    here = threading.current_thread().name
    first = ok(await gateway.call_tool("svc_checkBalance", {}))
    assert recorder.last("GET", "/balance/") == PLUGIN_THREAD  # the first call hops
    second = ok(await gateway.call_tool("svc_checkBalance", {}))
    assert recorder.last("GET", "/balance/") == here
    assert second == first and first["address"] == subscriber["address"]
    ok(await gateway.call_tool("svc_listPlans", {}))
    assert recorder.last("GET", "/protocol/plans") == here
    ok(await gateway.call_tool("svc_listPaymentMethods", {}))
    assert recorder.last("GET", "payment-methods") == here
    assert len(recorder.sessions_on(here)) == 1  # one client for this loop, reused


async def test_tools_that_spend_or_mint_still_run_on_the_plugin_loop(
    make_host: HostFactory, subscriber: dict[str, str], plan_id: str
) -> None:
    recorder = ThreadRecorder()
    gateway, handle = await make_host(subscriber["apiKey"], planId=plan_id, transport=recorder)
    for _ in range(2):  # this loop is known: read tools now run here
        ok(await gateway.call_tool("svc_checkBalance", {}))
    bought = ok(await gateway.call_tool("svc_orderPlan", {"confirm": True}))
    assert bought["balance"] == "100"
    assert recorder.last("POST", "/order") == PLUGIN_THREAD
    assert recorder.last("GET", "/balance/") == PLUGIN_THREAD  # the order's own read-back
    ok(await gateway.call_tool("svc_getAccessToken", {}))
    assert recorder.last("POST", "delegation") == PLUGIN_THREAD
    assert plan_id in handle.core.used_plans  # plugin state changed on its own loop
    balance = ok(await gateway.call_tool("svc_checkBalance", {}))
    assert balance["balance"] == "100" and balance["isSubscriber"] is True
    assert recorder.last("GET", "/balance/") == threading.current_thread().name


async def test_a_read_tool_gives_the_same_errors_on_the_callers_loop(
    make_host: HostFactory, subscriber: dict[str, str], plan_id: str
) -> None:
    recorder = ThreadRecorder()
    gateway, handle = await make_host(planId=plan_id, transport=recorder)
    for _ in range(2):
        logged_out = await gateway.call_tool("svc_checkBalance", {})
        assert logged_out.structuredContent["error"]["code"] == "not_logged_in"
    assert handle.core.reads_here()  # the second call ran here, and still said so
    await gateway.run_command("svc_login", subscriber["apiKey"])
    unknown = await gateway.call_tool("svc_checkBalance", {"planId": "424242"})
    assert unknown.isError and "not" in unknown.structuredContent["error"]["message"].lower()
    assert recorder.last("GET", "/balance/") == threading.current_thread().name
    await asyncio.to_thread(handle.close)
    closed = await gateway.call_tool("svc_checkBalance", {})
    assert closed.structuredContent["error"]["code"] == "plugin_closed"


async def test_two_host_threads_with_their_own_loops_call_at_once(
    make_host: HostFactory, subscriber: dict[str, str], plan_id: str
) -> None:
    recorder = ThreadRecorder()
    gateway, _ = await make_host(subscriber["apiKey"], planId=plan_id, transport=recorder)
    start = threading.Barrier(2)

    async def calls() -> list[dict[str, Any]]:
        start.wait(5)
        return [ok(await gateway.call_tool("svc_checkBalance", {})) for _ in range(5)]

    (a, results_a), (b, results_b) = await asyncio.gather(
        asyncio.to_thread(in_own_loop, calls), asyncio.to_thread(in_own_loop, calls)
    )
    assert a != b
    assert results_a == results_b and len({r["balance"] for r in results_a}) == 1
    for thread in (a, b):
        sent = [t for m, path, t in recorder.sent_from if "/balance/" in path and t == thread]
        assert len(sent) == 4  # all but the first call of each thread ran on that thread
        (session,) = recorder.sessions_on(thread)
        assert session.closed  # closed by asyncio.run at the end of that thread's loop


async def test_logout_closes_the_loop_clients_and_the_next_call_uses_the_new_key(
    make_host: HostFactory, sandbox: SandboxServer, subscriber: dict[str, str], plan_id: str
) -> None:
    recorder = ThreadRecorder()
    gateway, _ = await make_host(subscriber["apiKey"], planId=plan_id, transport=recorder)
    here = threading.current_thread().name
    for _ in range(2):
        assert (
            ok(await gateway.call_tool("svc_checkBalance", {}))["address"]
            == (subscriber["address"])
        )
    (old,) = recorder.sessions_on(here)
    assert not old.closed
    assert "Logged out" in await gateway.run_command("svc_logout")
    for _ in range(10):  # closed on this loop, by the callback logout left on it
        if old.closed:
            break
        await asyncio.sleep(0)
    assert old.closed
    other = await sandbox.create_account("other")
    await gateway.run_command("svc_login", other["apiKey"])
    after = ok(await gateway.call_tool("svc_checkBalance", {}))
    assert after["address"] == other["address"]
    assert recorder.last("GET", "/balance/") == here
    old_session, new_session = recorder.sessions_on(here)
    assert old_session is old and not new_session.closed


@pytest.mark.parametrize("close_abruptly", [False, True], ids=["asyncio.run", "loop.close"])
async def test_closing_the_plugin_after_a_callers_loop_ended_says_nothing(
    make_host: HostFactory,
    subscriber: dict[str, str],
    plan_id: str,
    close_abruptly: bool,
    caplog: pytest.LogCaptureFixture,
) -> None:
    recorder = ThreadRecorder()
    gateway, handle = await make_host(subscriber["apiKey"], planId=plan_id, transport=recorder)

    async def calls() -> None:
        for _ in range(2):
            ok(await gateway.call_tool("svc_checkBalance", {}))

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with caplog.at_level(logging.DEBUG, logger="asyncio"):
            thread, _ = await asyncio.to_thread(in_own_loop, calls, close_abruptly=close_abruptly)
            (session,) = recorder.sessions_on(thread)
            await asyncio.to_thread(handle.close)
            del session
            recorder.sessions.clear()
            gc.collect()
    said = [str(w.message) for w in caught] + [r.getMessage() for r in caplog.records]
    noise = [n for n in said if any(word in n for word in NOISE)]
    if close_abruptly:
        # the loop closed its selector with the connection open: the GC closes the socket
        # (a ResourceWarning, off by default), as for any session a host leaves on that loop
        noise = [n for n in noise if not n.startswith(("unclosed <socket", "unclosed transport"))]
    assert noise == []


async def test_loops_that_call_once_each_keep_using_the_plugins_client(
    make_host: HostFactory, subscriber: dict[str, str], plan_id: str
) -> None:
    """A loop that makes one call and ends (``asyncio.run`` per call) opens no client."""
    recorder = ThreadRecorder()
    gateway, _ = await make_host(subscriber["apiKey"], planId=plan_id, transport=recorder)
    for _ in range(3):
        await asyncio.to_thread(in_own_loop, lambda: gateway.call_tool("svc_checkBalance", {}))
    assert {t for m, path, t in recorder.sent_from if "/balance/" in path} == {PLUGIN_THREAD}
    assert {t for _, t in recorder.sessions} == {PLUGIN_THREAD}


def test_the_loops_remembered_are_bounded_and_the_oldest_is_forgotten_first() -> None:
    made: list[ServiceClient] = []

    def make(session: object) -> ServiceClient:
        made.append(ServiceClient("http://127.0.0.1:9/api/v1", None))
        return made[-1]

    clients = LoopClients[object](make, lambda: None)
    loops = [asyncio.new_event_loop() for _ in range(MAX_LOOPS + 1)]

    async def use(loop: asyncio.AbstractEventLoop) -> bool:
        known = clients.admit(loop)
        clients.get(loop)
        return known

    try:
        assert [loop.run_until_complete(use(loop)) for loop in loops] == [False] * len(loops)
        assert all(loop.run_until_complete(use(loop)) for loop in loops[2:])  # still known
        assert not loops[0].run_until_complete(use(loops[0]))  # forgotten: it hops again
        assert len(made) == MAX_LOOPS + 2  # the first loop's client was made again
    finally:
        for loop in loops:
            loop.run_until_complete(clients.aclose())
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()


class _CountingLock:
    """A lock that counts how often it is taken."""

    def __init__(self) -> None:
        self.taken = 0
        self._lock = threading.Lock()

    def __enter__(self) -> None:
        self.taken += 1
        self._lock.acquire()

    def __exit__(self, *exc: object) -> None:
        self._lock.release()


def test_the_same_loop_and_session_again_find_their_client_without_the_lock() -> None:
    made: list[ServiceClient] = []
    session: list[object] = [object()]

    def make(s: object) -> ServiceClient:
        made.append(ServiceClient("http://127.0.0.1:9/api/v1", None))
        return made[-1]

    clients = LoopClients[object](make, lambda: session[0])
    lock = _CountingLock()
    clients._lock = lock  # type: ignore[assignment]
    loop, other = asyncio.new_event_loop(), asyncio.new_event_loop()

    async def get(on: asyncio.AbstractEventLoop) -> ServiceClient:
        return clients.get(on)

    try:
        first = loop.run_until_complete(get(loop))
        taken = lock.taken
        assert [loop.run_until_complete(get(loop)) for _ in range(5)] == [first] * 5
        assert clients.admit(loop)  # a loop with its client is known
        assert lock.taken == taken  # the repeated calls took no lock
        assert other.run_until_complete(get(other)) is not first  # another loop: its own
        assert loop.run_until_complete(get(loop)) is first  # and back: the loop's, found
        session[0] = object()  # a login: a new session
        fresh = loop.run_until_complete(get(loop))
        assert fresh is not first and len(made) == 3
        loop.run_until_complete(clients.aclose())
        with pytest.raises(RuntimeClosed):  # closed: nothing handed out from the shortcut
            loop.run_until_complete(get(loop))
        assert not clients.admit(loop)  # and no read runs on a caller's loop any more
    finally:
        for each in (loop, other):
            each.run_until_complete(clients.aclose())
            each.run_until_complete(each.shutdown_asyncgens())
            each.close()
