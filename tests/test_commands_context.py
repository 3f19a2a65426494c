"""/svc_login, /svc_logout and the balance context, through the reference host."""

from __future__ import annotations

import asyncio
import logging
import threading

import httpx
import pytest

from svc_gateway.client import ServiceClient
from svc_gateway.sandbox import SandboxServer
from tests.conftest import CountingTransport, HostFactory, make_plan
from tests.helpers import fake_key


async def test_login_with_key_names_the_address_never_the_key(
    make_host: HostFactory, subscriber: dict[str, str], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    gateway, handle = await make_host()
    reply = await gateway.run_command("svc_login", subscriber["apiKey"])
    assert subscriber["address"] in reply
    assert "delete the chat message" in reply
    assert "private file" in reply  # the test store has no keyring
    secret = subscriber["apiKey"].split(":", 1)[1]
    assert secret not in reply
    assert handle.core.session.environment == "local"
    status = await gateway.run_command("svc_login", "status")
    assert subscriber["address"] in status and secret not in status
    assert secret not in caplog.text


async def test_login_rejects_bad_input_clearly(make_host: HostFactory) -> None:
    gateway, handle = await make_host()
    reply = await gateway.run_command("svc_login", "sandbox:not-a-key")
    assert reply.startswith("Login failed") and "Usage" in reply and "not-a-key" not in reply
    assert "not an environment" in await gateway.run_command("svc_login", "prod")
    assert handle.core.session is None
    refused = await gateway.run_command("svc_login", fake_key(), authorized=False)
    assert "authorised" in refused and handle.core.session is None


async def test_key_for_an_environment_without_url_is_refused(make_host: HostFactory) -> None:
    gateway, handle = await make_host(baseUrl=None, environment="sandbox")
    reply = await gateway.run_command("svc_login", fake_key("live"))
    assert "No service URL" in reply and handle.core.session is None


async def test_logout_forgets_key_and_state(
    make_host: HostFactory, subscriber: dict[str, str], plan_id: str
) -> None:
    gateway, handle = await make_host(subscriber["apiKey"], planId=plan_id)
    assert await gateway.context_text()
    reply = await gateway.run_command("svc_logout")
    assert reply.startswith("Logged out")
    assert handle.core.session is None
    assert handle.core.store.load("local") is None
    assert await gateway.context_text() == ""
    result = await gateway.call_tool("svc_checkBalance", {})
    assert result.structuredContent["error"]["code"] == "not_logged_in"
    assert "not logged in" in (await gateway.run_command("svc_logout")).lower()


async def test_stored_key_survives_a_restart_and_config_key_wins(
    make_host: HostFactory, sandbox: SandboxServer, subscriber: dict[str, str], tmp_path
) -> None:
    import svc_gateway
    from svc_gateway.hosts.reference import ReferenceGateway
    from svc_gateway.login import CredentialStore

    store_dir = tmp_path / "shared-store"
    settings = {"environment": "local", "baseUrl": sandbox.base_url}
    first = ReferenceGateway(settings)
    h1 = svc_gateway.register(first, store=CredentialStore(store_dir, use_keyring=False))
    await first.run_command("svc_login", subscriber["apiKey"])
    await asyncio.to_thread(h1.close)

    second = ReferenceGateway(settings)
    h2 = svc_gateway.register(second, store=CredentialStore(store_dir, use_keyring=False))
    assert h2.core.session.address == subscriber["address"]
    await asyncio.to_thread(h2.close)

    other = await sandbox.create_account("other")
    third = ReferenceGateway({**settings, "svcApiKey": other["apiKey"]})
    h3 = svc_gateway.register(third, store=CredentialStore(store_dir, use_keyring=False))
    assert h3.core.session.address == other["address"] and h3.core.session.source == "config"
    await asyncio.to_thread(h3.close)


async def test_browser_login_against_the_sandbox_frontend(
    make_host: HostFactory, sandbox: SandboxServer
) -> None:
    opened: list[str] = []

    def open_browser(url: str) -> bool:
        opened.append(url)
        threading.Thread(target=httpx.get, args=(url,), kwargs={"follow_redirects": True}).start()
        return True

    gateway, handle = await make_host(open_browser=open_browser, frontendUrl=sandbox.origin)
    reply = await gateway.run_command("svc_login", "")
    assert "browser" in reply.lower()
    assert opened and "callback_url=http%3A%2F%2F127.0.0.1" in opened[0]
    for _ in range(100):
        if handle.core.session is not None:
            break
        await asyncio.sleep(0.05)
    assert handle.core.session is not None
    assert "Browser login complete" in await gateway.run_command("svc_login", "status")
    balance = await gateway.call_tool("svc_listPaymentMethods", {})
    assert not balance.isError


async def test_browser_login_without_browser_prints_manual_steps(
    make_host: HostFactory, sandbox: SandboxServer
) -> None:
    gateway, handle = await make_host(open_browser=lambda url: False, frontendUrl=sandbox.origin)
    reply = await gateway.run_command("svc_login", "")
    assert reply.startswith("Could not open a browser")
    assert f"{sandbox.origin}/auth/cli?callback_url=" in reply
    assert "/svc_login <env>:<API_KEY>" in reply
    assert handle.commands.pending is not None
    await gateway.run_command("svc_logout")
    assert handle.commands.pending is None


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


async def test_context_is_cached_60s_and_invalidated(
    make_host: HostFactory,
    subscriber: dict[str, str],
    builder: dict[str, str],
    builder_client: ServiceClient,
) -> None:
    plan_id = await make_plan(builder_client, builder["address"], name="Cached")
    transport = CountingTransport()
    clock = Clock()
    gateway, _ = await make_host(
        subscriber["apiKey"], transport=transport, clock=clock, planId=plan_id
    )

    def fetches() -> int:
        return transport.count("GET", "/balance/")

    text = await gateway.context_text()
    assert "Cached" in text and "0 credits, not subscribed" in text
    for _ in range(20):
        clock.now += 2  # 40 s later, still inside the TTL
        assert await gateway.context_text() == text
    assert fetches() == 1
    clock.now += 30  # past 60 s
    await gateway.context_text()
    assert fetches() == 2
    # the plugin's own order invalidates, so the next prompt sees the new balance
    await gateway.call_tool("svc_orderPlan", {"confirm": True})
    before = fetches()
    assert "100 credits, subscribed" in await gateway.context_text()
    assert fetches() == before + 1
    # logout and login drop the cache
    await gateway.run_command("svc_logout")
    assert await gateway.context_text() == ""
    await gateway.run_command("svc_login", subscriber["apiKey"])
    count = fetches()
    await gateway.context_text()
    assert fetches() == count + 1


async def test_concurrent_prompts_share_one_fetch(
    make_host: HostFactory, subscriber: dict[str, str], plan_id: str
) -> None:
    transport = CountingTransport()
    gateway, _ = await make_host(subscriber["apiKey"], transport=transport, planId=plan_id)
    texts = await asyncio.gather(*(gateway.context_text() for _ in range(25)))
    assert len(set(texts)) == 1 and texts[0]
    assert transport.count("GET", "/balance/") == 1


async def test_context_never_blocks_past_its_budget(
    make_host: HostFactory, subscriber: dict[str, str], plan_id: str
) -> None:
    class Slow(CountingTransport):
        async def before(self, method: str, path: str) -> None:
            if "/balance/" in path:
                await asyncio.sleep(5)

    gateway, handle = await make_host(subscriber["apiKey"], transport=Slow(), planId=plan_id)
    handle.context.budget = 0.2
    loop = asyncio.get_running_loop()
    start = loop.time()
    assert await gateway.context_text() == ""  # nothing known yet, nothing invented
    assert loop.time() - start < 2


async def test_context_lists_each_configured_plan(
    make_host: HostFactory,
    subscriber: dict[str, str],
    builder: dict[str, str],
    builder_client: ServiceClient,
) -> None:
    a = await make_plan(builder_client, builder["address"], name="Alpha")
    b = await make_plan(builder_client, builder["address"], name="Beta")
    gateway, _ = await make_host(
        subscriber["apiKey"], plans=[{"planId": a, "name": "Alpha plan"}, {"planId": b}]
    )
    lines = (await gateway.context_text()).splitlines()
    assert len(lines) == 3
    assert "Alpha plan" in lines[1] and "Beta" in lines[2]


async def test_scripted_reference_chat_session(
    make_host: HostFactory, subscriber: dict[str, str], plan_id: str
) -> None:
    gateway, _ = await make_host(planId=plan_id)
    out = []
    for line in [
        "/help",
        "svc_checkBalance {}",
        f"/svc_login {subscriber['apiKey']}",
        "/context",
        'svc_checkBalance {"planId": ',
        "svc_checkBalance []",
        "hello",
        "svc_checkBalance {}",
    ]:
        out.append(await gateway.handle_line(line))
    assert "/svc_login" in out[0]
    assert out[1].startswith("error [not_logged_in]") and "\n" not in out[1]
    assert "Starter" in out[3]
    assert out[4].startswith("error [invalid_json]")
    assert out[5].startswith("error [invalid_json]")
    assert out[6].startswith("error [unknown_input]")
    assert '"balance": "0"' in out[7]
