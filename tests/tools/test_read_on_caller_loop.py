"""Every tool runs on the plugin loop with the plugin's one client, read-only ones included
(issue 42 dropped the per-loop clients: the hop there and back is about 0.07 ms against a
service round trip of tens). Observed where it happens: the plugin's client records the
thread each HTTP request to the sandbox was sent from, and each aiohttp session it made (real
HTTP over loopback).
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

from svc_gateway.host import ToolResult
from svc_gateway.sandbox import SandboxServer
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


async def test_a_read_tool_runs_on_the_plugin_loop_every_time(
    make_host: HostFactory, subscriber: dict[str, str], plan_id: str
) -> None:
    recorder = ThreadRecorder()
    gateway, _ = await make_host(subscriber["apiKey"], planId=plan_id, transport=recorder)
    first = ok(await gateway.call_tool("svc_checkBalance", {}))
    second = ok(await gateway.call_tool("svc_checkBalance", {}))
    assert recorder.last("GET", "/balance/") == PLUGIN_THREAD
    assert second == first and first["address"] == subscriber["address"]
    ok(await gateway.call_tool("svc_listPlans", {}))
    assert recorder.last("GET", "/protocol/plans") == PLUGIN_THREAD
    assert {t for _, t in recorder.sessions} == {PLUGIN_THREAD}  # one client, the plugin's


async def test_tools_that_spend_or_mint_run_on_the_plugin_loop(
    make_host: HostFactory, subscriber: dict[str, str], plan_id: str
) -> None:
    recorder = ThreadRecorder()
    gateway, handle = await make_host(subscriber["apiKey"], planId=plan_id, transport=recorder)
    bought = ok(await gateway.call_tool("svc_orderPlan", {"confirm": True}))
    assert bought["balance"] == "100"
    assert recorder.last("POST", "/order") == PLUGIN_THREAD
    assert recorder.last("GET", "/balance/") == PLUGIN_THREAD  # the order's own read-back
    ok(await gateway.call_tool("svc_getAccessToken", {}))
    assert recorder.last("POST", "delegation") == PLUGIN_THREAD
    assert plan_id in handle.core.used_plans  # plugin state changed on its own loop


async def test_a_read_tool_gives_its_errors_from_any_loop(
    make_host: HostFactory, subscriber: dict[str, str], plan_id: str
) -> None:
    recorder = ThreadRecorder()
    gateway, handle = await make_host(planId=plan_id, transport=recorder)
    for _ in range(2):
        logged_out = await gateway.call_tool("svc_checkBalance", {})
        assert logged_out.structuredContent["error"]["code"] == "not_logged_in"
    await gateway.run_command("svc_login", subscriber["apiKey"])
    unknown = await gateway.call_tool("svc_checkBalance", {"planId": "424242"})
    assert unknown.isError and "not" in unknown.structuredContent["error"]["message"].lower()
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
    assert {t for m, path, t in recorder.sent_from if "/balance/" in path} == {PLUGIN_THREAD}


async def test_logout_and_a_new_key_the_next_call_uses(
    make_host: HostFactory, sandbox: SandboxServer, subscriber: dict[str, str], plan_id: str
) -> None:
    recorder = ThreadRecorder()
    gateway, _ = await make_host(subscriber["apiKey"], planId=plan_id, transport=recorder)
    before = ok(await gateway.call_tool("svc_checkBalance", {}))
    assert before["address"] == subscriber["address"]
    old = [session for session in recorder.sessions_on(PLUGIN_THREAD) if not session.closed]
    assert old  # the client the tool used, open
    assert "Logged out" in await gateway.run_command("svc_logout")
    assert all(session.closed for session in old)  # the old key's clients are closed
    other = await sandbox.create_account("other")
    await gateway.run_command("svc_login", other["apiKey"])
    after = ok(await gateway.call_tool("svc_checkBalance", {}))
    assert after["address"] == other["address"]
    assert recorder.last("GET", "/balance/") == PLUGIN_THREAD
    assert any(not s.closed for s in recorder.sessions_on(PLUGIN_THREAD) if s not in old)


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
            assert recorder.sessions_on(thread) == []  # no client on the caller's loop
            await asyncio.to_thread(handle.close)
            recorder.sessions.clear()
            gc.collect()
    said = [str(w.message) for w in caught] + [r.getMessage() for r in caplog.records]
    assert [n for n in said if any(word in n for word in NOISE)] == []


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
