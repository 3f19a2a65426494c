"""Issue 14: login messages agree with the state (status after logout, other environments,
who is logged in before a browser flow, no WARNING line over the chat prompt)."""

from __future__ import annotations

import asyncio
import logging
import threading

import httpx
import pytest

from svc_gateway.chat.commands import LOGIN_USAGE
from svc_gateway.hosts.reference import ReferenceGateway
from svc_gateway.sandbox import SandboxServer
from tests.conftest import HostFactory


def _browser(url: str) -> bool:
    threading.Thread(target=httpx.get, args=(url,), kwargs={"follow_redirects": True}).start()
    return True


async def _browser_login(gateway: ReferenceGateway, handle: object) -> None:
    await gateway.run_command("svc_login", "")
    core = handle.core  # type: ignore[attr-defined]
    for _ in range(200):
        if core.session is not None and "complete" in await gateway.run_command(
            "svc_login", "status"
        ):
            return
        await asyncio.sleep(0.05)
    raise AssertionError("the browser login did not complete")


async def test_status_after_logout_does_not_report_the_old_browser_login(
    make_host: HostFactory, sandbox: SandboxServer
) -> None:
    gateway, handle = await make_host(open_browser=_browser, frontendUrl=sandbox.origin)
    await _browser_login(gateway, handle)
    assert "Browser login complete" in await gateway.run_command("svc_login", "status")
    await gateway.run_command("svc_logout")
    status = await gateway.run_command("svc_login", "status")
    assert status.startswith("Not logged in")
    assert "Browser login complete" not in status and "key stored" not in status


async def test_a_newer_key_login_clears_the_old_browser_note(
    make_host: HostFactory, sandbox: SandboxServer, subscriber: dict[str, str]
) -> None:
    gateway, handle = await make_host(open_browser=_browser, frontendUrl=sandbox.origin)
    await _browser_login(gateway, handle)
    await gateway.run_command("svc_login", subscriber["apiKey"])
    status = await gateway.run_command("svc_login", "status")
    assert f"as {subscriber['address']}" in status
    assert "Browser login complete" not in status


async def test_another_environment_is_refused_at_once(make_host: HostFactory) -> None:
    opened: list[str] = []
    gateway, handle = await make_host(open_browser=lambda url: bool(opened.append(url)) or True)
    for env in ("sandbox", "live"):
        reply = await gateway.run_command("svc_login", env)
        assert reply.startswith("This gateway is configured for local; use /svc_login"), reply
    assert opened == [] and handle.commands.pending is None


def test_usage_lists_every_environment() -> None:
    assert "[sandbox|live|local]" in LOGIN_USAGE


async def test_a_browser_login_while_logged_in_says_who_first(
    make_host: HostFactory, subscriber: dict[str, str], sandbox: SandboxServer
) -> None:
    gateway, _ = await make_host(
        subscriber["apiKey"], open_browser=lambda url: False, frontendUrl=sandbox.origin
    )
    reply = await gateway.run_command("svc_login", "local")
    assert reply.startswith(f"You are logged in to local as {subscriber['address']}")
    assert "Could not open a browser" in reply


async def test_a_refused_browser_key_logs_no_warning(
    make_host: HostFactory, sandbox: SandboxServer, caplog: pytest.LogCaptureFixture
) -> None:
    from svc_gateway.chat.browser_login import BrowserLogin
    from tests.helpers import fake_key

    caplog.set_level(logging.WARNING)
    flow = await BrowserLogin.start(
        sandbox.origin, open_browser=lambda url: False, environment="local"
    )
    async with httpx.AsyncClient() as client:
        await client.get(flow.callback_url, params={"svc_api_key": fake_key("sandbox")})
    await flow.close()
    assert [r for r in caplog.records if r.levelno >= logging.WARNING] == []
