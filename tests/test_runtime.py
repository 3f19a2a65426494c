"""The plugin-owned loop: callable from any thread or loop, and it shuts down cleanly."""

from __future__ import annotations

import asyncio
import gc
import logging
import threading
import warnings

import pytest

from svc_gateway.redact import get_logger, redact
from svc_gateway.runtime import PluginRuntime, RuntimeClosed
from tests.conftest import HostFactory
from tests.helpers import fake_key


async def where() -> str:
    return threading.current_thread().name


def test_runs_on_its_own_thread_from_threads_and_loops() -> None:
    runtime = PluginRuntime()
    try:
        assert runtime.run_sync(where(), timeout=5) == "svc-plugin-loop"
        assert asyncio.run(runtime.run(where())) == "svc-plugin-loop"
        results: list[str] = []
        workers = [
            threading.Thread(target=lambda: results.append(asyncio.run(runtime.run(where()))))
            for _ in range(8)
        ]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        assert results == ["svc-plugin-loop"] * 8
    finally:
        runtime.close()


def test_close_cancels_leftovers_and_joins_the_thread() -> None:
    runtime = PluginRuntime()
    closed: list[bool] = []

    async def closer() -> None:
        closed.append(True)

    runtime.add_closer(closer)
    runtime.submit(asyncio.sleep(3600))  # a task nobody awaits
    runtime.close()
    assert closed == [True]
    assert not any(t.name == "svc-plugin-loop" for t in threading.enumerate())
    with pytest.raises(RuntimeClosed):
        runtime.submit(where())
    runtime.close()  # idempotent


async def test_a_used_plugin_closes_without_warnings(
    make_host: HostFactory, subscriber: dict[str, str], plan_id: str
) -> None:
    gateway, handle = await make_host(subscriber["apiKey"], planId=plan_id)
    assert await gateway.context_text()
    assert not (await gateway.call_tool("svc_getAccessToken", {})).isError
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        await asyncio.to_thread(handle.close)
        gc.collect()
    assert [w for w in caught if issubclass(w.category, ResourceWarning | RuntimeWarning)] == []
    assert handle.runtime.closed
    after = await gateway.call_tool("svc_checkBalance", {})
    assert after.isError and after.structuredContent["error"]["code"] == "plugin_closed"


def test_redacting_filter_masks_keys_and_tokens(caplog: pytest.LogCaptureFixture) -> None:
    key = fake_key()
    token = "eyJ4NDAyVmVyc2lvbiI6Mn0.eyJwYXlsb2FkIjp7fX0.c2ln"
    log = get_logger("svc_gateway.test")
    with caplog.at_level(logging.INFO, logger="svc_gateway.test"):
        log.info("key %s token %s", key, token)
        log.info("GET /callback/x?svc_api_key=%s", key)
        log.info("Authorization: Bearer %s", key)
    assert key not in caplog.text and token not in caplog.text
    assert key.split(":", 1)[1][:20] not in caplog.text
    assert caplog.text.count("[REDACTED]") >= 4
    assert redact("nothing secret here 0x" + "a" * 40) == "nothing secret here 0x" + "a" * 40


def test_run_passes_errors_and_cancellation_across() -> None:
    runtime = PluginRuntime()
    started = threading.Event()
    cancelled = threading.Event()

    async def fails() -> None:
        raise ValueError("from the plugin loop")

    async def waits() -> None:
        started.set()
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            cancelled.set()
            raise

    async def caller() -> None:
        with pytest.raises(ValueError, match="from the plugin loop"):
            await runtime.run(fails())
        task = asyncio.ensure_future(runtime.run(waits()))
        await asyncio.to_thread(started.wait, 10)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    try:
        asyncio.run(caller())
        assert cancelled.wait(10)  # the caller's cancel reached the plugin loop's task
    finally:
        runtime.close()
    with pytest.raises(RuntimeClosed):
        asyncio.run(runtime.run(where()))


def _render(caplog: pytest.LogCaptureFixture) -> str:
    formatter = logging.Formatter("%(message)s")
    return "\n".join(formatter.format(record) for record in caplog.records)


def test_tracebacks_and_stacks_are_redacted(caplog: pytest.LogCaptureFixture) -> None:
    key = fake_key()
    token = "eyJ4NDAyVmVyc2lvbiI6Mn0.eyJwYXlsb2FkIjp7fX0.c2ln"
    log = get_logger("svc_gateway.test.tb")
    with caplog.at_level(logging.INFO, logger="svc_gateway.test.tb"):
        try:
            raise ValueError(f"bad token {token} for key {key}")
        except ValueError:
            log.exception("request failed")
        log.info("where we are", stack_info=True, extra={"note": key})
        try:
            raise RuntimeError("payment-signature: " + token[:30] + "...")
        except RuntimeError as error:
            log.warning("oversize token", exc_info=error)
    text = _render(caplog)
    assert "Traceback" in text and "ValueError: bad token [REDACTED]" in text
    assert "RuntimeError: payment-signature: [REDACTED]" in text
    assert "Stack (most recent call last)" in text
    assert key not in text and token not in text and token[:30] not in text
    assert key.split(":", 1)[1][:20] not in text


def test_plain_words_after_token_are_not_masked(caplog: pytest.LogCaptureFixture) -> None:
    log = get_logger("svc_gateway.test.words")
    with caplog.at_level(logging.INFO, logger="svc_gateway.test.words"):
        log.info("invalid access token: signature check failed")
        log.info("api_key: missing; token: expired.")
    text = _render(caplog)
    assert "invalid access token: signature check failed" in text
    assert "api_key: missing; token: expired." in text
    assert "[REDACTED]" not in text
    assert redact("token=abc123") == "token=[REDACTED]"
    assert redact("token: " + "x" * 16) == "token: [REDACTED]"


def test_a_call_in_flight_when_the_plugin_closes_gets_runtime_closed() -> None:
    runtime = PluginRuntime()
    started = threading.Event()
    outcome: list[BaseException] = []

    async def long_call() -> None:
        started.set()
        await asyncio.sleep(3600)

    async def caller() -> None:
        try:
            await runtime.run(long_call())
        except BaseException as error:  # what the host's tool wrapper would see
            outcome.append(error)

    worker = threading.Thread(target=lambda: asyncio.run(caller()))
    worker.start()
    assert started.wait(10)
    runtime.close()
    worker.join(10)
    assert not worker.is_alive()
    assert len(outcome) == 1 and isinstance(outcome[0], RuntimeClosed)
