"""Serving the paid MCP server: uvicorn on its own port, or mounted on a host's aiohttp app.

Why two ways: the SDK's transport is ASGI (anyio task group, SSE streams, session cleanup), and
uvicorn is the server it is built and tested with, so the stand-alone server runs the ASGI app
under uvicorn on the plugin loop (``paidEndpointHost:paidMcpPort``). A host with an aiohttp
``http_app`` gets the routes on that app instead, through :func:`aiohttp_bridge`, a small
ASGI-over-aiohttp adapter (request body in, status/headers/body chunks out; streamed, so the
GET SSE stream works); the session manager then runs on the host's loop and each paid call
hops to the plugin loop, where the flow lives.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from ....account.core import PluginCore
from ....config import ConfigError
from ....host import GatewayAPI, host_http_app
from ....interop import mcp_sdk as sdk
from ....redact import get_logger
from ...flow.flow import PaidFlow
from ...handlers import (
    AgentHandler,
    HandlerError,
    call_maybe_async,
    to_answer,
)
from ..asgi import aiohttp_bridge
from ..endpoint import resolve_handler
from .app import MCP_PATH, WELL_KNOWN, McpAsgiApp, Scope
from .server import Options, PaidMcpServer

log = get_logger("svc_gateway.paid_mcp")

STARTUP_TIMEOUT_SECS = 10.0
ASK_SCHEMA = {
    "type": "object",
    "properties": {"prompt": {"type": "string", "minLength": 1, "description": "The question"}},
    "required": ["prompt"],
}
_LOOPBACK = ("127.0.0.1", "localhost", "::1")


class PaidMcp:
    """A running paid MCP server: its URL (``…/mcp``), its registrations, how to stop it."""

    def __init__(self, server: PaidMcpServer, app: McpAsgiApp, url: str) -> None:
        self.server = server
        self.app = app
        self.url = url
        self._stop: Callable[[], Awaitable[None]] | None = None
        #: the flow made for this server alone (one it was given is its owner's to close)
        self.own_flow: PaidFlow | None = None

    @property
    def stats(self) -> Any:
        return self.server.flow.stats

    def logical_uri(self, name: str, kind: str = "tools") -> str:
        return self.server.logical_uri(kind, name)  # type: ignore[arg-type]

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
        return f"PaidMcp(url={self.url!r}, serverName={self.server.server_name!r})"


class _ClosedStreamFilter(logging.Filter):
    """mcp 1.x logs a client ending its session while its GET stream is open as an ERROR with
    a traceback (``ClosedResourceError`` in the standalone SSE writer); that is a normal
    goodbye, so it is kept at DEBUG."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        if type(exc).__name__ == "ClosedResourceError" and "SSE writer" in record.getMessage():
            record.levelno, record.levelname = logging.DEBUG, "DEBUG"
            record.exc_info = None
            return logging.getLogger(record.name).isEnabledFor(logging.DEBUG)
        return True


def quiet_closed_streams() -> None:
    sdk_log = logging.getLogger("mcp.server.streamable_http")
    if not any(isinstance(f, _ClosedStreamFilter) for f in sdk_log.filters):
        sdk_log.addFilter(_ClosedStreamFilter())


def _base_url_from(scope: Scope) -> str:
    headers = dict(scope.get("headers") or [])
    host = headers.get(b"host", b"").decode("latin-1")
    if not host:
        server = scope.get("server") or ("127.0.0.1", 0)
        host = f"{server[0]}:{server[1]}"
    return f"{scope.get('scheme', 'http')}://{host}"


def build_app(server: PaidMcpServer, *, host: str, public: str | None = None) -> McpAsgiApp:
    quiet_closed_streams()
    mcp_server = sdk.build_server(server.server_name, server.version, server)
    loopback = host in _LOOPBACK and public is None
    allowed = ["127.0.0.1:*", "localhost:*", "[::1]:*"] if loopback else None
    manager = sdk.session_manager(mcp_server, allowed_hosts=allowed)
    stateless = sdk.session_manager(mcp_server, allowed_hosts=allowed, stateless=True)
    origin = public.rstrip("/") if public else None
    return McpAsgiApp(
        server, manager, stateless=stateless, base_url=lambda scope: origin or _base_url_from(scope)
    )


async def serve(server: PaidMcpServer, *, host: str, port: int) -> PaidMcp:
    """Serve under uvicorn on the running loop; port 0 picks a free one."""
    import uvicorn

    await server.core.runtime.run(server.check_plans())
    app = build_app(server, host=host)
    config = uvicorn.Config(
        app,
        host=host,
        port=port,
        lifespan="on",
        log_config=None,  # the host owns logging; uvicorn must not reconfigure it
        log_level="warning",
        access_log=False,
    )
    runner = uvicorn.Server(config)
    task = asyncio.get_running_loop().create_task(runner.serve())
    try:
        async with asyncio.timeout(STARTUP_TIMEOUT_SECS):
            while not runner.started:
                if task.done():
                    break
                await asyncio.sleep(0.01)
    except TimeoutError:
        runner.should_exit = True
    if not runner.started:
        with contextlib.suppress(BaseException):
            await task
        raise ConfigError(
            f"the paid MCP server cannot listen on {host}:{port}; choose another paidMcpPort "
            "(0 = any free port)"
        )
    bound = runner.servers[0].sockets[0].getsockname()[1]
    shown = "127.0.0.1" if host in ("", "0.0.0.0", "::") else host
    if ":" in shown:
        shown = f"[{shown}]"
    handle = PaidMcp(server, app, f"http://{shown}:{bound}{MCP_PATH}")

    async def stop() -> None:
        runner.should_exit = True
        with contextlib.suppress(asyncio.CancelledError):
            await task

    handle._stop = stop
    log.info("paid MCP server listening at %s", handle.url)
    return handle


def mount(app: web.Application, handle: PaidMcp) -> None:
    """Add ``/mcp`` (and its protected-resource document) to a host's aiohttp app and run the
    session manager with the app (startup to cleanup)."""
    if app.frozen:
        raise ConfigError(
            "the host's http_app is already running, so the paid MCP server cannot be added "
            "to it; register the plugin before the host starts its web app"
        )
    bridge = aiohttp_bridge(handle.app)
    app.router.add_route("*", MCP_PATH, bridge)
    app.router.add_get(WELL_KNOWN[0] + MCP_PATH, bridge)
    stop = asyncio.Event()
    tasks: list[asyncio.Task[None]] = []

    async def run_manager() -> None:
        async with handle.app.running():
            await stop.wait()

    async def on_startup(_app: web.Application) -> None:
        server = handle.server
        await server.core.runtime.run(server.check_plans())  # a ConfigError stops the app
        tasks.append(asyncio.get_running_loop().create_task(run_manager()))

    async def on_cleanup(_app: web.Application) -> None:
        stop.set()
        for task in tasks:
            await task

    app.on_startup.append(on_startup)
    app.on_cleanup.append(on_cleanup)


def ask_tool(handler: AgentHandler) -> Callable[[dict[str, Any]], Any]:
    """The gateway's agent handler as the ``ask`` tool: ``{prompt}`` → the handler's JSON."""

    async def ask(arguments: dict[str, Any]) -> Any:
        answer = to_answer(await call_maybe_async(handler, {"prompt": arguments["prompt"]}))
        if not answer.ok:
            raise HandlerError(f"the agent answered {answer.status}")
        try:
            return json.loads(answer.body)
        except ValueError:
            return answer.body.decode("utf-8", errors="replace")

    return ask


def create_server(
    core: PluginCore,
    *,
    server_name: str,
    plan_id: str | None = None,
    agent_id: str | None = None,
    flow: PaidFlow | None = None,
) -> PaidMcpServer:
    """A paid MCP server for a builder's own registrations, billed by ``flow`` (default: a new
    flow of this plugin, selling ``plan_id`` or the configured plan)."""
    if flow is None:
        # no settle store: every MCP request withholds instead of queueing, so this flow never
        # opens one (and never contends for the HTTP endpoint's journal lock)
        flow = PaidFlow(core, runtime=core.runtime)
        core.runtime.add_closer(flow.aclose)
    return PaidMcpServer(core, flow, server_name=server_name, plan_id=plan_id, agent_id=agent_id)


async def attach_paid_mcp(
    api: GatewayAPI, core: PluginCore, *, flow: PaidFlow | None = None
) -> PaidMcp:
    """``enablePaidMcp``: the gateway's agent as the paid tool ``ask``, on its own port or
    mounted at ``/mcp`` on the host's app. Shares the HTTP endpoint's flow when given (one book
    of credits in flight per payer). Whoever attaches it closes it (:meth:`PaidMcp.aclose`)."""
    own = None if flow is not None else PaidFlow(core, runtime=core.runtime)
    try:
        handle = await _attach(api, core, flow or own)
    except BaseException:
        if own is not None:
            await own.aclose()
        raise
    handle.own_flow = own
    return handle


async def _attach(api: GatewayAPI, core: PluginCore, flow: PaidFlow | None) -> PaidMcp:
    """The ``ask`` tool on a server billed by ``flow``, mounted or served."""
    config = core.config
    handler = resolve_handler(api, config, None)
    server = create_server(core, server_name=config.mcp_server_name, flow=flow)
    server.tool(
        "ask",
        ask_tool(handler),
        description="Ask the agent a question; paid per call.",
        input_schema=ASK_SCHEMA,
        options=Options(credits=config.credits_per_request),
    )
    host_app = host_http_app(api)
    if host_app is not None:
        base = getattr(api, "http_base_url", None)
        app = build_app(server, host="0.0.0.0", public=base if isinstance(base, str) else None)
        url = (str(base).rstrip("/") if isinstance(base, str) and base else "") + MCP_PATH
        handle = PaidMcp(server, app, url)
        mount(host_app, handle)
        log.info("paid MCP server mounted on the host's web app at %s", url)
        return handle
    return await serve(server, host=config.paid_endpoint_host, port=config.paid_mcp_port)
