"""Credential store and browser login: real files, real keyring backends, real loopback HTTP."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import stat
import sys
import time
import webbrowser
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import httpx
import keyring
import keyring.backends.fail
import pytest
from keyring.backend import KeyringBackend
from keyring.errors import PasswordDeleteError
from pydantic import SecretStr

from svc_gateway.account.credentials import (
    CREDENTIALS_FILE,
    KEYRING_SERVICE,
    CredentialStore,
    default_config_dir,
    secure_backend,
)
from svc_gateway.chat.browser_login import (
    BrowserLogin,
    LoginCancelled,
    LoginError,
    LoginTimeout,
    manual_instructions,
)
from svc_gateway.config import ConfigError
from svc_gateway.encoding import b64url_nopad
from svc_gateway.sandbox import SandboxServer

ADDRESS = "0x" + "ab12" * 10
FRONTEND = "https://app.example.test"


def make_key(env: str = "local", address: str = ADDRESS, exp_in: int = 3600) -> str:
    """``<env>:<JWT>`` whose payload names ``address``; the signature is never checked here."""
    header = b64url_nopad(json.dumps({"alg": "ES256K", "typ": "JWT"}).encode())
    claims = {"sub": address, "iss": address, "jti": "t1", "exp": int(time.time()) + exp_in}
    payload = b64url_nopad(json.dumps(claims).encode())
    return f"{env}:{header}.{payload}.{b64url_nopad(b'not-a-real-signature')}"


# -- keyring backends used as test doubles ----------------------------------------------------


class MemoryKeyring(KeyringBackend):
    """A secure (priority 1) in-memory keyring."""

    priority = 1.0

    def __init__(self) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.items: dict[tuple[str, str], str] = {}

    def get_password(self, service: str, username: str) -> str | None:
        return self.items.get((service, username))

    def set_password(self, service: str, username: str, password: str) -> None:
        self.items[(service, username)] = password

    def delete_password(self, service: str, username: str) -> None:
        if self.items.pop((service, username), None) is None:
            raise PasswordDeleteError("not found")


class InsecureKeyring(MemoryKeyring):
    """Works, but ranks below 1 (like a plaintext backend): must never receive a key."""

    priority = 0.5


class BrokenKeyring(MemoryKeyring):
    """Claims to be secure, then fails on every call (a locked or vanished keyring daemon)."""

    priority = 5.0

    def get_password(self, service: str, username: str) -> str | None:
        raise RuntimeError("keyring daemon went away")

    def set_password(self, service: str, username: str, password: str) -> None:
        raise RuntimeError("keyring daemon went away")


class FakeChainer(MemoryKeyring):
    priority = 10.0

    def __init__(self, members: list[KeyringBackend]) -> None:
        super().__init__()
        self.backends = members


def fail_keyring() -> KeyringBackend:
    """What ``keyring`` picks when no backend at all is available."""
    return keyring.backends.fail.Keyring()  # type: ignore[no-untyped-call]


# Keep the doubles out of keyring's global registry, so no other test's default backend is ours.
for _cls in (MemoryKeyring, InsecureKeyring, BrokenKeyring, FakeChainer):
    KeyringBackend._classes.discard(_cls)


@pytest.fixture(autouse=True)
def _restore_keyring(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[None]:
    monkeypatch.setenv("SVC_GATEWAY_CONFIG_DIR", str(tmp_path / "default-config"))
    original = keyring.get_keyring()
    yield
    keyring.set_keyring(original)


def file_mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


# -- CredentialStore: file backend -------------------------------------------------------------


def test_file_store_round_trip_and_permissions(tmp_path: Path) -> None:
    key = make_key("sandbox")
    store = CredentialStore(tmp_path / "cfg", use_keyring=False)
    assert store.backend_name == "file"
    assert store.save("sandbox", key) == "file"
    loaded = store.load("sandbox")
    assert loaded is not None and loaded.get_secret_value() == key
    assert store.load("live") is None
    assert file_mode(store.path) == 0o600
    assert file_mode(store.path.parent) == 0o700
    assert [p.name for p in store.path.parent.iterdir()] == ["credentials.json"]  # no temp left
    for text in (repr(store), str(store), repr(loaded), str(loaded)):
        assert key not in text and key.split(":", 1)[1] not in text


def test_a_stored_key_is_synced_to_disk_file_then_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    synced: list[tuple[int, bool]] = []
    real_fsync = os.fsync

    def fsync(fd: int) -> None:
        info = os.fstat(fd)
        synced.append((info.st_ino, stat.S_ISDIR(info.st_mode)))
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    store = CredentialStore(tmp_path / "cfg", use_keyring=False)
    store.save("sandbox", make_key("sandbox"))
    the_file = (store.path.stat().st_ino, False)  # the temp file's inode, renamed into place
    the_directory = (store.path.parent.stat().st_ino, True)
    assert the_file in synced and the_directory in synced
    assert synced.index(the_file) < synced.index(the_directory)  # the rename is synced last


def test_file_store_accepts_secretstr_and_rejects_unknown_env(tmp_path: Path) -> None:
    store = CredentialStore(tmp_path, use_keyring=False)
    store.save("live", SecretStr(make_key("live")))
    assert store.load("live") is not None
    with pytest.raises(ConfigError) as error:
        store.save("staging", make_key())
    assert make_key() not in str(error.value)


def test_active_marker_survives_restart(tmp_path: Path) -> None:
    sandbox_key, local_key = make_key("sandbox"), make_key("local")
    first = CredentialStore(tmp_path, use_keyring=False)
    first.save("sandbox", sandbox_key)
    first.save("local", local_key)

    restarted = CredentialStore(tmp_path, use_keyring=False)
    assert restarted.active == "local"
    found = restarted.load_any()
    assert found is not None and found[0] == "local"
    assert found[1].get_secret_value() == local_key
    preferred = restarted.load_any("sandbox")
    assert preferred is not None and preferred[0] == "sandbox"
    assert restarted.load_any("live") is not None  # falls through to the others

    restarted.delete("local")
    assert restarted.active is None
    assert restarted.load("local") is None
    remaining = CredentialStore(tmp_path, use_keyring=False).load_any()
    assert remaining is not None and remaining[0] == "sandbox"


def test_delete_all_removes_the_file(tmp_path: Path) -> None:
    store = CredentialStore(tmp_path, use_keyring=False)
    store.save("sandbox", make_key("sandbox"))
    store.save("live", make_key("live"))
    store.delete_all()
    assert not store.path.exists()
    assert store.load_any() is None
    store.delete_all()  # idempotent, and nothing to delete is fine
    store.delete("live")
    assert not store.path.exists()


def test_unreadable_file_is_ignored_and_replaced(tmp_path: Path) -> None:
    store = CredentialStore(tmp_path, use_keyring=False)
    store.path.write_text("{not json")
    assert store.load("sandbox") is None and store.active is None
    store.save("sandbox", make_key("sandbox"))
    assert json.loads(store.path.read_text())["active"] == "sandbox"
    assert file_mode(store.path) == 0o600


def test_default_config_dir(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("SVC_GATEWAY_CONFIG_DIR", str(tmp_path / "explicit"))
    assert default_config_dir() == tmp_path / "explicit"
    monkeypatch.delenv("SVC_GATEWAY_CONFIG_DIR")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    assert default_config_dir() == tmp_path / "xdg" / "svc-gateway"
    monkeypatch.delenv("XDG_CONFIG_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert default_config_dir() == tmp_path / "home" / ".config" / "svc-gateway"
    store = CredentialStore(use_keyring=False)
    assert store.path == tmp_path / "home" / ".config" / "svc-gateway" / "credentials.json"


# -- CredentialStore: keyring selection and fallback --------------------------------------------


@pytest.mark.parametrize(
    "backend",
    [InsecureKeyring(), fail_keyring(), FakeChainer([])],
    ids=["low-priority", "fail", "empty-chainer"],
)
def test_insecure_keyring_falls_back_to_file(tmp_path: Path, backend: KeyringBackend) -> None:
    keyring.set_keyring(backend)
    store = CredentialStore(tmp_path)
    assert store.backend_name == "file"
    key = make_key("sandbox")
    assert store.save("sandbox", key) == "file"
    assert file_mode(store.path) == 0o600
    if isinstance(backend, MemoryKeyring):
        assert backend.items == {}
    loaded = store.load("sandbox")
    assert loaded is not None and loaded.get_secret_value() == key


def test_failing_keyring_falls_back_to_file(tmp_path: Path) -> None:
    keyring.set_keyring(BrokenKeyring())
    store = CredentialStore(tmp_path)
    assert store.backend_name == "keyring"
    key = make_key("live")
    assert store.save("live", key) == "file"
    loaded = store.load("live")
    assert loaded is not None and loaded.get_secret_value() == key
    store.delete("live")  # the broken keyring must not stop a logout
    assert store.load("live") is None


def test_chainer_is_unwrapped_to_its_secure_member() -> None:
    secure, insecure = MemoryKeyring(), InsecureKeyring()
    assert secure_backend(FakeChainer([insecure, secure])) is secure
    assert secure_backend(FakeChainer([insecure])) is None
    assert secure_backend(fail_keyring()) is None


def test_secure_keyring_holds_the_key_and_delete_clears_everywhere(tmp_path: Path) -> None:
    memory = MemoryKeyring()
    keyring.set_keyring(memory)
    sandbox_key, live_key = make_key("sandbox"), make_key("live")

    # an older file-only copy, e.g. from a session that had no keyring
    CredentialStore(tmp_path, use_keyring=False).save("sandbox", sandbox_key)
    store = CredentialStore(tmp_path)
    assert store.backend_name == "keyring"
    assert store.save("live", live_key) == "keyring"
    assert memory.items[(KEYRING_SERVICE, "live")] == live_key
    on_disk = store.path.read_text()
    assert live_key not in on_disk and json.loads(on_disk)["active"] == "live"
    assert CredentialStore(tmp_path).load_any() is not None

    memory.items[(KEYRING_SERVICE, "sandbox")] = sandbox_key
    store.delete("sandbox")
    assert (KEYRING_SERVICE, "sandbox") not in memory.items
    assert sandbox_key not in store.path.read_text()
    assert store.load("sandbox") is None

    # saving to the keyring drops a stale file copy of the same environment
    CredentialStore(tmp_path, use_keyring=False).save("local", make_key("local"))
    assert store.save("local", make_key("local")) == "keyring"
    assert "local:" not in json.dumps(json.loads(store.path.read_text())["keys"])

    store.delete_all()
    assert memory.items == {}
    assert not store.path.exists()
    assert store.load_any() is None


class CountingKeyring(MemoryKeyring):
    """Counts reads, to see when the store asks the keyring at all."""

    def __init__(self) -> None:
        super().__init__()
        self.reads: list[str] = []

    def get_password(self, service: str, username: str) -> str | None:
        self.reads.append(username)
        return super().get_password(service, username)


def test_the_keyring_is_asked_only_for_keys_it_holds(tmp_path: Path) -> None:
    spy = CountingKeyring()
    keyring.set_keyring(spy)
    store = CredentialStore(tmp_path)
    assert store.load_any() is None and spy.reads == []  # nothing stored: no keyring at all
    live_key = make_key("live")
    assert store.save("live", live_key) == "keyring"
    CredentialStore(tmp_path, use_keyring=False).save("local", make_key("local"))
    fresh = CredentialStore(tmp_path)
    found = fresh.load("live")
    assert found is not None and found.get_secret_value() == live_key
    assert fresh.load("sandbox") is None and fresh.load("local") is not None
    assert spy.reads == ["live"]

    # a file written before the list existed: the active environment may be in the keyring
    legacy = tmp_path / "legacy"
    legacy.mkdir()
    (legacy / CREDENTIALS_FILE).write_text(json.dumps({"keys": {}, "active": "live"}))
    old = CredentialStore(legacy).load_any()
    assert old is not None and old[0] == "live" and old[1].get_secret_value() == live_key


# -- BrowserLogin over real loopback HTTP --------------------------------------------------------


@pytest.fixture
async def http() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(trust_env=False, timeout=5) as client:
        yield client


async def port_closed(port: int) -> bool:
    try:
        _, writer = await asyncio.open_connection("127.0.0.1", port)
    except OSError:
        return True
    writer.close()
    await writer.wait_closed()
    return False


def callback_of(login: BrowserLogin) -> str:
    return parse_qs(urlsplit(login.login_url).query)["callback_url"][0]


async def test_login_url_carries_loopback_callback_with_state_in_path() -> None:
    seen: list[str] = []

    def opener(url: str) -> bool:
        seen.append(url)
        return True

    login = await BrowserLogin.start(FRONTEND + "/", open_browser=opener)
    try:
        assert seen == [login.login_url] and login.browser_opened
        parts = urlsplit(login.login_url)
        assert f"{parts.scheme}://{parts.netloc}{parts.path}" == f"{FRONTEND}/auth/cli"
        callback = urlsplit(callback_of(login))
        assert (callback.scheme, callback.hostname) == ("http", "127.0.0.1")
        assert callback.port == login.port and callback.path.startswith("/callback/")
        assert len(callback.path.removeprefix("/callback/")) >= 43  # token_urlsafe(32)
        assert callback.query == ""
        assert callback.path.split("/")[-1] not in repr(login)
    finally:
        await login.close()
    assert await port_closed(login.port)


async def test_callback_rejects_wrong_state_and_bad_keys_then_accepts_once(
    http: httpx.AsyncClient, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    key = make_key("local")
    login = await BrowserLogin.start(FRONTEND, open_browser=lambda _url: False)
    assert not login.browser_opened
    callback = callback_of(login)
    base = f"http://127.0.0.1:{login.port}"

    async def browse(url: str, key: str) -> httpx.Response:
        """What a browser does: follow the callback's redirect to the clean page."""
        page = await http.get(url, params={"svc_api_key": key}, follow_redirects=True)
        assert [r.status_code for r in page.history] == [303]
        assert page.url.path.startswith("/done/") and not page.url.query
        assert page.headers["cache-control"] == "no-store"
        return page

    wrong = await browse(f"{base}/callback/not-the-state", key)
    assert wrong.status_code == 403 and key not in wrong.text
    assert (await http.get(f"{base}/callback/", params={"svc_api_key": key})).status_code == 404
    assert (await http.post(callback, params={"svc_api_key": key})).status_code == 405
    assert (await http.head(callback, params={"svc_api_key": key})).status_code == 405

    infinite = b64url_nopad(
        json.dumps({"sub": ADDRESS}).replace("}", ', "exp": Infinity}').encode()
    )
    hostile = f"local:{infinite}.{infinite}.{infinite}"
    for bad in ("", "local:not-a-jwt", "garbage", make_key("local", exp_in=-60), hostile):
        page = await browse(callback, bad)
        assert page.status_code == 400 and "try again" in page.text
        assert bad not in page.text or not bad

    done = await browse(callback, key)
    assert done.status_code == 200 and "Login complete" in done.text
    assert key not in done.text and key.split(":", 1)[1] not in done.text

    again = await browse(callback, make_key("sandbox"))
    assert again.status_code == 410 and "sandbox:" not in again.text

    api_key = await login.wait()
    assert api_key.address == ADDRESS and api_key.environment == "local"
    assert api_key.secret.get_secret_value() == key
    assert await port_closed(login.port)

    # httpx/httpcore lines are the stand-in browser's own log, not the plugin's
    ours = "\n".join(
        record.getMessage()
        for record in caplog.records
        if not record.name.startswith(("httpx", "httpcore"))
    )
    assert "browser login" in ours
    state = urlsplit(callback).path.rsplit("/", 1)[-1]
    for secret in (key, key.split(":", 1)[1], state):
        assert secret not in ours


async def test_server_closes_on_its_own_after_success(http: httpx.AsyncClient) -> None:
    login = await BrowserLogin.start(FRONTEND, open_browser=lambda _url: False)
    login.GRACE_SECS = 0.05
    page = await http.get(
        callback_of(login), params={"svc_api_key": make_key()}, follow_redirects=True
    )
    assert page.is_success
    for _ in range(100):
        if await port_closed(login.port):
            break
        await asyncio.sleep(0.02)
    assert await port_closed(login.port)
    assert (await login.wait()).address == ADDRESS


async def test_a_client_that_does_not_follow_the_redirect_still_completes(
    http: httpx.AsyncClient,
) -> None:
    login = await BrowserLogin.start(FRONTEND, open_browser=lambda _url: False)
    login.REDIRECT_SECS = 0.05
    answer = await http.get(callback_of(login), params={"svc_api_key": make_key()})
    assert answer.status_code == 303 and answer.headers["location"] == "/done/complete"
    assert answer.text == ""  # nothing echoed
    key = await asyncio.wait_for(login.wait(), 10)
    assert key.address == ADDRESS
    assert await port_closed(login.port)


async def test_a_key_for_another_environment_is_refused_at_the_callback(
    http: httpx.AsyncClient, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    login = await BrowserLogin.start(
        FRONTEND, open_browser=lambda _url: False, environment="sandbox"
    )
    live_key = make_key("live")
    page = await http.get(
        callback_of(login), params={"svc_api_key": live_key}, follow_redirects=True
    )
    assert page.status_code == 400 and "another environment" in page.text
    assert page.url.path == "/done/wrong-environment" and live_key not in page.text
    with pytest.raises(LoginError) as error:
        await asyncio.wait_for(login.wait(), 10)
    assert "for the live environment, but this login asked for sandbox" in str(error.value)
    assert "nothing was stored" in str(error.value)
    assert await port_closed(login.port)
    ours = "\n".join(
        r.getMessage() for r in caplog.records if not r.name.startswith(("httpx", "httpcore"))
    )
    assert live_key.split(":", 1)[1] not in ours

    same = await BrowserLogin.start(FRONTEND, open_browser=lambda _url: False, environment="local")
    ok = await http.get(
        callback_of(same), params={"svc_api_key": make_key("local")}, follow_redirects=True
    )
    assert ok.status_code == 200
    assert (await asyncio.wait_for(same.wait(), 10)).environment == "local"


async def test_timeout_raises_and_closes_the_port(http: httpx.AsyncClient) -> None:
    login = await BrowserLogin.start(FRONTEND, timeout_secs=0.2, open_browser=lambda _url: False)
    with pytest.raises(LoginTimeout) as error:
        await login.wait()
    assert "/svc_login again" in str(error.value)
    assert "/svc_login <env>:<API_KEY>" in str(error.value)
    assert await port_closed(login.port)
    with pytest.raises(httpx.ConnectError):
        await http.get(callback_of(login), params={"svc_api_key": make_key()})


async def test_timeout_closes_the_port_even_when_nobody_waits() -> None:
    login = await BrowserLogin.start(FRONTEND, timeout_secs=0.1, open_browser=lambda _url: False)
    await asyncio.sleep(0.3)
    assert await port_closed(login.port)
    with pytest.raises(LoginTimeout):
        await login.wait()


async def test_cancel_and_cancelled_wait_close_the_server() -> None:
    login = await BrowserLogin.start(FRONTEND, open_browser=lambda _url: False)
    login.cancel()
    with pytest.raises(LoginCancelled):
        await login.wait()
    assert await port_closed(login.port)

    other = await BrowserLogin.start(FRONTEND, open_browser=lambda _url: False)
    waiter = asyncio.create_task(other.wait())
    await asyncio.sleep(0.05)
    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter
    assert await port_closed(other.port)
    await other.close()  # idempotent


async def test_browser_that_cannot_open(monkeypatch: pytest.MonkeyPatch) -> None:
    def boom(_url: str) -> bool:
        raise RuntimeError("no browser")

    login = await BrowserLogin.start(FRONTEND, open_browser=boom)
    assert not login.browser_opened
    await login.close()

    opened: list[str] = []

    def fake_open(url: str) -> bool:
        opened.append(url)
        return True

    monkeypatch.setattr(webbrowser, "open", fake_open)
    monkeypatch.setattr(sys, "platform", "linux")
    monkeypatch.delenv("DISPLAY", raising=False)
    monkeypatch.delenv("WAYLAND_DISPLAY", raising=False)
    headless = await BrowserLogin.start(FRONTEND)
    assert not headless.browser_opened and opened == []
    await headless.close()

    monkeypatch.setenv("DISPLAY", ":0")
    desktop = await BrowserLogin.start(FRONTEND)
    assert desktop.browser_opened and opened == [desktop.login_url]
    await desktop.close()


def test_manual_instructions() -> None:
    callback = "http://127.0.0.1:43210/callback/abc"
    login_url = f"{FRONTEND}/auth/cli?" + str(httpx.QueryParams({"callback_url": callback}))
    text = manual_instructions(login_url, FRONTEND + "/")
    assert login_url in text
    assert "127.0.0.1" in text and "ssh -L 43210:127.0.0.1:43210" in text
    assert f"{FRONTEND}/permissions/global-permissions" in text
    assert "/svc_login <env>:<API_KEY>" in text


# -- end to end against the local sandbox (``sandbox`` fixture: conftest.py) ----------------


async def test_browser_login_against_the_sandbox(
    sandbox: SandboxServer, http: httpx.AsyncClient
) -> None:
    """The sandbox's /auth/cli issues a key and redirects the (stand-in) browser to us."""
    pages: list[asyncio.Task[httpx.Response]] = []

    def follow(url: str) -> bool:
        pages.append(asyncio.create_task(http.get(url, follow_redirects=True)))
        return True

    login = await BrowserLogin.start(sandbox.origin, timeout_secs=10, open_browser=follow)
    assert login.browser_opened
    api_key = await login.wait()
    secret = api_key.secret.get_secret_value()
    page = await pages[0]
    assert page.status_code == 200 and "Login complete" in page.text
    assert secret not in page.text
    assert api_key.environment == "local" and api_key.address.startswith("0x")
    assert await port_closed(login.port)

    plans = f"{sandbox.base_url}/protocol/plans"
    mine = await http.get(plans, headers={"Authorization": f"Bearer {secret}"})
    assert mine.status_code == 200
    forged = make_key("local", api_key.address)
    refused = await http.get(plans, headers={"Authorization": f"Bearer {forged}"})
    assert refused.status_code == 401  # so the 200 above really was the sandbox accepting it
