"""Issue 14 (security): the configured environment binds the key; another environment's key is
never sent anywhere, and config or ``$SVC_API_KEY`` keys for another environment are refused."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

import svc_gateway
from svc_gateway.account.credentials import CredentialStore
from svc_gateway.cli import _chat_config
from svc_gateway.config import ConfigError, load_config
from svc_gateway.hosts.reference import ReferenceGateway
from svc_gateway.sandbox import SandboxServer
from tests.conftest import CountingTransport
from tests.helpers import fake_key


async def test_a_key_stored_for_another_environment_is_never_sent(
    sandbox: SandboxServer, subscriber: dict[str, str], tmp_path: Path
) -> None:
    store_dir = tmp_path / "store"
    CredentialStore(store_dir, use_keyring=False).save("local", subscriber["apiKey"])
    transport = CountingTransport()
    gateway = ReferenceGateway({"environment": "sandbox", "baseUrl": sandbox.base_url})
    handle = svc_gateway.register(
        gateway, store=CredentialStore(store_dir, use_keyring=False), session_factory=transport
    )
    try:
        assert handle.core.session is None
        status = await gateway.run_command("svc_login", "status")
        assert status.startswith("Not logged in"), status
        assert (
            "A key for local is stored; this gateway is configured for sandbox, so that key is "
            "not used." in status
        )
        result = await gateway.call_tool("svc_checkBalance", {"planId": "1"})
        assert result.structuredContent["error"]["code"] == "not_logged_in"
        assert "not logged in" in await gateway.context_text()
        assert transport.requests == []  # nothing, let alone the local key, reached the URL
    finally:
        await asyncio.to_thread(handle.close)


async def test_offline_a_live_key_alone_does_not_log_a_sandbox_gateway_in(tmp_path: Path) -> None:
    store = CredentialStore(tmp_path, use_keyring=False)
    store.save("live", fake_key("live"))
    gateway = ReferenceGateway({"environment": "sandbox", "baseUrl": "http://127.0.0.1:9/api/v1"})
    handle = svc_gateway.register(gateway, store=store)
    try:
        assert handle.core.session is None
        assert handle.core.environment == "sandbox"
        status = await gateway.run_command("svc_login", "status")
        assert "A key for live is stored; this gateway is configured for sandbox" in status
    finally:
        await asyncio.to_thread(handle.close)


async def test_a_stored_key_whose_prefix_names_another_environment_is_ignored(
    tmp_path: Path,
) -> None:
    store = CredentialStore(tmp_path, use_keyring=False)
    store.save("sandbox", fake_key("live"))  # filed under sandbox, but a live key
    gateway = ReferenceGateway({"environment": "sandbox", "baseUrl": "http://127.0.0.1:9/api/v1"})
    handle = svc_gateway.register(gateway, store=store)
    try:
        assert handle.core.session is None
    finally:
        await asyncio.to_thread(handle.close)


async def test_the_stored_key_of_the_configured_environment_is_used(
    sandbox: SandboxServer, subscriber: dict[str, str], tmp_path: Path
) -> None:
    store = CredentialStore(tmp_path, use_keyring=False)
    store.save("live", fake_key("live"))
    store.save("local", subscriber["apiKey"])
    store.save("sandbox", fake_key("sandbox"))  # the active one, but not this gateway's
    gateway = ReferenceGateway({"environment": "local", "baseUrl": sandbox.base_url})
    handle = svc_gateway.register(gateway, store=store)
    try:
        assert handle.core.session is not None
        assert handle.core.session.address == subscriber["address"]
        status = await gateway.run_command("svc_login", "status")
        assert "(key stored by an earlier /svc_login)" in status
    finally:
        await asyncio.to_thread(handle.close)


async def test_login_with_a_key_for_another_environment_sends_and_stores_nothing(
    sandbox: SandboxServer, tmp_path: Path
) -> None:
    store = CredentialStore(tmp_path, use_keyring=False)
    transport = CountingTransport()
    gateway = ReferenceGateway({"environment": "local", "baseUrl": sandbox.base_url})
    handle = svc_gateway.register(gateway, store=store, session_factory=transport)
    try:
        reply = await gateway.run_command("svc_login", fake_key("sandbox"))
        assert "a key for the sandbox environment" in reply
        assert "configured for local" in reply
        assert handle.core.session is None and store.load_any() is None
        assert transport.requests == []
    finally:
        await asyncio.to_thread(handle.close)


def test_config_key_for_another_environment_is_refused_naming_both() -> None:
    with pytest.raises(ConfigError) as caught:
        load_config({"environment": "sandbox", "svcApiKey": fake_key("live")})
    assert "for the live environment" in str(caught.value)
    assert "configured for sandbox" in str(caught.value)
    key = fake_key("live")
    with pytest.raises(ConfigError) as caught:
        load_config({"environment": "local", "baseUrl": "http://127.0.0.1:9", "svcApiKey": key})
    assert key.split(":", 1)[1] not in str(caught.value)


def test_no_environment_given_takes_the_keys_own() -> None:
    assert load_config({"svcApiKey": fake_key("live")}).environment == "live"
    staging = load_config({"svcApiKey": fake_key("sandbox-staging")})
    assert staging.environment == "sandbox"


def test_svc_api_key_for_another_environment_is_refused_at_start(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("SVC_API_KEY", fake_key("live"))
    with pytest.raises(SystemExit) as caught:
        _chat_config({"environment": "sandbox", "baseUrl": "http://127.0.0.1:9/api/v1"})
    message = str(caught.value)
    assert "live" in message and "sandbox" in message and "SVC_API_KEY" in message
