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
#: every page's head: one small inline stylesheet (nothing fetched from elsewhere)
STYLE = (
    "<meta name='viewport' content='width=device-width, initial-scale=1'><style>"
    "body{font:16px/1.5 system-ui,sans-serif;max-width:40rem;margin:3rem auto;padding:0 1rem;"
    "color:#1f2328;background:#f6f8fa}"
    "h1{font-size:1.5rem;margin:0 0 1rem}"
    "p{background:#fff;border:1px solid #d0d7de;border-radius:8px;padding:.75rem 1rem}"
    "code{background:#eff1f3;padding:.1rem .3rem;border-radius:4px;word-break:break-all}"
    "form{display:flex;flex-wrap:wrap;gap:.5rem;align-items:end}"
    "label{flex:1 1 100%}input[type=password]{width:100%;box-sizing:border-box;"
    "padding:.5rem;border:1px solid #d0d7de;border-radius:6px;font:inherit}"
    "button{padding:.5rem 1.25rem;border-radius:6px;border:1px solid #d0d7de;font:inherit;"
    "cursor:pointer;background:#fff}button[value=approve]{background:#1f883d;color:#fff;"
    "border-color:#1f883d}a{color:#0969da}"
    "</style>"
)


def page(title: str, text: str, status: int = 200) -> web.Response:
    body = (
        f"<!doctype html><html><head><meta charset='utf-8'>{STYLE}"
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


#: where the plugin's manual-login hint sends a user to create a key (WIRE.md §1.5)
KEYS_PATH = "/permissions/global-permissions"


def link_page(title: str, paragraphs: list[str], status: int = 200) -> web.Response:
    """A page whose paragraphs are trusted HTML built here (links); callers escape data."""
    body = (
        f"<!doctype html><html><head><meta charset='utf-8'>{STYLE}"
        f"<title>{html.escape(title)}</title></head><body>"
        f"<h1>{html.escape(title)}</h1>" + "".join(f"<p>{p}</p>" for p in paragraphs)
    )
    return web.Response(
        text=body + "</body></html>",
        status=status,
        content_type="text/html",
        headers={"Cache-Control": "no-store"},
    )


@routes.get("/login")
async def login(request: web.Request) -> web.Response:
    return link_page(
        "Sandbox login",
        [
            "This local sandbox has no passwords.",
            f"<a href='{KEYS_PATH}'>Create an API key</a> here (it starts with "
            "<code>local:</code>), then send <code>/svc_login &lt;API_KEY&gt;</code> in your "
            "chat, pasting the whole key (and delete that message), or use the browser login "
            "of your chat plugin (<code>/svc_login</code>).",
            "Calling the REST API yourself? <a href='/docs'>API reference</a> "
            "(<a href='/api/v1/openapi.json'>OpenAPI document</a>); "
            "<code>POST /api/v1/sandbox/accounts</code> also issues keys.",
        ],
    )


@routes.get(KEYS_PATH)
async def keys_page(request: web.Request) -> web.Response:
    """The sandbox's stand-in for the dashboard's key page: a button, no password."""
    return link_page(
        "Sandbox API keys",
        [
            "Each key opens a new sandbox account (with a test card and a crypto wallet).",
            f"<form method='post' action='{KEYS_PATH}'>"
            "<button type='submit'>Create an API key</button></form>",
            "<a href='/login'>Back to login</a> · <a href='/docs'>API reference</a>",
        ],
    )


@routes.post(KEYS_PATH)
async def create_key(request: web.Request) -> web.Response:
    """Show the new key once (``no-store``: the browser keeps no copy of the page)."""
    created = create_account(store_of(request), "dashboard")
    return link_page(
        "Your new sandbox API key",
        [
            f"Address: <code>{html.escape(created['address'])}</code>",
            f"API key (shown once, keep it secret): <code>{html.escape(created['apiKey'])}</code>",
            "In your chat: <code>/svc_login &lt;API_KEY&gt;</code>, then delete that message. "
            "With curl: <code>-H 'Authorization: Bearer &lt;API_KEY&gt;'</code>.",
            "<a href='/docs'>API reference</a>",
        ],
        status=201,
    )
