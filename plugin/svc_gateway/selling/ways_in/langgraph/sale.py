"""One gated request of the ASGI middleware (:class:`Sale`): its body held for the token's
digest, the app run as the paid flow's work, the answer held and sent with its receipt, or an
event stream sent through and settled at its end (:mod:`.asgi` says what is charged when)."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any, Protocol
from urllib.parse import urlsplit

from ....encoding import compact_json
from ....redact import get_logger
from ...flow.flow import PaidFlow
from ...flow.replay import digest
from ...handlers import Answer
from ...types import Outcome, PaidOutcome, PaidRequest
from ..http import IDEMPOTENCY_HEADER, paid_headers
from ..routes import Route

log = get_logger("svc_gateway.paid")

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

#: request headers the app never sees on a gated route (the token is the payer's secret)
_TAKEN = frozenset({b"payment-signature"})
#: response headers re-made when a held answer is sent again (framing, type, our receipt)
_FRAMING = frozenset(
    {b"content-length", b"transfer-encoding", b"connection", b"content-type", b"payment-response"}
)
SSE = "text/event-stream"
_IDEMPOTENCY = IDEMPOTENCY_HEADER.lower().encode()


class Gate(Protocol):
    """What a sale reads of its middleware (:class:`~.asgi.PaymentMiddleware`)."""

    flow: PaidFlow
    #: the app behind the gate (an ASGI callable)
    app: Callable[[Scope, Receive, Send], Awaitable[None]]

    def sale_of(self, route: Route) -> tuple[dict[str, Any], int | None]: ...

    def unpriced(self, route: Route) -> bool: ...

    def note_price(self, route: Route, credits: int) -> None: ...


#: the last events of a paid stream: the receipt, or why it was not charged
RECEIPT_EVENT = "payment-response"
NO_CHARGE_EVENT = "payment-error"
#: how an event stream says its run failed (LangGraph's ``event: error``)
_ERROR_EVENT = b"event: error"


def run_failed(body: bytes) -> bool:
    """Whether a JSON answer says its run failed (LangGraph's ``{"__error__": ...}`` on a 200;
    keep-alive newlines before it are skipped)."""
    if b'"__error__"' not in body:
        return False
    try:
        data = json.loads(body)
    except (ValueError, RecursionError):
        return False
    return isinstance(data, dict) and "__error__" in data


class Sale:
    """One gated request: its body held for the digest, the app run as the flow's work, the
    answer sent (held) or streamed through (settled at its end)."""

    def __init__(
        self,
        gate: Gate,
        route: Route,
        verb: str,
        scope: Scope,
        receive: Receive,
        send: Send,
    ) -> None:
        self.gate = gate
        self.route = route
        self.verb = verb
        self.receive = receive
        self.send = send
        self.token: str | None = None
        #: the buyer's Idempotency-Key (a retry of a paid run gets the kept answer back)
        self.idempotency_key: str | None = None
        #: the request's ``Host`` (read in the same pass that takes the token off)
        self.host = ""
        kept = []
        for name, value in scope.get("headers") or ():
            lowered = bytes(name).lower()
            if lowered in _TAKEN:
                self.token = bytes(value).decode("latin-1").strip() or self.token
                continue
            if lowered == b"host" and not self.host:
                self.host = bytes(value).decode("latin-1")
            elif lowered == _IDEMPOTENCY:
                self.idempotency_key = bytes(value).decode("latin-1").strip() or None
            kept.append((name, value))
        self.scope = {**scope, "headers": kept}
        #: the app's response content type (lower-case, no parameters), once it started
        self.content_type = ""
        self.body: list[bytes] = []
        self.body_read = False
        self.gone = False
        #: a stream being sent through: its start went out (so did its events so far)
        self.streaming = False
        self.stream_failed = False
        self._tail = b""

    async def run(self) -> None:
        gate = self.gate
        body_digest = None
        if self.token:
            raw = await self._read_body()
            raw_path = self.scope.get("raw_path") or self.scope["path"].encode()
            body_digest = digest(self.verb, bytes(raw_path).decode("latin-1"), raw)
        sale, fixed = gate.sale_of(self.route)
        paid = PaidRequest(
            token=self.token,
            url=self._url(),
            work=self._work,
            verb=self.verb,
            credits=fixed if fixed is not None else self._price,
            body_digest=body_digest,
            connected=self._connected,
            idempotency_key=self.idempotency_key,
            **sale,
        )
        outcome = await gate.flow.handle(paid)
        if fixed is not None and gate.unpriced(self.route):
            gate.note_price(self.route, fixed)
        if self.streaming:
            await self._end_stream(outcome)
        else:
            await self._send_answer(outcome.answer)

    # -- the request -------------------------------------------------------------------------

    async def _read_body(self) -> bytes:
        """The whole request body (the token's digest covers it); the app reads it again."""
        while True:
            message = await self.receive()
            if message["type"] == "http.disconnect":
                self.gone = True
                break
            self.body.append(bytes(message.get("body") or b""))
            if not message.get("more_body"):
                break
        self.body_read = True
        return b"".join(self.body)

    async def _replay(self) -> Message:
        """The app's ``receive``: the held body first, then the client's own messages (its
        disconnect included: LangGraph cancels a run whose client left)."""
        if self.body_read:
            self.body_read = False
            return {"type": "http.request", "body": b"".join(self.body), "more_body": False}
        message = await self.receive()
        if message["type"] == "http.disconnect":
            self.gone = True
        return message

    def _connected(self) -> bool:
        """Settle only for a client still there, or a stream it already got (delivered)."""
        return self.streaming or not self.gone

    def _url(self) -> str:
        """The resource URL: the request's own, without its query, on the public origin when
        the seller's ``paidEndpointPublicUrl`` names one (behind a proxy)."""
        path = f"{self.scope.get('root_path', '')}{self.scope['path']}"
        public = self.gate.flow.seller.settings.public_url
        if public:
            parts = urlsplit(public)
            if parts.netloc:
                return f"{parts.scheme}://{parts.netloc}{path}"
        scheme = self.scope.get("scheme", "http")
        host = self.host
        if not host:
            server = self.scope.get("server") or ("localhost", None)
            host = server[0] if server[1] in (None, 80, 443) else f"{server[0]}:{server[1]}"
        return f"{scheme}://{host}{path}"

    async def _price(self) -> int:
        from starlette.requests import Request  # the extra's: only a price function needs it

        body = b"".join(self.body) if self.body else None
        request = Request(self.scope, self._replay if body is None else _fixed_body(body))
        credits = await self.route.config.price(request)
        self.gate.note_price(self.route, credits)
        return credits

    # -- the work: the app's answer ----------------------------------------------------------

    async def _work(self) -> Answer:
        start: Message | None = None
        chunks: list[bytes] = []

        async def capture(message: Message) -> None:
            nonlocal start
            kind = message["type"]
            if kind == "http.response.start":
                start = message
                self.content_type = _content_type(message)
                if 200 <= int(message["status"]) < 300 and self.content_type.startswith(SSE):
                    await self._start_stream(message)
            elif kind == "http.response.body":
                body = bytes(message.get("body") or b"")
                if self.streaming:
                    self._watch(body)
                    if body:  # its end is ours to send, after the settle
                        await self.send(
                            {"type": "http.response.body", "body": body, "more_body": True}
                        )
                else:
                    chunks.append(body)

        await self.gate.app(self.scope, self._replay, capture)
        if start is None:
            raise RuntimeError("the app sent no response")
        status = int(start["status"])
        if self.streaming:
            if self.stream_failed:
                return Answer(502, b"", SSE)
            return Answer(status, b"", SSE)
        body = b"".join(chunks)
        headers = tuple(
            (bytes(k).decode("latin-1"), bytes(v).decode("latin-1"))
            for k, v in start.get("headers") or []
            if bytes(k).lower() not in _FRAMING
        )
        content_type = self.content_type or "application/octet-stream"
        if 200 <= status < 300 and run_failed(body):
            log.info(
                "the run answered %s with an __error__ body; answered 500, not charged", status
            )
            return Answer(500, body.strip(), content_type, headers)
        return Answer(status, body, content_type, headers)

    def _watch(self, body: bytes) -> None:
        """Notice an ``event: error`` in the stream (across chunk boundaries)."""
        seen = self._tail + body
        if _ERROR_EVENT in seen:
            self.stream_failed = True
        self._tail = seen[-len(_ERROR_EVENT) :]

    # -- the answer --------------------------------------------------------------------------

    async def _start_stream(self, start: Message) -> None:
        """The stream's status and headers go out now: the payment was verified and its
        credits held; the receipt follows as the last event."""
        self.streaming = True
        headers = [
            (k, v)
            for k, v in start.get("headers") or []
            if bytes(k).lower() not in (b"content-length", b"payment-response", b"cache-control")
        ]
        headers.append((b"cache-control", b"no-store"))
        await self.send(
            {"type": "http.response.start", "status": start["status"], "headers": headers}
        )

    async def _end_stream(self, outcome: PaidOutcome) -> None:
        if outcome.kind is Outcome.PAID and outcome.receipt is not None:
            event = f"event: {RECEIPT_EVENT}\ndata: {compact_json(outcome.receipt)}\n\n"
        else:
            reason = outcome.reason or outcome.kind.value
            if self.stream_failed:
                reason = "the run failed; nothing was charged"
            elif outcome.kind is Outcome.DEFERRED:
                reason = "settling is deferred (the payment service is unreachable); no receipt yet"
            event = f"event: {NO_CHARGE_EVENT}\ndata: {json.dumps({'reason': reason})}\n\n"
        await self.send({"type": "http.response.body", "body": event.encode(), "more_body": False})

    async def _send_answer(self, answer: Answer) -> None:
        headers = [
            (k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in paid_headers(answer)
        ]
        headers.append((b"content-length", str(len(answer.body)).encode()))
        await self.send(
            {"type": "http.response.start", "status": answer.status, "headers": headers}
        )
        await self.send({"type": "http.response.body", "body": answer.body, "more_body": False})


def _fixed_body(body: bytes) -> Receive:
    async def receive() -> Message:
        return {"type": "http.request", "body": body, "more_body": False}

    return receive


def _content_type(start: Message) -> str:
    for name, value in start.get("headers") or []:
        if bytes(name).lower() == b"content-type":
            return bytes(value).decode("latin-1").split(";", 1)[0].strip().lower()
    return ""
