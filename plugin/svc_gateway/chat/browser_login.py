"""How the browser hands us an API key: ``/svc_login``'s one-shot flow (WIRE.md §1.5, §9 row 9).

``BrowserLogin`` serves a callback on 127.0.0.1, opens the login page, and hands over the one key
that arrives; the key is stored by :mod:`..account.credentials`.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import os
import secrets
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING
from urllib.parse import parse_qs, quote, urlsplit

from ..api_keys import ApiKey, parse_api_key

if TYPE_CHECKING:  # the HTTP server is imported only when a browser login starts
    from aiohttp import web

#: one logger for the credential store and the browser login (the name predates the split)
log = logging.getLogger("svc_gateway.chat.login")


class LoginError(Exception):
    """The browser login did not produce a key."""


class LoginTimeout(LoginError):
    """Nobody completed the browser login in time."""


class LoginCancelled(LoginError):
    """The browser login was cancelled or closed before a key arrived."""


_PAGE = """<!doctype html><html><head><meta charset="utf-8"><title>{title}</title>
<meta name="referrer" content="no-referrer"></head>
<body style="font-family:sans-serif;max-width:36em;margin:4em auto"><h1>{title}</h1><p>{text}</p>
</body></html>"""


_HEADERS = {"Cache-Control": "no-store", "Referrer-Policy": "no-referrer"}

#: The pages the callback redirects to: fixed texts, so a page never echoes anything it was sent.
_OUTCOMES: dict[str, tuple[int, str, str]] = {
    "complete": (200, "Login complete", "Login complete, you can close this tab."),
    "invalid": (400, "Login failed", "No valid API key arrived. Please try again."),
    "expired": (400, "Login failed", "The API key has expired. Please try again."),
    "wrong-environment": (
        400,
        "Login refused",
        "The key that arrived is for another environment than the one this login asked for. "
        "Nothing was stored. Run /svc_login again with the environment you want.",
    ),
    "used": (410, "Login link used", "This login already finished or expired."),
    "foreign": (403, "Invalid login link", "This link does not belong to this login."),
}


def _page(status: int, title: str, text: str) -> web.Response:
    """A fixed page, never built from the request, so it cannot echo the key. It is only ever
    served at a clean ``/done/<outcome>`` URL (the callback redirects there)."""
    from aiohttp import web

    headers = dict(_HEADERS)
    body = _PAGE.format(title=title, text=text)
    return web.Response(status=status, text=body, content_type="text/html", headers=headers)


def _open_default(url: str) -> bool:
    """``webbrowser.open``, except on a Linux box with no display, where it would start a
    console browser inside the gateway's terminal."""
    if sys.platform.startswith("linux") and not (
        os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY")
    ):
        return False
    import webbrowser

    return webbrowser.open(url)


class BrowserLogin:
    """One browser login: ``start`` it, show or open ``login_url``, then ``await wait()``.

    The callback server closes in every outcome (key, timeout, ``cancel``, ``close``). After a key
    arrives it lives on for ``GRACE_SECS`` at most, answering repeated hits with a 410 page.
    """

    GRACE_SECS = 2.0
    #: How long a received key waits for the browser to load the clean page before ``wait``
    #: returns it anyway (a client that does not follow redirects).
    REDIRECT_SECS = 2.0

    def __init__(
        self, frontend_url: str, timeout_secs: float, environment: str | None = None
    ) -> None:
        self.frontend_url = frontend_url
        self.timeout_secs = timeout_secs
        self.environment = environment
        self.browser_opened = False
        self.port = 0
        self._state = secrets.token_urlsafe(32)
        self._done = asyncio.Event()
        self._key: ApiKey | None = None
        self._error: LoginError | None = None
        self._pending: tuple[ApiKey | None, LoginError | None] | None = None
        self._settle_timer: asyncio.TimerHandle | None = None
        self._runner: web.AppRunner | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._close_task: asyncio.Task[None] | None = None

    @classmethod
    async def start(
        cls,
        frontend_url: str,
        *,
        timeout_secs: float = 300,
        open_browser: Callable[[str], bool] | None = None,
        environment: str | None = None,
    ) -> BrowserLogin:
        """Serve the callback on a free 127.0.0.1 port, then try to open the login page.

        A custom ``open_browser`` runs on the loop and must not block (the default runs in a
        thread). Not opening is no error: check ``browser_opened``, show ``manual_instructions``.
        With ``environment``, a key for any other environment is refused and not handed over.
        """
        from aiohttp import web

        frontend = frontend_url.strip().rstrip("/")
        if not frontend.startswith(("http://", "https://")) or timeout_secs <= 0:
            raise LoginError("Browser login needs an http(s) frontend URL and a positive timeout")
        login = cls(frontend, timeout_secs, environment)
        app = web.Application()
        app.router.add_get("/callback/{state}", login._callback, allow_head=False)
        app.router.add_get("/done/{outcome}", login._outcome, allow_head=False)
        login._runner = runner = web.AppRunner(app, access_log=None, shutdown_timeout=1.0)
        await runner.setup()
        try:
            await web.TCPSite(runner, "127.0.0.1", 0).start()
            login.port = int(runner.addresses[0][1])
            login._timer = asyncio.get_running_loop().call_later(timeout_secs, login._expire)
            log.info("browser login waiting on 127.0.0.1:%d", login.port)
            try:
                if open_browser is None:
                    opened = await asyncio.to_thread(_open_default, login.login_url)
                else:
                    opened = open_browser(login.login_url)
                login.browser_opened = bool(opened)
            except Exception as error:
                log.info("could not open a browser (%s)", type(error).__name__)
        except BaseException as error:
            await login.close()
            if isinstance(error, OSError):
                raise LoginError(f"Could not start the login callback server: {error}") from None
            raise
        return login

    @property
    def callback_url(self) -> str:
        """Carries the ``state``: hand it only to the browser, never to a log."""
        return f"http://127.0.0.1:{self.port}/callback/{self._state}"

    @property
    def login_url(self) -> str:
        return f"{self.frontend_url}/auth/cli?callback_url={quote(self.callback_url, safe='')}"

    def __repr__(self) -> str:
        return f"BrowserLogin(port={self.port}, done={self._done.is_set()})"

    async def wait(self) -> ApiKey:
        """The key from the browser, or ``LoginTimeout``/``LoginCancelled``. The server is shut
        down before this returns, also when the waiting task is cancelled."""
        try:
            await self._done.wait()
        finally:
            await self.close()
        if self._key is None:
            raise self._error or LoginCancelled("Browser login was cancelled")
        return self._key

    def cancel(self) -> None:
        """Stop the flow now (call on the loop); ``wait()`` raises ``LoginCancelled``."""
        self._finish(error=LoginCancelled("Browser login was cancelled"))
        self._schedule_close(0)

    async def close(self) -> None:
        """Shut the callback server down and wait until it is gone. Idempotent."""
        self._finish(error=LoginCancelled("Browser login was closed"))
        self._schedule_close(0)
        if self._close_task is not None:
            await asyncio.shield(self._close_task)

    def _finish(self, *, key: ApiKey | None = None, error: LoginError | None = None) -> None:
        if not self._done.is_set():
            self._key, self._error = key, error
            self._done.set()

    def _expire(self) -> None:
        secs = self.timeout_secs
        span = f"{secs / 60:g} minutes" if secs >= 60 else f"{secs:g} seconds"
        self._finish(
            error=LoginTimeout(
                f"Browser login timed out after {span}. Run /svc_login again, or create a key at "
                f"{self.frontend_url}/permissions/global-permissions and use "
                "/svc_login <env>:<API_KEY>."
            )
        )
        self._schedule_close(0)

    def _schedule_close(self, delay: float) -> None:
        """Close after ``delay`` seconds (0: now). One timer at a time, so one close wins."""
        if self._close_task is not None:
            return
        if self._timer is not None:
            self._timer.cancel()
        loop = asyncio.get_running_loop()
        if delay > 0:
            self._timer = loop.call_later(delay, self._schedule_close, 0)
        elif self._runner is not None:
            self._close_task = loop.create_task(self._runner.cleanup())

    async def _callback(self, request: web.Request) -> web.Response:
        """``GET /callback/<state>?svc_api_key=…``: only the exact state, only once.

        Every answer is a redirect to a fixed ``/done/<outcome>`` page, so the key-bearing URL
        leaves the address bar (and the tab's history) whatever happened. The outcome is handed
        to :meth:`wait` once the browser has loaded that page (or after ``REDIRECT_SECS``)."""
        given = request.match_info.get("state", "").encode()
        if not hmac.compare_digest(given, self._state.encode()):
            return self._redirect("foreign")
        if self._done.is_set() or self._pending is not None:
            return self._redirect("used")
        try:
            key = parse_api_key(request.query.get("svc_api_key", ""))
        except Exception:  # ConfigError, or whatever a hostile token provokes (exp: Infinity)
            return self._redirect("invalid")
        if key.expired:
            return self._redirect("expired")
        if self.environment is not None and key.environment != self.environment:
            log.info(  # the outcome reaches the user through /svc_login status, not the log
                "browser login refused a key for environment %s (asked for %s)",
                key.environment,
                self.environment,
            )
            error = LoginError(
                f"The browser returned a key for the {key.environment or 'unknown'} "
                f"environment, but this login asked for {self.environment}; nothing was "
                f"stored. Run /svc_login {key.environment or '<env>'} to log in there."
            )
            self._settle_later(None, error)
            return self._redirect("wrong-environment")
        log.info("browser login received a key for environment %s", key.environment)
        self._settle_later(key, None)
        return self._redirect("complete")

    def _settle_later(self, key: ApiKey | None, error: LoginError | None) -> None:
        self._pending = (key, error)
        loop = asyncio.get_running_loop()
        self._settle_timer = loop.call_later(self.REDIRECT_SECS, self._settle)

    def _settle(self) -> None:
        if self._settle_timer is not None:
            self._settle_timer.cancel()
        if self._pending is None or self._done.is_set():
            return
        key, error = self._pending
        self._finish(key=key, error=error)
        self._schedule_close(self.GRACE_SECS)

    @staticmethod
    def _redirect(outcome: str) -> web.Response:
        from aiohttp import web

        headers = {**_HEADERS, "Location": f"/done/{outcome}"}
        return web.Response(status=303, headers=headers)

    async def _outcome(self, request: web.Request) -> web.StreamResponse:
        """The clean page the callback redirects to; serving it completes the login."""
        status, title, text = _OUTCOMES.get(
            request.match_info.get("outcome", ""), _OUTCOMES["foreign"]
        )
        response = _page(status, title, text)
        await response.prepare(request)
        await response.write_eof()
        self._settle()
        return response


def manual_instructions(login_url: str, frontend_url: str) -> str:
    """What to tell a user when no browser could be opened (a headless server, say)."""
    frontend = frontend_url.rstrip("/")
    callback = parse_qs(urlsplit(login_url).query).get("callback_url", [""])[0]
    port = urlsplit(callback).port if callback else None
    tunnel = f" (from another machine: ssh -L {port}:127.0.0.1:{port} <this host>)" if port else ""
    return (
        "Could not open a browser here. To log in, either:\n"
        f"1. Open this link in a browser that can reach 127.0.0.1 of this host{tunnel}:\n"
        f"   {login_url}\n"
        f"2. Or log in at {frontend}/login, create an API key at "
        f"{frontend}/permissions/global-permissions, and send /svc_login <env>:<API_KEY> "
        "(then delete that message from the chat)."
    )
