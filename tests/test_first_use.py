"""A plain chat config starts at first use: what register still refuses, what the first use
refuses, how each entry point says it, and that a good config works as before."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from pathlib import Path
from typing import Any

import pytest

import svc_gateway
from svc_gateway.account.credentials import CredentialStore
from svc_gateway.config import ConfigError
from svc_gateway.host import BEFORE_PROMPT_BUILD, CollectingGateway
from svc_gateway.hosts.reference import ReferenceGateway
from svc_gateway.sandbox import SandboxServer
from svc_gateway.startup import FirstUse, starts_at_first_use

URL = "http://127.0.0.1:9/api/v1"
#: A well-formed token that names no account: only the full validation refuses it.
BAD_KEY = "local:eyJhbGciOiJub25lIn0.eyJub3QiOiJhbi1hY2NvdW50In0.c2lnbmF0dXJl"


@pytest.mark.parametrize(
    ("raw", "plain"),
    [
        ({"environment": "local", "baseUrl": URL}, True),
        ({"baseUrl": URL, "svcApiKey": BAD_KEY, "planId": "p", "approval": "human"}, True),
        ({"baseUrl": URL, "perUserAccounts": False, "meteredTools": {}, "stateUrl": None}, True),
        ({"environment": "sandbox"}, True),  # SVC_SANDBOX_BASE_URL is set below
        ({"environment": "live"}, False),  # no URL known: said at register
        ({"svcApiKey": BAD_KEY}, False),  # the environment comes from the key: validated now
        ({"baseUrl": URL, "enablePaidEndpoint": True}, False),
        ({"baseUrl": URL, "enablePaidMcp": "false"}, False),  # not JSON false
        ({"baseUrl": URL, "enablePaidA2A": 0}, False),
        ({"baseUrl": URL, "perUserAccounts": True}, False),
        ({"baseUrl": URL, "meteredTools": {"web_search": 1}}, False),
        ({"baseUrl": URL, "stateUrl": "redis://127.0.0.1:6379/0"}, False),
        ({"baseUrl": URL, "per_user_accounts": False}, False),  # the field's own name
        ({"base_url": URL, "environment": "sandbox"}, False),
        ({"baseUrl": ""}, False),
        ({"baseUrl": 8080}, False),
        ([("baseUrl", URL)], False),
    ],
)
def test_register_reads_only_plain_values_of_what_it_decides_on(
    raw: Any, plain: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SVC_SANDBOX_BASE_URL", URL)
    monkeypatch.delenv("SVC_LIVE_BASE_URL", raising=False)
    assert starts_at_first_use(raw) is plain


def test_a_host_that_delivers_no_commands_is_validated_at_register() -> None:
    """Its approval mode is decided (and said) at start."""
    assert not starts_at_first_use({"baseUrl": URL}, delivers_commands=False)


@pytest.mark.parametrize(
    ("raw", "says"),
    [
        ({"environment": "live"}, "No service URL is known for environment 'live'"),
        ({"baseUrl": URL, "stateUrl": "http://127.0.0.1:9"}, "stateUrl: must be a redis"),
        ({"baseUrl": URL, "perUserAccounts": "sometimes"}, "perUserAccounts"),
        ({"baseUrl": URL, "meteredTools": {"x": 0}}, "meteredTools"),
    ],
)
def test_what_register_decides_on_is_refused_at_register(
    raw: dict[str, Any], says: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("SVC_LIVE_BASE_URL", raising=False)
    with pytest.raises(ConfigError, match=says):
        svc_gateway.register(ReferenceGateway(raw))
    degraded = svc_gateway.register(ReferenceGateway(raw), on_config_error="degrade")
    assert isinstance(degraded, svc_gateway.DegradedPlugin) and says[:20] in degraded.config_error


@pytest.mark.parametrize(
    ("raw", "field"),
    [
        ({"environment": "local", "baseUrl": URL, "svcApiKey": BAD_KEY}, "svcApiKey"),
        ({"environment": "local", "baseUrl": "ftp://127.0.0.1"}, "baseUrl"),
        ({"environment": "local", "baseUrl": URL, "requestTimeoutSecs": 0}, "requestTimeoutSecs"),
        ({"environment": "local", "baseUrl": URL, "colour": "blue"}, "colour"),
        ({"environment": "local", "baseUrl": URL, "approval": "nobody"}, "approval"),
    ],
)
async def test_a_plain_config_refused_at_first_use_answers_every_entry_point(
    raw: dict[str, Any], field: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    gateway = ReferenceGateway(raw)
    store = CredentialStore(tmp_path, use_keyring=False)
    handle = svc_gateway.register(gateway, store=store)
    assert isinstance(handle, svc_gateway.PluginHandle)  # registered in full: validated later
    try:
        assert len(gateway.tools) == 9 and "svc_approve" in gateway.commands
        result = await gateway.call_tool("svc_checkBalance", {"planId": "p"})
        error = result.structuredContent["error"]
        assert result.isError and error["code"] == "plugin_misconfigured"
        assert f"Invalid svc plugin config: {field}: " in error["message"]
        assert "then restart the gateway" in error["hint"]
        for command in ("svc_login", "svc_logout", "svc_spend", "svc_approve"):
            assert await gateway.run_command(command, "status") == (
                f"{error['message']}. {error['hint']}"
            )
        assert await gateway.context_text() == ""
        assert gateway.hooks[BEFORE_PROMPT_BUILD][0].peek() is None  # a synchronous hook
        with pytest.raises(ConfigError, match=f"^Invalid svc plugin config: {field}: "):
            _ = handle.core
        assert handle.accounts is None
        said = [r for r in caplog.records if r.levelno >= logging.ERROR]
        assert len(said) == 1 and error["message"] in said[0].getMessage()
        assert not any(r.exc_info for r in caplog.records)  # a message, never a traceback
    finally:
        await asyncio.to_thread(handle.close)


async def test_a_good_plain_config_starts_once_at_its_first_uses(
    sandbox: SandboxServer,
    subscriber: dict[str, str],
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The first tool call, command and prompt arrive together: one plugin serves them all."""
    caplog.set_level(logging.INFO, logger="svc_gateway")
    settings = {
        "environment": "local",
        "baseUrl": sandbox.base_url,
        "svcApiKey": subscriber["apiKey"],
    }
    gateway = ReferenceGateway(settings)
    handle = svc_gateway.register(gateway, store=CredentialStore(tmp_path, use_keyring=False))
    assert handle.extras == {} and handle.accounts is None  # neither starts it
    assert not [r for r in caplog.records if "started" in r.getMessage()]
    try:
        plans, status, context = await asyncio.gather(
            gateway.call_tool("svc_listPlans", {}),
            gateway.run_command("svc_login", "status"),
            gateway.context_text(),
        )
        assert not plans.isError, plans.structuredContent
        address = subscriber["address"]
        assert status.startswith(f"Logged in to local as {address}")
        assert context == await gateway.context_text()  # no plan to show: the same nothing
        started = [r for r in caplog.records if "started; logged in as" in r.getMessage()]
        assert len(started) == 1 and address in started[0].getMessage()
        assert handle.core.session is not None and handle.core.session.address == address
        assert "receipts" in handle.extras
    finally:
        await asyncio.to_thread(handle.close)


def test_first_use_starts_once_however_many_threads_ask() -> None:
    calls: list[int] = []

    def start() -> str:
        calls.append(1)
        time.sleep(0.05)
        return "live"

    first = FirstUse(start, CollectingGateway({}, logging.getLogger("test")))
    answers: list[object] = []
    threads = [threading.Thread(target=lambda: answers.append(first.get())) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert answers == ["live"] * 8 and calls == [1]


def test_a_start_that_fails_otherwise_is_not_kept_and_runs_again() -> None:
    attempts: list[int] = []

    def start() -> str:
        attempts.append(1)
        if len(attempts) == 1:
            raise OSError("the disk was busy")
        return "live"

    first = FirstUse(start, CollectingGateway({}, logging.getLogger("test")))
    with pytest.raises(OSError):
        first.get()
    assert first.get() == "live" and len(attempts) == 2
