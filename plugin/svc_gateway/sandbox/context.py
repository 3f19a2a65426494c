"""Per-app and per-request state shared by the middleware and the route modules."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from .accounts import Account
from .db import Store
from .errors import unauthorized
from .versioning import FLOOR, Resolution

API_PREFIX = "/api/v1"
STORE: web.AppKey[Store] = web.AppKey("svc_sandbox_store", Store)
# Typed request keys where aiohttp has them (3.13+); plain strings on older releases.
_ACCOUNT: Any = "svc_sandbox_account"
_RESOLUTION: Any = "svc_sandbox_resolution"
if hasattr(web, "RequestKey"):
    _ACCOUNT = web.RequestKey(_ACCOUNT, object)
    _RESOLUTION = web.RequestKey(_RESOLUTION, Resolution)


def store_of(request: web.Request) -> Store:
    return request.app[STORE]


def set_account(request: web.Request, account: Account | None) -> None:
    request[_ACCOUNT] = account


def caller(request: web.Request) -> Account:
    """The authenticated account, or the 401 every auth route answers without one."""
    account = request.get(_ACCOUNT)
    if not isinstance(account, Account):
        raise unauthorized()
    return account


def set_resolution(request: web.Request, resolution: Resolution) -> None:
    request[_RESOLUTION] = resolution


def resolution_of(request: web.BaseRequest) -> Resolution:
    found = request.get(_RESOLUTION)
    return found if isinstance(found, Resolution) else Resolution(FLOOR, "fallback")


def origin_of(request: web.BaseRequest) -> str:
    """``http://host:port`` of the socket the request arrived on (never the Host header)."""
    sockname = request.transport.get_extra_info("sockname") if request.transport else None
    if isinstance(sockname, tuple) and len(sockname) >= 2:
        host = str(sockname[0])
        return f"http://[{host}]:{sockname[1]}" if ":" in host else f"http://{host}:{sockname[1]}"
    return "http://127.0.0.1"


def ok(data: Any, status: int = 200) -> web.Response:
    return web.json_response(data, status=status)
