"""Sell routes of an ASGI app (a LangGraph deployment's ``http.app``, any Starlette/FastAPI
app): the pure-ASGI ``PaymentMiddleware`` and ``build_payment_app(payments, routes)``.

SPEC.md "Gating middleware for agent deployments (Python)". A request whose ``"METHOD /path"``
matches a configured route is sold through the one paid flow (:meth:`PaidFlow.handle`:
admission, verify, the app's answer, settle, receipt or withholding); any other request passes
through untouched. Only the request's path is read (``scope["path"]``, as Starlette's router
matches it); the ``payment-signature`` header is taken off the request before the app sees it.

What the app answers decides what is charged:

* a JSON answer (``/runs/wait``) is held until the run ends, so that a run whose **body** says it
  failed — LangGraph answers **200** with ``{"__error__": ...}`` because its status leaves
  before the run — is answered 500 with that body and never charged; a 2xx that is a real
  result gets the receipt in ``payment-response``;
* an event stream (``text/event-stream``: ``/runs/stream``) is verified and its credits held
  before the first byte, streamed through as the app sends it, and settled when it ends; the
  receipt comes in a last event ``event: payment-response`` (``data``: the receipt as JSON,
  what the ``payment-response`` header holds in base64). A stream whose events include
  ``event: error`` is not charged (a last ``event: payment-error`` says so). Once a stream
  has started, it is settled when it ends even when its client left: it was delivered as far
  as the client read it.

Nothing here blocks the event loop: the service calls are aiohttp's, the settle file is
opened and written off the loop (``langgraph dev``'s blocking-call detector stays quiet).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping, MutableMapping
from dataclasses import replace
from typing import Any

from ....account.credentials import default_config_dir
from ....redact import get_logger, install
from ....safe_text import plural
from ....service.seller import Seller, SellerSettings
from ...flow.flow import PaidFlow
from ...flow.replay import digest
from ...state.open import shared_state
from ...state.stats import PaidStats
from ..routes import Route, RouteConfig, RouteMap, out_of_range
from .langsmith_runs import install_langsmith, prepare_langsmith
from .sale import Sale

__all__ = ["PaymentMiddleware", "RouteConfig", "Routes", "build_payment_app"]

log = get_logger("svc_gateway.paid")

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]
Routes = Mapping[str, RouteConfig | Mapping[str, Any]]


class _QueueNamed:
    """A :class:`Seller` whose settings name a settle file: the seller's own, or one per set of
    plans in the plugin's config directory (never another way in's file: each file is locked
    by the one store that opened it)."""

    def __init__(self, seller: Seller, plans: list[str]) -> None:
        self._seller = seller
        self._plans = plans
        self._named: tuple[SellerSettings, SellerSettings] | None = None

    @property
    def settings(self) -> SellerSettings:
        own = self._seller.settings
        if own.queue_path is not None:
            return own
        if self._named is None or self._named[0] is not own:
            name = f"settle-queue-asgi-routes-{digest(*self._plans)[:12]}.json"
            self._named = (own, replace(own, queue_path=default_config_dir() / name))
        return self._named[1]

    def client(self) -> Any:
        return self._seller.client()

    def public_client(self) -> Any:
        return self._seller.public_client()


class PaymentMiddleware:
    """Pure ASGI middleware selling ``routes`` of ``app`` with the seller ``payments``
    (:class:`~svc_gateway.service.seller.Payments`: ``Payments.connect(key, ...)``).

    Use it as ``Middleware(PaymentMiddleware, payments=..., routes=...)`` in a Starlette or
    FastAPI app, or wrap any ASGI app: ``PaymentMiddleware(app, payments=..., routes=...)``.
    ``stats`` counts what it sold; :meth:`aclose` stops its settle retries (the app's
    lifespan shutdown calls it when the app runs one)."""

    def __init__(self, app: ASGIApp, *, payments: Seller, routes: Routes) -> None:
        self.app = app
        self.routes = RouteMap(routes)
        #: LangSmith runs of each sale, while LangSmith's switch is on (langsmith installed)
        self._langsmith = install_langsmith()
        install("httpx", "httpcore", "aiohttp.client", "uvicorn.access")
        self.payments = payments
        plans = sorted({route.config.plan_id for route in self.routes.routes})
        seller = _QueueNamed(payments, plans)
        #: the state shared with other replicas (``stateUrl``), ``None`` in-process
        self.shared = shared_state(seller)
        self.flow = PaidFlow(
            seller,
            book=self.shared.book if self.shared is not None else None,
            queue=self.shared.store if self.shared is not None else None,
        )
        self._sales = {
            route.key: (route.sale(), route.fixed_credits) for route in self.routes.routes
        }
        self._priced: set[str] = set()
        self._started = False
        self._closed = False

    @property
    def stats(self) -> PaidStats:
        return self.flow.stats

    async def start(self) -> None:
        """Open the settle store and retry what a previous run left owed (once; the first
        gated request does it)."""
        if self._started:
            return
        self._started = True
        if self._langsmith:  # its first run's blocking setup, off the loop
            await asyncio.to_thread(prepare_langsmith)
        if self.shared is not None:
            self.shared.share(self.flow.stats)
        owed = await self.flow.settler.start()
        if owed:
            log.warning("%s of a previous run not settled yet", plural(owed, "paid request"))

    async def aclose(self) -> None:
        """Stop settle retries and close the flow's state (not the seller's client: the
        ``payments`` handle is the caller's, closed with ``await payments.aclose()``)."""
        if self._closed:
            return
        self._closed = True
        await self.flow.aclose()
        if self.shared is not None:
            await self.shared.aclose(self.flow.stats)

    def route_of(self, scope: Scope) -> tuple[Route, str] | None:
        """The gated route of this request and the verb it is sold as (a HEAD as the GET it
        mirrors, as Starlette answers it), or ``None``."""
        path = scope.get("path") or "/"
        root = scope.get("root_path") or ""
        if root and path.startswith(root):
            path = path[len(root) :] or "/"
        method = scope.get("method", "GET")
        route = self.routes.match(method, path)
        if route is None and method == "HEAD":
            route = self.routes.match("GET", path)
            return (route, "GET") if route is not None else None
        return (route, method) if route is not None else None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(scope, receive, send)
            return
        found = self.route_of(scope) if scope["type"] == "http" else None
        if found is None:
            await self.app(scope, receive, send)
            return
        if not self._started:
            await self.start()
        await Sale(self, found[0], found[1], scope, receive, send).run()

    async def _lifespan(self, scope: Scope, receive: Receive, send: Send) -> None:
        """The app's lifespan, with this middleware's close after the app's shutdown."""

        async def sending(message: Message) -> None:
            if message["type"] == "lifespan.shutdown.complete":
                await self.aclose()
            await send(message)

        await self.app(scope, receive, sending)

    def sale_of(self, route: Route) -> tuple[dict[str, Any], int | None]:
        """What every sale of ``route`` carries, and its fixed price (``None``: a function)."""
        return self._sales[route.key]

    def unpriced(self, route: Route) -> bool:
        """Whether ``route``'s price was not yet compared with its plan's range."""
        return route.key not in self._priced

    def note_price(self, route: Route, credits: int) -> None:
        """Warn once per route whose price lies outside its plan's per-request range."""
        if route.key in self._priced:
            return
        facts = self.flow.facts_cache.peek(route.config.plan_id)
        if facts is None:
            return
        warning = out_of_range(route, credits, facts)
        if warning is not None or isinstance(route.config.credits, int):
            self._priced.add(route.key)
        if warning is not None:
            log.warning("%s", warning)


def build_payment_app(payments: Seller, routes: Routes, **options: Any) -> Any:
    """An ASGI app with :class:`PaymentMiddleware` installed: a FastAPI app where FastAPI is
    installed, else a Starlette app (``options`` go to its constructor). Add your own routes
    to it, or name it as ``langgraph.json``'s ``http.app``: the middleware then gates
    LangGraph's own routes (``POST /runs/wait``, ``POST /threads/{thread_id}/runs/wait``...)."""
    from starlette.middleware import Middleware

    middleware = [Middleware(PaymentMiddleware, payments=payments, routes=routes)]
    try:
        from fastapi import FastAPI
    except ImportError:
        from starlette.applications import Starlette

        return Starlette(middleware=middleware, **options)
    return FastAPI(middleware=middleware, **options)
