"""The paid agent endpoint: this gateway sells its agent's answers, one x402 payment each.

``POST <agentEndpointPath>`` with ``{"prompt": ...}`` and ``payment-signature`` → verify →
handler → settle → 200 with the receipt in ``payment-response`` (SPEC.md "Paid agent
request" and the middleware state table; the state machine is :mod:`svc_gateway.selling.flow.flow`).
The agent card is served at ``<agentEndpointPath>/.well-known/agent.json`` and at the root.

Mounted on the host's ``http_app`` when it has one, else served by the plugin itself on
``paidEndpointHost:paidEndpointPort``, on the plugin loop, stopped by a runtime closer.

Plan id precedence: the ``plan_id`` argument > ``core.plan_id`` (which svc_registerAgent
updates) > config ``planId`` > the first ``plans[]`` entry, read on every request. With none,
the endpoint starts (a builder registers its plan *after* the endpoint URL exists) but answers
503 until a plan is set; ``require_plan=True`` makes it refuse to start instead.
"""

from __future__ import annotations

import asyncio
import logging
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError

from ...account.core import PluginCore
from ...config import ConfigError, PluginConfig
from ...host import GatewayAPI, host_http_app
from ...redact import get_logger
from ...safe_text import plural
from ..flow.admission import MAX_TOKEN_CHARS
from ..flow.flow import PaidFlow
from ..handlers import AgentHandler, CreditsFn, default_handler, load_handler
from ..state.open import shared_state
from ..state.stats import PaidStats
from .agent import PromptAgent
from .http import PaidRoutes

if TYPE_CHECKING:
    from ..state.redis_store import RedisState

__all__ = ["AgentHandler", "CreditsFn", "Extension", "PaidEndpoint", "attach_paid_endpoint"]

#: another way in served by the endpoint's own server: given the app before it starts, the
#: endpoint's routes, and the endpoint's origin as clients see it (known once it listens)
Extension = Callable[[web.Application, PaidRoutes, Callable[[], str]], None]

log = get_logger("svc_gateway.paid")

SHUTDOWN_TIMEOUT_SECS = 5.0


class ProtocolLog(logging.LoggerAdapter):  # type: ignore[type-arg]
    """aiohttp's server logger for the endpoint's own server: a malformed request (bad bytes,
    a header too long) is the client's mistake, answered 400 by aiohttp; it is logged at INFO
    by its class name, without the traceback that would quote the offending bytes."""

    def exception(self, msg: object, *args: object, exc_info: Any = True, **kwargs: Any) -> None:
        exc = exc_info if isinstance(exc_info, BaseException) else sys.exc_info()[1]
        if isinstance(exc, HttpProcessingError):
            self.logger.info("refused a malformed HTTP request (%s)", type(exc).__name__)
        else:
            self.logger.error("the paid endpoint's server failed (%s)", type(exc).__name__)


_WILDCARDS = ("", "0.0.0.0", "::")


class PaidEndpoint:
    """A running paid endpoint: where it is, what it has earned, and how to stop it.

    ``url`` is the endpoint as clients see it (``paidEndpointPublicUrl`` when set: register
    this one); ``bound_url`` is where the plugin's own server listens (``None`` when mounted).
    """

    def __init__(
        self,
        flow: PaidFlow,
        agent: PromptAgent,
        *,
        url: str,
        card_url: str,
        runner: web.AppRunner | None = None,
        bound_url: str | None = None,
    ) -> None:
        self.flow = flow
        #: the agent sold: its handler, its pricing (:meth:`PromptAgent.serve` sells a prompt)
        self.agent = agent
        self.url = url
        self.card_url = card_url
        self.bound_url = bound_url
        self._runner = runner
        #: the state shared with other replicas (``stateUrl``), ``None`` in-process
        self.shared: RedisState | None = None
        #: the background check of the URL against the agent's registered endpoints
        self.check: asyncio.Task[None] | None = None

    @property
    def mounted(self) -> bool:
        """True when the routes live on the host's app rather than the plugin's own server."""
        return self._runner is None

    @property
    def stats(self) -> PaidStats:
        return self.flow.stats

    async def shared_stats(self) -> dict[str, int] | None:
        """The counters of every replica on ``stateUrl``, summed (each pushes about once a
        second and when it closes); ``None`` without ``stateUrl``."""
        if self.shared is None:
            return None
        return await self.flow.on_its_loop(self.shared.stats.totals())

    @property
    def plan_id(self) -> str | None:
        return self.flow.plan_id()

    async def close(self) -> None:
        """Stop the plugin's own server (in-flight requests get a few seconds to finish)."""
        runner, self._runner = self._runner, None
        if runner is not None:
            await runner.cleanup()

    async def aclose(self) -> None:
        """Close what :func:`attach_paid_endpoint` opened: the registration check, the server,
        the flow (its settle retries, store and book), then the state shared through Redis.
        Whoever attached the endpoint closes it (the chat plugin: at its runtime's close)."""
        if self.check is not None:
            self.check.cancel()
        await self.close()
        await self.flow.aclose()
        if self.shared is not None:  # after the flow's own book and store
            await self.shared.aclose(self.flow.stats)

    def __repr__(self) -> str:
        return f"PaidEndpoint(url={self.url!r}, mounted={self.mounted})"


def origin_of(url: str) -> str:
    """``scheme://host[:port]`` of ``url``."""
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}"


def _public_endpoint_url(config: PluginConfig) -> str | None:
    """``paidEndpointPublicUrl`` is the endpoint itself, or an origin the path is appended to."""
    public = config.paid_endpoint_public_url
    if public is None:
        return None
    if urlsplit(public).path in ("", "/"):
        return public.rstrip("/") + config.agent_endpoint_path
    return public


def resolve_handler(
    api: GatewayAPI, config: PluginConfig, given: AgentHandler | None
) -> AgentHandler:
    """The argument, else the host's ``api.agent_handler``, else config ``agentHandler``,
    else the deterministic default."""
    if given is not None:
        return given
    hosted = getattr(api, "agent_handler", None)
    if hosted is not None:
        if not callable(hosted):
            raise ConfigError("the host's agent_handler is not callable")
        handler: AgentHandler = hosted
        return handler
    if config.agent_handler:
        return load_handler(config.agent_handler)
    return default_handler


def resolve_credits(api: GatewayAPI, given: CreditsFn | None) -> CreditsFn | None:
    """The argument, else the host's ``api.credits_for_request``, else ``None`` (config)."""
    if given is not None:
        return given
    hosted = getattr(api, "credits_for_request", None)
    if hosted is not None and not callable(hosted):
        raise ConfigError("the host's credits_for_request is not callable")
    fn: CreditsFn | None = hosted
    return fn


async def attach_paid_endpoint(
    api: GatewayAPI,
    core: PluginCore,
    *,
    handler: AgentHandler | None = None,
    credits: CreditsFn | None = None,
    plan_id: str | None = None,
    agent_id: str | None = None,
    require_plan: bool = False,
    extend: Extension | None = None,
) -> PaidEndpoint:
    """Mount or serve the paid endpoint. Runs on the plugin loop; makes no service call.
    ``extend`` adds another way in to the plugin's own server before it starts (ignored when
    the endpoint is mounted on the host's app). Whoever attaches it closes it
    (:meth:`PaidEndpoint.aclose`)."""
    config = core.config
    shared = shared_state(core)
    agent = PromptAgent(resolve_handler(api, config, handler), resolve_credits(api, credits))
    flow = PaidFlow(
        core,
        handler_pool=agent.pool,
        plan_id=plan_id,
        agent_id=agent_id,
        book=shared.book if shared is not None else None,
        queue=shared.store if shared is not None else None,
        runtime=core.runtime,
        idempotency=shared.idempotency if shared is not None else None,
    )
    if shared is not None:
        shared.share(flow.stats)
    try:
        endpoint = await _start(api, core, flow, agent, require_plan, extend)
    except BaseException:  # nothing is handed back to close: closed here
        await flow.aclose()
        if shared is not None:
            await shared.aclose(flow.stats)
        raise
    endpoint.shared = shared
    # in the background (start makes no service call): a replica at a URL the agent did not
    # register would be refused every bound token without a word
    endpoint.check = asyncio.create_task(_note_registration(flow, endpoint.url))
    return endpoint


async def _start(
    api: GatewayAPI,
    core: PluginCore,
    flow: PaidFlow,
    agent: PromptAgent,
    require_plan: bool,
    extend: Extension | None,
) -> PaidEndpoint:
    """Retry what a previous run owes, then mount the routes or start the server."""
    config = core.config
    owed = await flow.settler.start()
    if owed:  # settles a previous run could not finish
        log.warning("%s of a previous run not settled yet: retrying", plural(owed, "paid request"))
    if flow.plan_id() is None:
        if require_plan:
            raise ConfigError(
                "enablePaidEndpoint needs a plan to sell: set planId (or plans) in the plugin "
                "config, or register one with svc_registerAgent"
            )
        # normal for a builder, who registers the plan once the endpoint URL exists
        log.info(
            "paid endpoint started without a plan: it answers 503 until planId is configured "
            "or svc_registerAgent registers a plan"
        )
    path = config.agent_endpoint_path
    public = _public_endpoint_url(config)
    host_app = host_http_app(api)
    if host_app is not None:
        return _mount(api, host_app, flow, agent, path, public)
    return await _serve(core, flow, agent, path, public, extend)


async def _note_registration(flow: PaidFlow, url: str) -> None:
    """Warn when ``url`` is not one of the sold agent's registered endpoints."""
    agent_id = flow.agent_id()
    if agent_id is None or flow.plan_id() is None or not url.startswith(("http://", "https://")):
        return
    from ...buying.purchase import is_registered, registered_endpoints

    try:
        document = await flow.seller.public_client().get_agent_document(agent_id)
    except Exception:  # unreadable now: the service's own refusal says it later
        return
    endpoints = registered_endpoints(document)
    if endpoints and not is_registered(url, endpoints, agent_id):
        listed = ", ".join(f"{verb} {one}" for verb, one in endpoints[:5])
        log.warning(
            "Paid endpoint: %s is not a registered endpoint of agent %s (it registered %s): "
            "tokens bound to this URL are refused. Add this URL to the agent's endpoints, or "
            "set paidEndpointPublicUrl to a registered one",
            url,
            agent_id,
            listed,
        )


def _mount(
    api: GatewayAPI,
    app: web.Application,
    flow: PaidFlow,
    agent: PromptAgent,
    path: str,
    public: str | None,
) -> PaidEndpoint:
    """Add the routes to the host's app. Without a public URL or ``api.http_base_url`` the
    envelope's URL is taken from each request (and ``PaidEndpoint.url`` is only the path)."""
    base = getattr(api, "http_base_url", None)
    fixed = public or (str(base).rstrip("/") + path if isinstance(base, str) and base else None)

    def endpoint_url(request: web.Request) -> str:
        return fixed or str(request.url.origin()) + path

    routes = PaidRoutes(
        flow,
        agent,
        path=path,
        endpoint_url=endpoint_url,
        max_body_bytes=flow.seller.settings.max_body_bytes,
    )
    if app.frozen:
        raise ConfigError(
            "the host's http_app is already running, so the paid endpoint cannot be added to "
            "it; register the plugin before the host starts its web app"
        )
    routes.install(app)
    url = fixed or path
    log.info("paid endpoint mounted on the host's web app at %s", url)
    return PaidEndpoint(flow, agent, url=url, card_url=url.rstrip("/") + "/.well-known/agent.json")


async def _serve(
    core: PluginCore,
    flow: PaidFlow,
    agent: PromptAgent,
    path: str,
    public: str | None,
    extend: Extension | None = None,
) -> PaidEndpoint:
    """Serve the endpoint from the plugin loop on ``paidEndpointHost:paidEndpointPort``."""
    config = core.config
    app = web.Application(client_max_size=config.max_body_bytes)
    holder: dict[str, str] = {}
    routes = PaidRoutes(
        flow,
        agent,
        path=path,
        endpoint_url=lambda _request: holder["url"],
        max_body_bytes=config.max_body_bytes,
    )
    if extend is not None:  # first: the router freezes when the app starts
        extend(app, routes, lambda: origin_of(holder["url"]))
    routes.install(app)
    # keepalive_timeout runs from the connection's start (and from each response): a client
    # that never finishes its headers, or trickles them, is closed when it expires
    runner = web.AppRunner(
        app,
        handle_signals=False,
        shutdown_timeout=SHUTDOWN_TIMEOUT_SECS,
        keepalive_timeout=config.paid_header_timeout_secs,
        access_log=None,
        # a header as long as the longest token we read, so an oversize token gets our 402
        max_field_size=MAX_TOKEN_CHARS + 1024,
        logger=ProtocolLog(log, {}),
    )
    await runner.setup()
    host, port = config.paid_endpoint_host, config.paid_endpoint_port
    try:
        await web.TCPSite(runner, host, port, reuse_address=True).start()
    except OSError as exc:
        await runner.cleanup()
        raise ConfigError(
            f"the paid endpoint cannot listen on {host}:{port} ({exc.strerror or exc}); "
            "choose another paidEndpointPort (0 = any free port)"
        ) from None
    bound_port = int(runner.addresses[0][1])
    shown = "127.0.0.1" if host in _WILDCARDS else host
    if ":" in shown:
        shown = f"[{shown}]"
    bound = f"http://{shown}:{bound_port}{path}"
    holder["url"] = public or bound
    endpoint = PaidEndpoint(
        flow,
        agent,
        url=holder["url"],
        card_url=holder["url"].rstrip("/") + "/.well-known/agent.json",
        runner=runner,
        bound_url=bound,
    )
    log.info("paid endpoint listening at %s (public URL %s)", bound, endpoint.url)
    return endpoint
