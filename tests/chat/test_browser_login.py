"""The browser login in a real headless Chromium, driven over the Chrome DevTools Protocol.

Chromium (Debian package ``chromium``) is driven through aiohttp's websocket client, so no new
dependency: open the login URL ``/svc_login`` gave, let the sandbox's login page approve (click
its button when it shows one), land on the plugin's callback, and check what a user would: the
plugin is logged in, the callback redirected to a clean URL (no key in the address bar or the
tab's history), and no log line holds the key.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
import os
import shutil
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from svc_gateway.sandbox import SandboxServer
from tests.conftest import HostFactory

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = pytest.mark.skipif(
    CHROMIUM is None,
    reason="Chromium is not installed (apt-get install chromium; CI installs it)",
)

#: Every wait below is bounded by this (a stuck browser fails the test, never hangs it).
WAIT_SECS = 60.0


class DevTools:
    """A minimal CDP client on one page target: commands by id, events collected."""

    def __init__(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        self.ws = ws
        self.ids = itertools.count(1)
        self.pending: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self.events: list[dict[str, Any]] = []
        self.reader = asyncio.ensure_future(self._read())

    async def _read(self) -> None:
        async for message in self.ws:
            if message.type != aiohttp.WSMsgType.TEXT:
                break
            data = json.loads(message.data)
            future = self.pending.pop(data.get("id", -1), None)
            if future is not None and not future.done():
                future.set_result(data)
            elif "method" in data:
                self.events.append(data)

    async def send(self, method: str, **params: Any) -> dict[str, Any]:
        number = next(self.ids)
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self.pending[number] = future
        await self.ws.send_json({"id": number, "method": method, "params": params})
        answer = await asyncio.wait_for(future, WAIT_SECS)
        assert "error" not in answer, answer
        result: dict[str, Any] = answer.get("result", {})
        return result

    async def evaluate(self, expression: str) -> Any:
        result = await self.send("Runtime.evaluate", expression=expression, returnByValue=True)
        return result.get("result", {}).get("value")


@pytest.fixture
async def browser(tmp_path: Path) -> AsyncIterator[DevTools]:
    assert CHROMIUM is not None
    profile = tmp_path / "profile"
    log_path = tmp_path / "chromium.log"
    with log_path.open("wb") as log_file:
        proc = await asyncio.create_subprocess_exec(
            *[
                CHROMIUM,
                "--headless=new",
                "--no-sandbox",  # CI runs as root
                "--disable-gpu",
                "--no-first-run",
                "--no-default-browser-check",
                "--no-proxy-server",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--remote-debugging-address=127.0.0.1",
                "--remote-debugging-port=0",
                f"--user-data-dir={profile}",
                "about:blank",
            ],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=log_file,
            env={**os.environ, "NO_PROXY": "*"},
        )
    try:
        port_file = profile / "DevToolsActivePort"
        for _ in range(int(WAIT_SECS * 10)):
            if port_file.exists() and len(port_file.read_text().splitlines()) >= 2:
                break
            assert proc.returncode is None, log_path.read_text(errors="replace")[-3000:]
            await asyncio.sleep(0.1)
        port = int(port_file.read_text().splitlines()[0])
        async with aiohttp.ClientSession(trust_env=False) as http:
            async with http.get(f"http://127.0.0.1:{port}/json/list") as answer:
                targets = await answer.json(content_type=None)
            page = next(t for t in targets if t.get("type") == "page")
            async with http.ws_connect(page["webSocketDebuggerUrl"], max_msg_size=0) as ws:
                tools = DevTools(ws)
                await tools.send("Page.enable")
                await tools.send("Network.enable")
                yield tools
                tools.reader.cancel()
    finally:
        if proc.returncode is None:
            proc.kill()  # only the browser this fixture started, by its own handle
        await asyncio.wait_for(proc.wait(), WAIT_SECS)


async def test_browser_login_in_headless_chromium(
    browser: DevTools,
    make_host: HostFactory,
    sandbox: SandboxServer,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    opened: list[str] = []

    def open_browser(url: str) -> bool:
        opened.append(url)
        return True

    gateway, handle = await make_host(open_browser=open_browser, frontendUrl=sandbox.origin)
    reply = await gateway.run_command("svc_login", "")
    assert "browser" in reply.lower() and len(opened) == 1
    await browser.send("Page.navigate", url=opened[0])

    callback_port = handle.commands.pending.port if handle.commands.pending else None
    assert callback_port is not None
    clean_prefix = f"http://127.0.0.1:{callback_port}/done/"
    href = ""
    for _ in range(int(WAIT_SECS * 10)):
        href = str(await browser.evaluate("location.href") or "")
        if href.startswith(clean_prefix):
            break
        if href.startswith(sandbox.origin):  # an approval page: approve as the user would
            await browser.evaluate(
                "(document.querySelector('form button, button, input[type=submit]') || "
                "{click() {}}).click()"
            )
        await asyncio.sleep(0.1)
    assert href == clean_prefix + "complete", href
    for _ in range(int(WAIT_SECS * 10)):
        if "Login complete" in str(await browser.evaluate("document.body.innerText")):
            break
        await asyncio.sleep(0.1)
    assert "Login complete" in str(await browser.evaluate("document.body.innerText"))

    for _ in range(int(WAIT_SECS * 10)):
        if handle.core.session is not None and handle.commands.pending is None:
            break
        await asyncio.sleep(0.1)
    session = handle.core.session
    assert session is not None and session.environment == "local"
    assert "Browser login complete" in await gateway.run_command("svc_login", "status")
    assert not (await gateway.call_tool("svc_listPaymentMethods", {})).isError
    key = session.key.secret.get_secret_value()
    secret = key.split(":", 1)[1]

    # The key reached the callback, which answered with a redirect to the clean page.
    redirects = [
        e["params"]
        for e in browser.events
        if e["method"] == "Network.requestWillBeSent" and "redirectResponse" in e["params"]
    ]
    from_callback = [r for r in redirects if "/callback/" in r["redirectResponse"]["url"]]
    assert len(from_callback) == 1
    assert from_callback[0]["redirectResponse"]["status"] == 303
    assert secret in from_callback[0]["redirectResponse"]["url"]  # it did carry the key
    assert from_callback[0]["request"]["url"] == clean_prefix + "complete"
    # ... and the key stays neither in the address bar nor in the tab's history.
    history = await browser.send("Page.getNavigationHistory")
    urls = [entry["url"] for entry in history["entries"]]
    assert urls[-1] == clean_prefix + "complete"
    assert all(secret not in url and "svc_api_key" not in url for url in urls), urls

    logged = "\n".join(
        [record.getMessage() for record in caplog.records]
        + [record.exc_text or "" for record in caplog.records]
    )
    assert "browser login" in logged
    assert secret not in logged and secret[:24] not in logged
