"""The sandbox's aiohttp application: middleware, response headers, route table.

One middleware authenticates the optional key, resolves the version and turns every error
into the JSON envelope; a response hook stamps both version headers on every response,
including 401s and unknown routes.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable

from aiohttp import web

from . import frontend, openapi, routes_oauth, routes_orgs, routes_payments, routes_protocol
from .accounts import authenticate
from .context import (
    API_PREFIX,
    STORE,
    resolution_of,
    set_account,
    set_resolution,
    store_of,
)
from .db import REQUEST_TTL_SECS, Store
from .errors import INTERNAL, ApiError, from_http_exception
from .versioning import RESOLVED_HEADER, VERSION_HEADER, resolve

log = logging.getLogger("svc_gateway.sandbox")
MAX_BODY_BYTES = 1024 * 1024
#: Exempt from version validation (SPEC.md): a bad header there is ignored, not a 400.
VERSION_EXEMPT = (API_PREFIX + "/meta/versions",)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@web.middleware
async def service_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Authenticate, resolve the version, run the route; every failure becomes an envelope."""
    try:
        account = authenticate(store_of(request), request.headers.get("Authorization"))
        set_account(request, account)
        resolution, error = resolve(
            request.headers.get(VERSION_HEADER), account.pinned_version if account else None
        )
        set_resolution(request, resolution)
        validated = request.path.startswith(API_PREFIX + "/") and request.path not in VERSION_EXEMPT
        if error is not None and validated:
            raise error
        return await handler(request)
    except ApiError as error:
        return error.response()
    except web.HTTPException as error:
        if error.status < 400:
            raise
        return from_http_exception(error).response()
    except Exception:
        log.exception("sandbox bug while answering %s %s", request.method, request.path)
        return ApiError(500, INTERNAL, "Internal sandbox error").response()


async def _version_headers(request: web.Request, response: web.StreamResponse) -> None:
    resolution = resolution_of(request)
    response.headers[VERSION_HEADER] = resolution.version
    response.headers[RESOLVED_HEADER] = resolution.source


async def _close_store(app: web.Application) -> None:
    app[STORE].close()


def create_app(
    db: str = ":memory:",
    *,
    clock: Callable[[], float] = time.time,
    request_ttl_secs: float = REQUEST_TTL_SECS,
) -> web.Application:
    """The sandbox service over a SQLite file (or a private in-memory database).

    ``clock`` is the sandbox's only notion of time (token, delegation, checkout, time-plan
    and expirable-credit expiry): pass a :class:`~svc_gateway.sandbox.clock.ManualClock`
    to move it by hand in tests.
    """
    app = web.Application(middlewares=[service_middleware], client_max_size=MAX_BODY_BYTES)
    app[STORE] = Store(db, clock=clock, request_ttl_secs=request_ttl_secs)
    app.on_response_prepare.append(_version_headers)
    app.on_cleanup.append(_close_store)
    app.add_routes(routes_protocol.routes)
    app.add_routes(routes_payments.routes)
    app.add_routes(routes_orgs.routes)
    app.add_routes(frontend.routes)
    routes_oauth.install(app)  # the OAuth 2.1 authorization server paid MCP servers name
    openapi.install(app)  # /api/v1/openapi.json and /docs, built from the live router
    return app
