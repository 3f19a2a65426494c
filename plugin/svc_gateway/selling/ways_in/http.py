"""The HTTP face of the paid endpoint: aiohttp handlers, request checks, the agent card.

Everything a bad request can be caught for (method, size, content type, JSON, prompt) is
caught here, before any service call, so such requests are never verified or charged. The
paid work itself runs on the plugin loop (:meth:`PluginRuntime.run`), which matters when the
routes are mounted on a host's app served by the host's own loop.
"""

from __future__ import annotations

import asyncio
import functools
import json
from collections.abc import Callable
from typing import Any

from aiohttp import hdrs, web
from multidict import CIMultiDict

from ...interop.agent_card import CARD_PATH, build_card
from ...redact import get_logger
from ...runtime import RuntimeClosed
from ...service.errors import ServiceError
from ..flow.flow import PaidFlow
from ..flow.plans import OUTAGE_ERRORS
from ..flow.refusals import error_answer
from ..handlers import Answer
from ..types import PaidRequest
from .agent import PromptAgent

log = get_logger("svc_gateway.paid")

BODY_READ_TIMEOUT_SECS = 10.0
#: the buyer's idempotency key on HTTP (a retry with it never pays twice)
IDEMPOTENCY_HEADER = "Idempotency-Key"
AGENT_NAME_FALLBACK = "svc paid agent"


class BadRequest(Exception):
    """The request is malformed; ``answer`` says why (4xx). Never verified, never charged."""

    def __init__(self, answer: Answer) -> None:
        super().__init__(answer.status)
        self.answer = answer


def to_response(answer: Answer) -> web.Response:
    response = web.Response(status=answer.status, body=answer.body)
    response.headers["Content-Type"] = answer.content_type
    for name, value in answer.headers:
        response.headers[name] = value
    return response


#: headers that tell a shared cache to store an answer, beside ``Cache-Control``: ``Expires``
#: (an HTTP/1.0 cache reads it, not ``private``), ``Edge-Control`` and nginx's
#: ``X-Accel-Expires``; :func:`shared_cache_header` adds any ``*Cache-Control`` (RFC 9213's
#: ``CDN-Cache-Control``, ``Cloudflare-CDN-Cache-Control``...) and ``Surrogate-*``
SHARED_CACHE_HEADERS = frozenset({"expires", "edge-control", "x-accel-expires"})
#: ``Cache-Control`` directives a paid answer never keeps: they let a shared cache store it
SHARED_DIRECTIVES = ("public", "s-maxage")


def shared_cache_header(lowered: str) -> bool:
    """Whether a (lower-case) header name instructs a shared cache or CDN (not Cache-Control)."""
    return lowered in SHARED_CACHE_HEADERS or (
        lowered != "cache-control"
        and (lowered.endswith("cache-control") or "surrogate-" in lowered)
    )


def paid_headers(answer: Answer) -> list[tuple[str, str]]:
    """A paid route's response headers, cached as x402's reference servers say: a 402
    ``no-store``, any other answer ``private``, so a shared cache or CDN never serves one
    payer's answer to another (or to someone who never paid). The handler's own
    ``Cache-Control`` directives are kept but ``public`` and ``s-maxage``; every header that
    instructs a shared cache (:func:`shared_cache_header`: ``CDN-Cache-Control``,
    ``Surrogate-Control``, ``Expires``...) is dropped, whatever the status. Shared by every
    HTTP way in (aiohttp's :func:`paid_response`, the ASGI middleware)."""
    headers: list[tuple[str, str]] = [(hdrs.CONTENT_TYPE, answer.content_type)]
    own = ""
    for name, value in answer.headers:
        lowered = name.lower()
        if lowered == "cache-control":
            own = value  # the handler's own directives: kept below
        elif lowered != "content-type" and not shared_cache_header(lowered):
            headers.append((name, value))
    if answer.status == 402:
        cache = "no-store"
    elif not own:
        cache = "private"
    else:
        kept = [d.strip() for d in own.split(",") if d.strip()]
        kept = [d for d in kept if d.split("=", 1)[0].strip().lower() not in SHARED_DIRECTIVES]
        if "private" not in (d.lower() for d in kept):
            kept.append("private")
        cache = ", ".join(kept)
    headers.append((hdrs.CACHE_CONTROL, cache))
    return headers


def paid_response(answer: Answer) -> web.Response:
    """A paid route's answer as an aiohttp response (headers: :func:`paid_headers`)."""
    headers: CIMultiDict[str] = CIMultiDict()
    for name, value in paid_headers(answer):
        headers[name] = value
    return web.Response(status=answer.status, body=answer.body, headers=headers)


def client_connected(request: web.Request) -> bool:
    """Whether the client of ``request`` is still connected (aiohttp drops the transport when
    the connection is lost; a read of two attributes, safe from the plugin loop's thread)."""
    transport = request.transport
    return transport is not None and not transport.is_closing()


def _is_json_type(content_type: str) -> bool:
    return content_type == "application/json" or (
        content_type.startswith("application/") and content_type.endswith("+json")
    )


async def read_prompt(request: web.Request, max_bytes: int, read_secs: float) -> str:
    """The ``prompt`` of a JSON body no larger than ``max_bytes``, read within ``read_secs``."""
    declared = request.content_length
    if declared is not None and declared > max_bytes:
        raise BadRequest(_too_large(max_bytes))
    if not _is_json_type(request.content_type):
        raise BadRequest(
            error_answer(400, "Bad Request", 'Send Content-Type: application/json with {"prompt"}')
        )
    if request.content.is_eof():  # the whole body came with the headers: nothing to wait for
        body = request.content.read_nowait()
        if len(body) > max_bytes:
            raise BadRequest(_too_large(max_bytes))
    else:
        body = await _read_body(request, max_bytes, read_secs)
    try:
        data = json.loads(body)
    except (ValueError, RecursionError):
        raise BadRequest(error_answer(400, "Bad Request", "The body is not valid JSON.")) from None
    prompt = data.get("prompt") if isinstance(data, dict) else None
    if not isinstance(prompt, str) or not prompt.strip():
        raise BadRequest(
            error_answer(
                400,
                "Bad Request",
                'The body must be a JSON object with a non-empty "prompt" string.',
            )
        )
    try:
        prompt.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate such as "\ud800" is no text
        raise BadRequest(
            error_answer(
                400,
                "Bad Request",
                'The "prompt" is not valid Unicode text (it contains a lone surrogate '
                "escape); send UTF-8 text.",
            )
        ) from None
    return prompt


async def _read_body(request: web.Request, max_bytes: int, read_secs: float) -> bytes:
    """A body still arriving: read it within ``read_secs``, at most ``max_bytes``."""
    chunks: list[bytes] = []
    size = 0
    try:
        async with asyncio.timeout(read_secs):
            while chunk := await request.content.readany():
                size += len(chunk)
                if size > max_bytes:
                    raise BadRequest(_too_large(max_bytes))
                chunks.append(chunk)
    except TimeoutError:
        raise BadRequest(
            error_answer(408, "Request Timeout", "The request body did not arrive in time.")
        ) from None
    return b"".join(chunks)


def _too_large(max_bytes: int) -> Answer:
    return error_answer(
        413, "Payload Too Large", f"The request body is larger than {max_bytes} bytes."
    )


class PaidRoutes:
    """The aiohttp handlers: the paid agent route and the agent card (two paths)."""

    def __init__(
        self,
        flow: PaidFlow,
        agent: PromptAgent,
        *,
        path: str,
        endpoint_url: Callable[[web.Request], str],
        max_body_bytes: int,
        body_timeout: float = BODY_READ_TIMEOUT_SECS,
    ) -> None:
        self.flow = flow
        #: the agent sold here: its handler and its price
        self.prompt_agent = agent
        self.path = path
        self.endpoint_url = endpoint_url
        self.max_body_bytes = max_body_bytes
        self.body_timeout = body_timeout
        self._names: dict[str, tuple[str, str | None]] = {}

    def install(self, app: web.Application) -> None:
        """Add the routes (the app must not be started yet: aiohttp freezes its router)."""
        app.router.add_route("*", self.path, self.agent)
        own_card = self.path.rstrip("/") + CARD_PATH
        served = {getattr(r, "canonical", None) for r in app.router.resources()}
        if own_card not in served:
            app.router.add_get(own_card, self.card)
        if own_card == CARD_PATH:
            return
        if CARD_PATH in served:  # the host's root card, or the A2A agent's on this app
            log.info("%s is served already; the endpoint's card is at %s", CARD_PATH, own_card)
            return
        app.router.add_get(CARD_PATH, self.card)

    async def agent(self, request: web.Request) -> web.Response:
        """``POST <agentEndpointPath>``: never a traceback, whatever happens. (One coroutine:
        each layer is resumed at every suspension of the two service calls.)"""
        try:
            if request.method != "POST":
                return paid_response(
                    error_answer(
                        405,
                        "Method Not Allowed",
                        f'POST a JSON body {{"prompt": ...}} here; the agent card is at '
                        f"{self.path}{CARD_PATH}.",
                        Allow="POST",
                    )
                )
            try:
                prompt = await read_prompt(request, self.max_body_bytes, self.body_timeout)
            except BadRequest as bad:
                return paid_response(bad.answer)
            token = request.headers.get("payment-signature", "").strip() or None
            url = self.endpoint_url(request)
            flow = self.flow
            connected = functools.partial(client_connected, request)
            key = request.headers.get(IDEMPOTENCY_HEADER, "").strip() or None
            paid = self.prompt_agent.request(
                prompt, token, url, connected=connected, idempotency_key=key
            )
            runtime = flow.runtime
            if runtime is None or runtime.loop is asyncio.get_running_loop():  # no hop
                return paid_response((await flow.handle(paid)).answer)
            try:
                return paid_response(await runtime.run(self._sell(paid)))
            except RuntimeClosed:
                return paid_response(
                    error_answer(503, "Service Unavailable", "The agent is shutting down.")
                )
        except Exception as exc:  # pragma: no cover - the last line of defence
            log.error("paid endpoint failed unexpectedly (%s)", type(exc).__name__)
            return paid_response(
                error_answer(500, "Internal Server Error", "The agent failed; nothing was charged.")
            )

    async def _sell(self, paid: PaidRequest) -> Answer:
        """The request sold on the plugin loop (a host's app served by the host's loop)."""
        return (await self.flow.handle(paid)).answer

    async def card(self, request: web.Request) -> web.Response:
        """``GET .../.well-known/agent.json``: who this agent is and how it is paid."""
        try:
            url = self.endpoint_url(request)
            answer = await self.flow.on_its_loop(self._card(url))
        except RuntimeClosed:
            answer = error_answer(503, "Service Unavailable", "The agent is shutting down.")
        except Exception as exc:  # pragma: no cover - the last line of defence
            log.error("agent card failed unexpectedly (%s)", type(exc).__name__)
            answer = error_answer(500, "Internal Server Error", "The agent card is unavailable.")
        return to_response(answer)

    async def _card(self, url: str) -> Answer:
        card = await self.document(url)
        if isinstance(card, Answer):
            return card
        return Answer.json(200, card, {"Cache-Control": "max-age=60"})

    async def document(self, url: str) -> dict[str, Any] | Answer:
        """The card of the endpoint at ``url`` (runs on the plugin loop), or why there is none
        (503: no plan yet, the service unreachable)."""
        plan_id = self.flow.plan_id()
        if plan_id is None:
            return error_answer(
                503, "Service Unavailable", "This agent is not selling yet: no plan is configured."
            )
        try:
            facts = await self.flow.facts(plan_id)
        except OUTAGE_ERRORS:
            return error_answer(
                503, "Service Unavailable", "The payment service is unreachable; retry shortly."
            )
        agent_id = self.flow.agent_id()
        name, description = await self._agent_name(agent_id)
        return build_card(
            name=name,
            description=description or facts.description,
            agent_id=agent_id,
            plan_id=plan_id,
            url=url,
            scheme=facts.scheme,
            network=facts.network,
            credits_per_request=facts.clamp(self.flow.seller.settings.credits_per_request),
            idempotency_ttl_secs=self.flow.seller.settings.idempotency_ttl_secs,
        )

    async def _agent_name(self, agent_id: str | None) -> tuple[str, str | None]:
        """The registered agent's name (remembered; at most a few agent ids ever appear)."""
        if agent_id is None:
            return AGENT_NAME_FALLBACK, None
        if agent_id in self._names:
            return self._names[agent_id]
        try:
            agent = await self.flow.seller.public_client().get_agent(agent_id)
        except ServiceError:
            return AGENT_NAME_FALLBACK, None
        found = (agent.name, agent.metadata.main.description)
        if len(self._names) >= 16:
            self._names.clear()
        self._names[agent_id] = found
        return found
