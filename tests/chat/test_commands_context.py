"""/svc_login, /svc_logout and the balance context, through the reference host."""

from __future__ import annotations

import asyncio
import logging
import threading

import httpx
import pytest

import svc_gateway
from svc_gateway.chat.context import BalanceEntry, format_line
from svc_gateway.config import ConfigError
from svc_gateway.hosts.reference import ReferenceGateway
from svc_gateway.sandbox import SandboxServer
from svc_gateway.service.client import ServiceClient
from svc_gateway.service.models import PlanMetadata
from svc_gateway.service.pricing import crypto_price, expirable_credits
from svc_gateway.tools import TOOL_NAMES
from tests.conftest import USDC, CountingTransport, HostFactory, make_plan
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


async def test_an_environment_without_url_is_refused_at_start(make_host: HostFactory) -> None:
    with pytest.raises(ConfigError, match="No service URL is known for environment 'sandbox'"):
        await make_host(baseUrl=None, environment="sandbox")


async def test_logout_forgets_key_and_state(
    make_host: HostFactory, subscriber: dict[str, str], plan_id: str
) -> None:
    gateway, handle = await make_host(subscriber["apiKey"], planId=plan_id)
    assert await gateway.context_text()
    reply = await gateway.run_command("svc_logout")
    assert reply.startswith("Logged out")
    assert handle.core.session is None
    assert handle.core.store.load("local") is None
    assert "not logged in" in await gateway.context_text()  # told once that /svc_login exists
    assert await gateway.context_text() == ""
    result = await gateway.call_tool("svc_checkBalance", {})
    assert result.structuredContent["error"]["code"] == "not_logged_in"
    assert "not logged in" in (await gateway.run_command("svc_logout")).lower()


async def test_stored_key_survives_a_restart_and_config_key_wins(
    make_host: HostFactory, sandbox: SandboxServer, subscriber: dict[str, str], tmp_path
) -> None:
    import svc_gateway
    from svc_gateway.account.credentials import CredentialStore
    from svc_gateway.hosts.reference import ReferenceGateway

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
    assert "/svc_login" in await gateway.context_text()
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
    assert await gateway.context_text() == ""  # nothing known yet, nothing invented
    # the prompt went on while the balance read was still under way
    assert handle.context.cache.fetches == 1 and handle.context.cache.stale(plan_id) is None


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


# -- issue 7/9: the context hook ----------------------------------------------------------------


async def test_a_cache_hit_is_answered_without_the_plugin_loop(
    make_host: HostFactory, subscriber: dict[str, str], plan_id: str
) -> None:
    gateway, handle = await make_host(subscriber["apiKey"], planId=plan_id)
    text = await gateway.context_text()
    assert "0 credits, not subscribed" in text
    # Block the plugin loop: a hook that crossed to it could not answer now.
    release = threading.Event()

    async def hold_the_loop() -> None:
        release.wait(30)

    blocked = handle.runtime.submit(hold_the_loop())
    try:
        again = await asyncio.wait_for(gateway.context_text(), 10)
        from_a_thread = await asyncio.to_thread(handle.context.peek)
    finally:
        release.set()
    await asyncio.wrap_future(blocked)
    assert again == text and from_a_thread == text.strip()


async def test_a_miss_never_holds_the_prompt_past_its_budget_even_on_a_busy_loop(
    make_host: HostFactory, subscriber: dict[str, str], plan_id: str
) -> None:
    gateway, handle = await make_host(subscriber["apiKey"], planId=plan_id)
    handle.context.budget = 0.2
    release = threading.Event()

    async def hold_the_loop() -> None:
        release.wait(30)

    blocked = handle.runtime.submit(hold_the_loop())
    try:
        text = await asyncio.wait_for(gateway.context_text(), 10)
    finally:
        release.set()
    await asyncio.wrap_future(blocked)
    assert text == ""  # the prompt went on without the context
    assert "0 credits" in await gateway.context_text()  # and the next one has it


async def test_a_fresh_balance_read_refreshes_the_context(
    make_host: HostFactory, subscriber: dict[str, str], plan_id: str, sandbox: SandboxServer
) -> None:
    clock = Clock()
    gateway, _ = await make_host(subscriber["apiKey"], planId=plan_id, clock=clock)
    assert "0 credits, not subscribed" in await gateway.context_text()
    # credits bought elsewhere (another client): the cached line is stale, within its TTL
    other = ServiceClient(sandbox.base_url, subscriber["apiKey"])
    try:
        assert (await other.order_plan(plan_id)).success
    finally:
        await other.aclose()
    assert "0 credits, not subscribed" in await gateway.context_text()
    result = await gateway.call_tool("svc_checkBalance", {})
    assert result.structuredContent["balance"] == "100"
    assert "100 credits, subscribed" in await gateway.context_text()  # no TTL wait


async def test_an_unchanged_balance_read_keeps_the_ready_context(
    make_host: HostFactory, subscriber: dict[str, str], plan_id: str
) -> None:
    transport = CountingTransport()
    gateway, handle = await make_host(subscriber["apiKey"], planId=plan_id, transport=transport)
    text = await gateway.context_text()
    assert "0 credits, not subscribed" in text
    version = handle.context.cache.version
    for _ in range(2):  # on the plugin loop, then on this one
        assert not (await gateway.call_tool("svc_checkBalance", {})).isError
    assert handle.context.cache.version == version
    reads = transport.count("GET", "/balance/")
    assert await gateway.context_text() == text
    assert transport.count("GET", "/balance/") == reads  # still a hit: nothing fetched


async def test_a_balance_read_under_a_previous_session_is_not_shown(
    make_host: HostFactory, subscriber: dict[str, str], plan_id: str, sandbox: SandboxServer
) -> None:
    gateway, handle = await make_host(subscriber["apiKey"], planId=plan_id)
    before = handle.core.session
    reader = ServiceClient(sandbox.base_url, subscriber["apiKey"])
    try:
        balance = await reader.get_plan_balance(plan_id)
    finally:
        await reader.aclose()
    other = await sandbox.create_account("other")
    await gateway.run_command("svc_login", other["apiKey"])
    cache = handle.context.cache
    cache.seen(plan_id, balance, before)  # read by a call that started before the login
    assert cache.peek(plan_id) is None and cache.stale(plan_id) is None
    cache.seen(plan_id, balance, handle.core.session)
    assert cache.peek(plan_id) is not None


async def test_a_time_plan_shows_its_access_window_not_credits(
    make_host: HostFactory,
    subscriber: dict[str, str],
    builder: dict[str, str],
    builder_client: ServiceClient,
) -> None:
    time_plan = await builder_client.register_time_plan(
        PlanMetadata(name="Monthly pass"),
        crypto_price([1_000_000], [builder["address"]], USDC),
        expirable_credits(30 * 86400),
    )
    gateway, _ = await make_host(subscriber["apiKey"], planId=time_plan)
    before = await gateway.context_text()
    assert "Monthly pass" in before and "credits" not in before
    assert "time plan, no active access (not subscribed)" in before
    assert "each purchase gives 30 days of access" in before
    assert not (await gateway.call_tool("svc_orderPlan", {"confirm": True})).isError
    after = await gateway.context_text()
    assert "time plan, access active, each purchase gives 30 days of access" in after
    assert "1 credits" not in after


@pytest.mark.parametrize(
    ("secs", "text"),
    [
        (86400, "1 day"),
        (7 * 86400, "7 days"),
        (5400, "90 minutes"),
        (3600, "1 hour"),
        (45, "45 seconds"),
    ],
)
def test_access_windows_read_naturally(secs: int, text: str) -> None:
    entry = BalanceEntry("p", "Pass", 1, True, is_time=True, duration_secs=secs)
    assert (
        format_line(entry)
        == f'- "Pass" (plan p): time plan, access active, each purchase gives {text} of access'
    )


# -- issue 10: login checks the key; ways that never type it --------------------------------------


async def test_a_key_with_a_corrupted_signature_is_refused_and_not_stored(
    make_host: HostFactory, subscriber: dict[str, str]
) -> None:
    gateway, handle = await make_host()
    key = subscriber["apiKey"]
    signature = key.rsplit(".", 1)[1]
    corrupted = key[: -len(signature)] + ("A" if signature[0] != "A" else "B") + signature[1:]
    reply = await gateway.run_command("svc_login", corrupted)
    assert reply.startswith("Login failed") and "refused this API key" in reply
    assert "Nothing was stored" in reply and corrupted.split(":", 1)[1] not in reply
    assert handle.core.session is None and handle.core.store.load("local") is None
    assert (await gateway.run_command("svc_login", key)).startswith("Logged in")


async def test_a_typed_key_reply_offers_ways_that_never_type_it(
    make_host: HostFactory, subscriber: dict[str, str]
) -> None:
    gateway, _ = await make_host()
    reply = await gateway.run_command("svc_login", subscriber["apiKey"])
    assert "delete the chat message" in reply
    assert "/svc_login env:SVC_API_KEY" in reply and "browser" in reply


async def test_login_from_an_environment_variable(
    make_host: HostFactory, subscriber: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    gateway, handle = await make_host()
    missing = await gateway.run_command("svc_login", "env:SVC_TEST_OPERATOR_KEY")
    assert "SVC_TEST_OPERATOR_KEY is not set" in missing and handle.core.session is None
    monkeypatch.setenv("SVC_TEST_OPERATOR_KEY", "local:not-a-key")
    bad = await gateway.run_command("svc_login", "env:SVC_TEST_OPERATOR_KEY")
    assert bad.startswith("Login failed (the variable SVC_TEST_OPERATOR_KEY)")
    assert "not-a-key" not in bad and handle.core.session is None
    monkeypatch.setenv("SVC_TEST_OPERATOR_KEY", subscriber["apiKey"])
    reply = await gateway.run_command("svc_login", "env:SVC_TEST_OPERATOR_KEY")
    assert reply.startswith(f"Logged in to the local environment as {subscriber['address']}")
    assert "delete the chat message" not in reply  # nothing was typed
    assert handle.core.session is not None


async def test_browser_login_refuses_a_key_for_another_environment(
    make_host: HostFactory, sandbox: SandboxServer
) -> None:
    """A gateway configured for sandbox; the (local) sandbox frontend hands back a local: key."""
    pages: list[int] = []

    def open_browser(url: str) -> bool:
        def browse() -> None:
            pages.append(httpx.get(url, follow_redirects=True, timeout=10).status_code)

        threading.Thread(target=browse).start()
        return True

    gateway, handle = await make_host(
        open_browser=open_browser, frontendUrl=sandbox.origin, environment="sandbox"
    )
    await gateway.run_command("svc_login", "")
    status = ""
    for _ in range(200):
        status = await gateway.run_command("svc_login", "status")
        if "did not complete" in status:
            break
        await asyncio.sleep(0.05)
    assert "for the local environment, but this login asked for sandbox" in status
    assert "nothing was stored" in status
    assert handle.core.session is None and handle.core.store.load_any() is None
    for _ in range(100):
        if pages:
            break
        await asyncio.sleep(0.05)
    assert pages == [400]  # the browser shows the refusal


# -- issue 7: a broken config registers in a degraded state ---------------------------------------


async def test_an_invalid_config_can_register_degraded_with_the_fix() -> None:
    bad = {"environment": "moon"}
    with pytest.raises(ConfigError):
        svc_gateway.register(ReferenceGateway(bad))
    gateway = ReferenceGateway(bad)
    gateway.config_location = "plugins.svc in gateway.yaml"  # type: ignore[attr-defined]
    handle = svc_gateway.register(gateway, on_config_error="degrade")
    assert isinstance(handle, svc_gateway.DegradedPlugin) and "environment" in handle.config_error
    assert sorted(gateway.tools) == sorted(TOOL_NAMES)
    result = await gateway.call_tool("svc_checkBalance", {})
    error = result.structuredContent["error"]
    assert result.isError and error["code"] == "plugin_misconfigured"
    assert "environment" in error["message"] and "plugins.svc in gateway.yaml" in error["hint"]
    status = await gateway.run_command("svc_login", "status")
    assert "not configured correctly" in status and "plugins.svc in gateway.yaml" in status
    assert await gateway.context_text() == ""
    handle.close()
