"""Sell any route of an aiohttp app: ``payment_middleware`` and ``build_payment_app``.

SPEC.md "Gating middleware for agent deployments", in aiohttp terms. A request whose
``"METHOD /path"`` matches a configured route is sold through the one paid flow
(:meth:`PaidFlow.handle`: admission, verify, the route's handler, settle, receipt or
withholding, deadlines, the settle queue); any other request passes through untouched.
``settings`` are the plugin's own config keys (``svcApiKey``, ``environment``, ``baseUrl``,
``paidBudgetSecs``, ``handlerTimeoutSecs``, ``settleQueuePath``, ``stateUrl``, ...), so no chat
host is needed. The flow runs on the app's own loop; with ``stateUrl`` its admission book, settle
store and stats are shared with every other replica through Redis, as the paid endpoint's are.

The downstream response is buffered before the receipt is attached, so a gated route cannot
stream: a handler that prepares a ``StreamResponse`` is stopped before anything is sent and the
request fails (500, nothing charged) with an error saying so.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from aiohttp import web

from ...account.credentials import default_config_dir
from ...config import ConfigError, load_config
from ...redact import get_logger, install
from ...safe_text import plural
from ...service.seller import Payments
from ..flow.flow import PaidFlow
from ..flow.replay import digest
from ..handlers import Answer, HandlerError, to_answer
from ..state.open import shared_state
from ..state.stats import PaidStats
from ..types import PaidRequest
from .http import IDEMPOTENCY_HEADER, client_connected, paid_response
from .routes import Route, RouteConfig, RouteMap, out_of_range

if TYPE_CHECKING:
    from ..state.redis_store import RedisState

__all__ = ["PaymentMiddleware", "build_payment_app", "payment_middleware"]

log = get_logger("svc_gateway.paid")

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
Routes = Mapping[str, RouteConfig | Mapping[str, Any]]
#: where ``build_payment_app`` keeps its middleware (``app[PAYMENTS]``: stats, close)
PAYMENTS: web.AppKey[PaymentMiddleware] = web.AppKey("svc_payments")
#: resource URLs kept built (one per scheme, Host header and path seen)
URLS_KEPT = 64


class StreamingRefused(HandlerError):
    """A gated route's handler tried to stream: its answer could not carry a receipt."""


class PaymentMiddleware:
    """An aiohttp middleware (``await mw(request, handler)``) gating the configured routes.

    ``stats`` counts what it sold; ``flow`` is the paid flow behind it; :meth:`close` (run by
    the app's cleanup when :meth:`install` was called) stops its settle-queue retries and
    closes its service client."""

    #: what ``@web.middleware`` marks: aiohttp calls ``mw(request, handler)``
    __middleware_version__ = 1

    def __init__(self, routes: Routes, settings: Mapping[str, Any]) -> None:
        self.routes = RouteMap(routes)
        config = load_config(_with_queue_path(settings, self.routes))
        install("httpx", "httpcore", "aiohttp.access", "aiohttp.server", "aiohttp.client")
        try:  # an unusable configuration refuses to start, never a 500 on each request
            #: the seller's handle on the service: its key's client and its settings
            self.payments = Payments.from_config(config)
        except ConfigError as exc:
            raise ConfigError(f"the payment middleware cannot start: {exc}") from None
        #: the state shared with other replicas (``stateUrl``), ``None`` in-process
        self.shared: RedisState | None = shared_state(self.payments)
        self.flow = PaidFlow(
            self.payments,
            book=self.shared.book if self.shared is not None else None,
            queue=self.shared.store if self.shared is not None else None,
            idempotency=self.shared.idempotency if self.shared is not None else None,
        )
        public = config.paid_endpoint_public_url
        parts = urlsplit(public) if public else None
        self._origin = f"{parts.scheme}://{parts.netloc}" if parts and parts.netloc else None
        self._urls: dict[tuple[str, str, str], str] = {}
        self._started = False
        self._closed = False
        #: routes whose price was compared with their plan's range (each warned once at most)
        self._priced: set[str] = set()
        #: per route, what each of its sales carries and its fixed price (``None``: a function
        #: of the request), decided here once rather than on every request
        self._sales = {
            route.key: (route.sale(), route.fixed_credits) for route in self.routes.routes
        }
        self._pricing: asyncio.Task[None] | None = None

    @property
    def stats(self) -> PaidStats:
        return self.flow.stats

    def install(self, app: web.Application) -> None:
        """Add the middleware to ``app`` (not started yet): its settle store opens when the app
        starts (an app that cannot open it does not start) and closes with the app."""
        app.middlewares.append(self)
        app.on_startup.append(self._startup)
        app.on_cleanup.append(self._cleanup)

    async def _startup(self, _app: web.Application) -> None:
        await self.start()

    async def _cleanup(self, _app: web.Application) -> None:
        await self.close()

    async def start(self) -> None:
        """Open the settle store and retry what a previous run left owed (once; the first
        gated request does it when the app was not built with :meth:`install`)."""
        if self._started:
            return
        self._started = True
        if self.shared is not None:
            from ...service.checks import log_start_check

            # an unreachable stateUrl is told now, in one line, not as refusals later
            await log_start_check(None, self.payments.settings.state_url)
            self.shared.share(self.flow.stats)
        owed = await self.flow.settler.start()
        if owed:
            log.warning("%s of a previous run not settled yet", plural(owed, "paid request"))
        # in the background: a slow or absent service never delays start (the first paid
        # request of each route checks again, from the plan its admission read)
        self._pricing = asyncio.create_task(self._check_prices())

    async def _check_prices(self) -> None:
        """Read each fixed-price route's plan and warn when the price lies outside its range."""
        for route in self.routes.routes:
            if isinstance(route.config.credits, int):
                try:
                    await self.flow.facts(route.config.plan_id)
                except Exception:  # an outage: the first paid request checks again
                    continue
                self._note_price(route, route.config.credits)

    def _note_price(self, route: Route, credits: int) -> None:
        """Warn once per route whose price lies outside its plan's per-request range."""
        if route.key in self._priced:
            return
        facts = self.flow.facts_cache.peek(route.config.plan_id)
        if facts is None:
            return  # not read yet (or unreadable): a later request checks
        warning = out_of_range(route, credits, facts)
        if warning is not None or isinstance(route.config.credits, int):
            self._priced.add(route.key)  # a price function: until one price falls outside
        if warning is not None:
            log.warning("%s", warning)

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._pricing is not None:
            self._pricing.cancel()
        await self.flow.aclose()
        if self.shared is not None:  # after the flow: its book and store close first
            await self.shared.aclose(self.flow.stats)
        await self.payments.aclose()

    async def __call__(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        # decided on the route aiohttp's router resolved, never on a parse of request.path
        route = self.routes.dispatched(request.method, request)
        verb = request.method
        if route is None and verb == "HEAD":
            # aiohttp answers HEAD with the GET's handler: a paid GET covers its HEAD (RFC 9110
            # §9.3.2), sold as that GET (its envelope and tokens say GET)
            route, verb = self.routes.dispatched("GET", request), "GET"
        if route is None:
            return await handler(request)
        if not self._started:
            await self.start()
        # the gated request through the paid flow, here rather than in a coroutine of its own
        # (each layer is resumed at every suspension); ``verb`` is what it is sold as (a HEAD
        # as the GET it mirrors)
        token = request.headers.get("payment-signature", "").strip() or None
        body_digest = None
        if token:
            body = await request.read()  # aiohttp keeps it: the handler can read it again
            body_digest = digest(request.method, request.raw_path, body)
        sale, fixed = self._sales[route.key]

        async def work() -> Answer:
            # the downstream handler run here, not in a coroutine of its own; its answer as
            # plain data (an ``HTTPException`` it raises is its answer: a 404 is the route's
            # 404, uncharged); a stream it prepares is refused while it runs
            own_hook = _guard_streaming(request)
            try:
                response = await handler(request)
            except web.HTTPException as exc:
                return to_answer(exc)
            finally:
                _unguard(request, own_hook)
            if not isinstance(response, web.Response):
                raise StreamingRefused(
                    f"{request.method} {request.path} is a paid route and returned a streaming "
                    "response; paid routes cannot stream: return a web.Response"
                )
            return to_answer(response)

        paid = PaidRequest(
            token=token,
            url=self._url(request),
            work=work,
            verb=verb,
            credits=fixed if fixed is not None else self._price(route, request),
            body_digest=body_digest,
            connected=functools.partial(client_connected, request),
            idempotency_key=request.headers.get(IDEMPOTENCY_HEADER, "").strip() or None,
            **sale,
        )
        outcome = await self.flow.handle(paid)
        if fixed is not None and route.key not in self._priced:
            self._note_price(route, fixed)
        return paid_response(outcome.answer)

    def _price(self, route: Route, request: web.Request) -> Callable[[], Awaitable[int]]:
        """The route's price function for this request (its result checked against the plan)."""

        async def price() -> int:
            credits = await route.config.price(request)
            self._note_price(route, credits)
            return credits

        return price

    def _url(self, request: web.Request) -> str:
        """The resource URL of the envelope: the request's own, without its query, on the
        public origin when ``paidEndpointPublicUrl`` names one."""
        if self._origin is not None:
            return self._origin + request.rel_url.raw_path
        # request.url builds a URL from the Host header on every call: kept per (scheme, host,
        # path), which is all it depends on once the query and fragment are dropped
        key = (request.scheme, request.host, request.rel_url.raw_path)
        url = self._urls.get(key)
        if url is None:
            url = str(request.url.with_query(None).with_fragment(None))
            if len(self._urls) >= URLS_KEPT:
                self._urls.clear()
            self._urls[key] = url
        return url


def _with_queue_path(settings: Mapping[str, Any], routes: RouteMap) -> Mapping[str, Any]:
    """Without ``settleQueuePath``, the owed settles of these routes' plans get their own file
    in the plugin's config directory (its lock keeps one store per file: the plugin's own paid
    endpoint, or an app selling other plans, uses another one)."""
    if settings.get("settleQueuePath"):
        return settings
    plans = sorted({route.config.plan_id for route in routes.routes})
    name = f"settle-queue-routes-{digest(*plans)[:12]}.json"
    return {**settings, "settleQueuePath": str(default_config_dir() / name)}


def _guard_streaming(request: web.Request) -> Any:
    """Stop a handler that prepares its response itself (a stream) before any byte is sent:
    aiohttp calls the request's prepare hook before it writes the status line. Installed only
    while the handler runs (:func:`_unguard` after it): the hook refers to the request, and
    left on it the pair would be a reference cycle, every request's objects then freed by the
    garbage collector instead of as soon as the request ends. Returns the hook another layer
    had set on this request (``None``: aiohttp's own)."""
    own_hook = vars(request).get("_prepare_hook")

    async def hook(response: web.StreamResponse) -> None:
        # the status line is not written yet, but the shared writer was already set up for
        # the stream (chunking, compression): undo that for the answer we send instead
        writer: Any = request._payload_writer
        writer.chunked, writer.length, writer._compress = False, None, None
        raise StreamingRefused(
            f"{request.method} {request.path} is a paid route, and paid routes cannot "
            "stream (the receipt header goes on a buffered answer): return a web.Response"
        )

    object.__setattr__(request, "_prepare_hook", hook)
    return own_hook


def _unguard(request: web.Request, own_hook: Any) -> None:
    """The request's prepare hook as it was before :func:`_guard_streaming`."""
    if own_hook is None:
        vars(request).pop("_prepare_hook", None)  # aiohttp's method again, no cycle
    else:
        object.__setattr__(request, "_prepare_hook", own_hook)


def payment_middleware(routes: Routes, settings: Mapping[str, Any]) -> PaymentMiddleware:
    """An aiohttp middleware selling ``routes`` (``"METHOD /path"`` → :class:`RouteConfig`)
    with the plugin config ``settings``. Use it in ``web.Application(middlewares=[...])`` (and
    ``await mw.close()`` at shutdown), or call ``mw.install(app)``, which does both."""
    return PaymentMiddleware(routes, settings)


def build_payment_app(routes: Routes, settings: Mapping[str, Any]) -> web.Application:
    """A ``web.Application`` with the payment middleware installed; add your handlers to it.
    The middleware is at ``app[PAYMENTS]`` (its ``stats``)."""
    config = load_config(settings)
    app = web.Application(client_max_size=config.max_body_bytes)
    middleware = PaymentMiddleware(routes, settings)
    middleware.install(app)
    app[PAYMENTS] = middleware
    return app
