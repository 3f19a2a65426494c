"""The web pages a browser opens, served at the origin (not under ``/api/v1``).

The checkout page completes a fiat order (the local stand-in for the card processor) and
``/auth/cli`` is the browser-login step that hands a new key to a loopback callback.
"""

from __future__ import annotations

import html

from aiohttp import web
from yarl import URL

from .accounts import create_account
from .context import store_of
from .errors import ApiError
from .ledger import complete_checkout

routes = web.RouteTableDef()
LOOPBACK_HOSTS = ("127.0.0.1", "localhost")


def page(title: str, text: str, status: int = 200) -> web.Response:
    body = (
        "<!doctype html><html><head><meta charset='utf-8'>"
        f"<title>{html.escape(title)}</title></head><body>"
        f"<h1>{html.escape(title)}</h1><p>{html.escape(text)}</p></body></html>"
    )
    return web.Response(text=body, status=status, content_type="text/html")


@routes.get("/sandbox/checkout/{sessionId}", allow_head=False)
async def checkout(request: web.Request) -> web.Response:
    """Opening the link pays the order once; opening it again grants nothing more."""
    try:
        plan, first = complete_checkout(store_of(request), request.match_info["sessionId"])
    except ApiError as error:
        return page("Checkout failed", f"{error.message}. {error.hint or ''}".strip(), error.status)
    if first:
        return page(
            "Payment complete",
            f"Your order of plan {plan.name!r} is paid. "
            "You can close this window and return to your chat.",
        )
    return page("Already paid", f"This checkout for plan {plan.name!r} was already completed.")


def _loopback_callback(raw: str | None) -> URL | None:
    if not raw:
        return None
    try:
        url = URL(raw)
        port = url.explicit_port
    except ValueError:
        return None
    if url.scheme != "http" or url.host not in LOOPBACK_HOSTS or port is None:
        return None
    if url.user is not None or url.password is not None:
        return None
    return url


@routes.get("/auth/cli", allow_head=False)
async def auth_cli(request: web.Request) -> web.StreamResponse:
    """Create an account and redirect its key to the loopback ``callback_url``."""
    callback = _loopback_callback(request.query.get("callback_url"))
    if callback is None:
        return page(
            "Login failed",
            "callback_url must be http://127.0.0.1:<port>/... or http://localhost:<port>/...",
            400,
        )
    created = create_account(store_of(request), "browser-login")
    target = callback.with_fragment(None).extend_query({"svc_api_key": created["apiKey"]})
    return web.Response(status=302, headers={"Location": str(target)})


@routes.get("/login")
async def login(request: web.Request) -> web.Response:
    return page(
        "Sandbox login",
        "This local sandbox has no passwords. Keys are issued by POST /api/v1/sandbox/accounts, "
        "or through the browser login of your chat plugin (/svc_login), which opens /auth/cli.",
    )
