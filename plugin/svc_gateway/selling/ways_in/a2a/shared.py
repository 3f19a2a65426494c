"""The paid A2A agent on the paid endpoint's own port: one aiohttp app, one agent card at the root.

When the plugin serves the paid endpoint itself and ``paidA2APort`` is unset (or equal to
``paidEndpointPort``), the A2A routes (``/a2a``, ``/a2a/rest/...``) join the endpoint's app
before it starts, through the ASGI bridge. The origin's card (``/.well-known/agent-card.json``
and ``/.well-known/agent.json``) is the A2A card (its interfaces, the payment extension, and
the 0.3 fields the SDK writes: ``url`` = the JSON-RPC interface, so a 0.3 client that follows
it reaches JSON-RPC) with the HTTP endpoint card's payment facts merged in (``agentId``,
``planId``, ``schemes``, ``networks``, ``creditsPerRequest``, ``x402Version``), both built per
request from the flow's facts. The endpoint keeps its own card at
``<agentEndpointPath>/.well-known/agent.json`` (``url`` = the HTTP endpoint), where an HTTP buyer
given the endpoint's URL looks (SPEC.md: ``<agentUrl>/.well-known/agent.json``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from a2a.server.request_handlers.response_helpers import agent_card_to_dict
from aiohttp import web

from ....config import ConfigError, PluginConfig
from ....host import GatewayAPI, host_http_app
from ....redact import get_logger
from ....runtime import RuntimeClosed
from ...flow.flow import PaidFlow
from ..agent import PromptAgent
from ..asgi import aiohttp_bridge
from ..http import PaidRoutes
from .card import CARD_PATH, JSONRPC_PATH, LEGACY_CARD_PATH, REST_PATH, CardSource
from .serve import PaidA2A, build_app
from .store import PayerTasks

log = get_logger("svc_gateway.paid_a2a")

_UNAVAILABLE = "The agent card is unavailable: the payment service is unreachable; retry shortly."


def shares_endpoint_port(api: GatewayAPI, config: PluginConfig) -> bool:
    """Whether A2A is served on the paid endpoint's port: the plugin serves the endpoint itself
    (not mounted on the host's app), and ``paidA2APort`` is unset or the endpoint's own port
    (``0`` always asks for a free port of its own)."""
    port = config.paid_a2a_port
    return (
        config.enable_paid_endpoint
        and host_http_app(api) is None
        and (port is None or port == config.paid_endpoint_port != 0)
    )


class OnEndpoint:
    """Puts the A2A way in on the endpoint's app (``install``, the endpoint's extension),
    and describes it once the endpoint listens (``started``)."""

    def __init__(self, public: str | None) -> None:
        self.public = public.rstrip("/") if public else None
        self.store = PayerTasks()
        self._flow: PaidFlow | None = None
        self._agent: PromptAgent | None = None
        self._base: Callable[[], str] | None = None

    def install(self, app: web.Application, routes: PaidRoutes, origin: Callable[[], str]) -> None:
        path = routes.path.rstrip("/") or "/"
        if path in ("/", "/a2a", "/.well-known") or path.startswith(("/a2a/", "/.well-known/")):
            raise ConfigError(
                f"agentEndpointPath {routes.path} overlaps the A2A agent's paths on the same "
                "port (/a2a, /a2a/rest, /.well-known/...): choose another agentEndpointPath, or "
                "give the A2A agent its own paidA2APort"
            )
        flow = routes.flow
        public = self.public
        base: Callable[[], str] = (lambda: public) if public else origin
        asgi = build_app(flow, routes.prompt_agent, base, self.store, cards=False)
        bridge = aiohttp_bridge(asgi)
        for rpc in (JSONRPC_PATH, JSONRPC_PATH + "/"):  # payments-py appends the slash
            app.router.add_route("*", rpc, bridge)
        app.router.add_route("*", REST_PATH + "/{tail:.*}", bridge)
        card = OneCard(CardSource(flow, base), routes)
        for where in (CARD_PATH, LEGACY_CARD_PATH):  # the endpoint's own: PaidRoutes.install
            app.router.add_get(where, card.serve)

        async def close(_app: web.Application) -> None:
            if asgi.aclose is not None:
                await asgi.aclose()

        app.on_cleanup.append(close)
        self._flow, self._agent, self._base = flow, routes.prompt_agent, base

    def started(self) -> PaidA2A:
        """The running agent (the endpoint's server stops it)."""
        if self._flow is None or self._agent is None or self._base is None:
            raise ConfigError("the paid endpoint did not take the A2A agent on its port")
        handle = PaidA2A(self._flow, self._agent, self._base(), self.store)
        log.info(
            "paid A2A agent at %s on the paid endpoint's port (agent card: %s)",
            handle.url,
            handle.card_url,
        )
        return handle


class OneCard:
    """The origin's card: the A2A card with the HTTP endpoint card's payment facts merged in
    (the A2A card's ``url``, its JSON-RPC interface, wins over the endpoint's)."""

    def __init__(self, source: CardSource, routes: PaidRoutes) -> None:
        self.source = source
        self.routes = routes

    async def serve(self, request: web.Request) -> web.Response:
        flow = self.routes.flow
        try:
            document = agent_card_to_dict(await self.source.card())
            endpoint = await flow.on_its_loop(
                self.routes.document(self.routes.endpoint_url(request))
            )
        except RuntimeClosed:
            return web.json_response({"error": "The agent is shutting down."}, status=503)
        except Exception as exc:  # an outage reading the plan or the agent
            log.warning("the agent card could not be built (%s)", type(exc).__name__)
            return web.json_response({"error": _UNAVAILABLE}, status=503)
        merged: dict[str, Any] = (
            {**{k: v for k, v in endpoint.items() if k != "url"}, **document}
            if isinstance(endpoint, dict)
            else document
        )
        return web.json_response(merged, headers={"Cache-Control": "max-age=60"})
