"""Serving the paid A2A agent: the official a2a-sdk server's routes, under uvicorn on its port.

The SDK's defaults are open; each is closed here: tasks are scoped to the payer
(:class:`~.store.PayerTasks`: the message's token, read by :class:`PaymentScope`, is verified
through the flow before the store finds the caller any task it did not start), parked tasks
are released after :data:`PARKED_TASK_TIMEOUT_SECS` and the store is bounded, reading tasks by
id (``GetTask``, ``ListTasks``, ``CancelTask``, ``SubscribeToTask``, push configs) is refused
(the answer comes in the send's own reply), request bodies are bounded (``maxBodyBytes``), and
executor exceptions become our own error message. Payments-py's 0.3 client is served through
the SDK's 0.3 compatibility switch on the JSON-RPC route.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from a2a.server.context import ServerCallContext
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.routes import (
    DefaultServerCallContextBuilder,
    create_agent_card_routes,
    create_jsonrpc_routes,
    create_rest_routes,
)
from a2a.utils.errors import InternalError, UnsupportedOperationError
from starlette.applications import Starlette
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ....account.core import PluginCore
from ....config import ConfigError
from ....encoding import is_address
from ....host import GatewayAPI
from ....interop import a2a_x402 as x402
from ....redact import get_logger
from ...flow.admission import token_payer
from ...flow.flow import PaidFlow
from ..agent import PromptAgent
from ..endpoint import resolve_credits, resolve_handler
from .card import CARD_PATH, JSONRPC_PATH, LEGACY_CARD_PATH, REST_PATH, CardSource, skeleton
from .executor import RESOURCE_DESCRIPTION, URL_STATE, PaidExecutor
from .numbers import WholeNumbers
from .store import Payer, PayerTasks

log = get_logger("svc_gateway.paid_a2a")

#: the A2A agent's own port when it does not share the endpoint's (``paidA2APort`` unset)
DEFAULT_OWN_PORT = 8404
#: a task parked in input-required (waiting for its payment) is released after this long
PARKED_TASK_TIMEOUT_SECS = 300.0
STARTUP_TIMEOUT_SECS = 10.0
SCOPE_KEY = "svc_a2a_offered"
_UNVERIFIED = "The payment could not be verified now; nothing was charged. Try again later."
_REFUSED = "This paid agent answers SendMessage only: the answer comes in the send's reply."


@dataclass(frozen=True)
class Offered:
    """What a message offers before anything is verified: its token (in-band payload first,
    then the header), the payer that token names, and the payer an unpaid message says it is
    offered to (``x402.payment.payer``); '' for none."""

    token: str | None = None
    claimed: str = ""
    declared: str = ""


def offered_in(body: bytes, headers: dict[str, str]) -> Offered:
    """Read the message's payment from the request body and headers (as the executor does)."""
    token: str | None = None
    declared = ""
    try:
        data = json.loads(body) if body else None
    except (ValueError, RecursionError):
        data = None
    if isinstance(data, dict):
        params = data.get("params") if isinstance(data.get("params"), dict) else data
        message = params.get("message") if isinstance(params, dict) else None
        meta = message.get("metadata") if isinstance(message, dict) else None
        if isinstance(meta, dict):
            token = x402.token_from_payload(meta.get(x402.PAYLOAD))
            named = meta.get(x402.PAYER)
            declared = str(named).lower() if is_address(named) else ""
    if token is None:
        token = headers.get(x402.PAYMENT_HEADER, "").strip() or None
    payer = token_payer(token) if token and token != "!" else None
    return Offered(token, payer.lower() if payer else "", declared)


class PaymentScope:
    """ASGI middleware: bounds request bodies, and puts what the message offers (its token)
    into the scope, where :class:`PayerContext` reads it for the task store."""

    def __init__(
        self,
        app: ASGIApp,
        max_body_bytes: int,
        aclose: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        self.app = app
        self.max_body_bytes = max_body_bytes
        #: drains the SDK's active tasks (a lifespan runs it under uvicorn; an aiohttp app that
        #: serves this one through the bridge runs it at cleanup)
        self.aclose = aclose

    async def __call__(
        self,
        scope: Scope,
        receive: Receive,
        send: Send,
    ) -> None:
        if scope.get("type") != "http" or scope.get("method") != "POST":
            await self.app(scope, receive, send)
            return
        chunks: list[bytes] = []
        size, more = 0, True
        while more:
            message = await receive()
            if message.get("type") == "http.disconnect":
                return
            chunk = bytes(message.get("body") or b"")
            size += len(chunk)
            if size > self.max_body_bytes:
                await _too_large(send, self.max_body_bytes)
                return
            chunks.append(chunk)
            more = bool(message.get("more_body"))
        body = b"".join(chunks)
        headers = {
            bytes(k).decode("latin-1").lower(): bytes(v).decode("latin-1")
            for k, v in scope.get("headers") or []
        }
        scope = {**scope, SCOPE_KEY: offered_in(body, headers)}
        sent = False

        async def replay() -> Message:
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)


async def _too_large(send: Send, limit: int) -> None:
    body = json.dumps({"error": f"the request body is larger than {limit} bytes"}).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": 413, "headers": headers})
    await send({"type": "http.response.body", "body": body})


class PayerContext(DefaultServerCallContextBuilder):  # type: ignore[misc]
    """The SDK's call context, with the caller as a :class:`~.store.Payer` (its token verified
    through the flow, on this interface's URL, before the store finds it a task) and the
    interface URL in its state."""

    def __init__(self, flow: PaidFlow, url: Callable[[], str]) -> None:
        self.flow = flow
        self.url = url

    def build(self, request: Any) -> ServerCallContext:
        context = super().build(request)
        context.state[URL_STATE] = self.url()
        return context

    def build_user(self, request: Any) -> Payer:
        offered = request.scope.get(SCOPE_KEY)
        if not isinstance(offered, Offered):
            return Payer()
        url = self.url()
        return Payer(
            offered.claimed,
            offered.declared,
            token=offered.token,
            verify=lambda token: self.verify(token, url),
        )

    async def verify(self, token: str, url: str) -> str | None:
        flow = self.flow
        try:
            return await flow.on_its_loop(
                flow.verified_payer(token, url, description=RESOURCE_DESCRIPTION)
            )
        except Exception as exc:  # an outage: no payer is known, and none is guessed
            log.warning("could not verify an A2A payment (%s)", type(exc).__name__)
            raise InternalError(message=_UNVERIFIED) from None


class PaidRequestHandler(DefaultRequestHandler):  # type: ignore[misc]
    """The SDK's handler with reading tasks by id refused: a task id is not a credential."""

    async def on_get_task(self, *_args: Any, **_kwargs: Any) -> Any:
        raise UnsupportedOperationError(message=_REFUSED)

    async def on_list_tasks(self, *_args: Any, **_kwargs: Any) -> Any:
        raise UnsupportedOperationError(message=_REFUSED)

    async def on_cancel_task(self, *_args: Any, **_kwargs: Any) -> Any:
        raise UnsupportedOperationError(message=_REFUSED)

    async def on_subscribe_to_task(self, *_args: Any, **_kwargs: Any) -> Any:
        raise UnsupportedOperationError(message=_REFUSED)
        yield  # pragma: no cover - an async generator, as the SDK calls it


class PaidA2A:
    """A running paid A2A agent: its base URL, the interfaces' and card's URLs, how to stop."""

    def __init__(self, flow: PaidFlow, agent: PromptAgent, base: str, store: PayerTasks) -> None:
        self.flow = flow
        #: the agent sold: its handler, its pricing
        self.agent = agent
        self.base = base.rstrip("/")
        self.store = store
        self._stop: Callable[[], Awaitable[None]] | None = None
        #: the flow made for this agent alone (one it was given is its owner's to close)
        self.own_flow: PaidFlow | None = None

    @property
    def url(self) -> str:
        """The JSON-RPC interface (register it as the agent's endpoint)."""
        return self.base + JSONRPC_PATH

    @property
    def rest_url(self) -> str:
        return self.base + REST_PATH

    @property
    def card_url(self) -> str:
        return self.base + CARD_PATH

    async def close(self) -> None:
        stop, self._stop = self._stop, None
        if stop is not None:
            await stop()

    async def aclose(self) -> None:
        """Stop serving, then close the flow made for it; whoever attached it closes it."""
        await self.close()
        flow, self.own_flow = self.own_flow, None
        if flow is not None:
            await flow.aclose()

    def __repr__(self) -> str:
        return f"PaidA2A(url={self.url!r})"


def build_app(
    flow: PaidFlow,
    agent: PromptAgent,
    base: Callable[[], str],
    store: PayerTasks,
    *,
    cards: bool = True,
) -> PaymentScope:
    """The Starlette app of the SDK's routes, behind :class:`PaymentScope`; ``cards=False``
    leaves the card to the caller (the paid endpoint's app serves one card for both)."""
    source = CardSource(flow, base)
    handler = PaidRequestHandler(
        PaidExecutor(flow, agent),
        store,
        skeleton("http://127.0.0.1"),  # capabilities only: the served card is built per request
        interrupted_task_timeout=PARKED_TASK_TIMEOUT_SECS,
    )
    card_routes = [
        route
        for path in (CARD_PATH, LEGACY_CARD_PATH)
        for route in create_agent_card_routes(skeleton("http://127.0.0.1"), source.card, path)
    ]
    routes = [
        *(card_routes if cards else []),
        # payments-py's 0.3 client posts to the URL with a slash appended (and follows no
        # redirect): the same route answers there too
        *(
            route
            for path in (JSONRPC_PATH, JSONRPC_PATH + "/")
            for route in create_jsonrpc_routes(
                handler,
                path,
                context_builder=PayerContext(flow, lambda: base().rstrip("/") + JSONRPC_PATH),
                enable_v0_3_compat=True,
            )
        ),
        *create_rest_routes(
            handler,
            context_builder=PayerContext(flow, lambda: base().rstrip("/") + REST_PATH),
            path_prefix=REST_PATH,
        ),
    ]

    @contextlib.asynccontextmanager
    async def lifespan(_app: Starlette) -> AsyncIterator[None]:
        try:
            yield
        finally:
            await handler.aclose()

    app = Starlette(routes=routes, lifespan=lifespan)
    return PaymentScope(WholeNumbers(app), flow.seller.settings.max_body_bytes, handler.aclose)


async def serve(
    flow: PaidFlow, agent: PromptAgent, *, host: str, port: int, public: str | None = None
) -> PaidA2A:
    """Serve under uvicorn on the running loop (the plugin's); port 0 picks a free one."""
    import uvicorn

    holder: dict[str, str] = {"base": public or ""}
    store = PayerTasks()
    app = build_app(flow, agent, lambda: holder["base"], store)
    config = uvicorn.Config(
        app,
        host=host,
        port=port,
        lifespan="on",
        log_config=None,
        log_level="warning",
        access_log=False,
    )
    runner = uvicorn.Server(config)
    task = asyncio.get_running_loop().create_task(runner.serve())
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(STARTUP_TIMEOUT_SECS):
            while not runner.started:
                if task.done():
                    break
                await asyncio.sleep(0.01)
    if not runner.started:
        runner.should_exit = True
        with contextlib.suppress(BaseException):
            await task
        raise ConfigError(
            f"the paid A2A agent cannot listen on {host}:{port}; choose another paidA2APort "
            "(0 = any free port)"
        )
    bound = runner.servers[0].sockets[0].getsockname()[1]
    shown = "127.0.0.1" if host in ("", "0.0.0.0", "::") else host
    shown = f"[{shown}]" if ":" in shown else shown
    holder["base"] = public or f"http://{shown}:{bound}"
    handle = PaidA2A(flow, agent, holder["base"], store)

    async def stop() -> None:
        runner.should_exit = True
        with contextlib.suppress(asyncio.CancelledError):
            await task

    handle._stop = stop
    return handle


async def attach_paid_a2a(
    api: GatewayAPI,
    core: PluginCore,
    *,
    flow: PaidFlow | None = None,
    agent: PromptAgent | None = None,
) -> PaidA2A:
    """``enablePaidA2A`` on a port of its own: the gateway's agent over A2A on
    ``paidEndpointHost:paidA2APort`` (8404 when unset). Shares the HTTP endpoint's flow when
    given, and its agent (one book of credits in flight per payer). (On the endpoint's port:
    :class:`~.shared.OnEndpoint`.)"""
    config = core.config
    if agent is None:
        pool = flow.handler_pool if flow is not None else None
        agent = PromptAgent(resolve_handler(api, config, None), resolve_credits(api, None), pool)
    own = None
    if flow is None:
        # no settle store: an A2A answer is never delivered unsettled, so nothing is queued
        flow = own = PaidFlow(core, handler_pool=agent.pool, runtime=core.runtime)
    public = config.paid_a2a_public_url
    port = DEFAULT_OWN_PORT if config.paid_a2a_port is None else config.paid_a2a_port
    try:
        handle = await serve(flow, agent, host=config.paid_endpoint_host, port=port, public=public)
    except BaseException:
        if own is not None:
            await own.aclose()
        raise
    handle.own_flow = own
    log.info("paid A2A agent at %s (agent card: %s)", handle.url, handle.card_url)
    return handle
