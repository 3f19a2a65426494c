"""Whole numbers written as integers on the A2A wire: an ASGI layer around the SDK's routes.

A2A metadata is a protobuf ``Struct``, whose numbers are doubles, so the SDK writes the x402
envelope's ``x402Version: 2`` and ``maxTimeoutSeconds: 300`` as ``2.0`` and ``300.0``, which
strict x402 parsers refuse. Every JSON response (JSON-RPC, HTTP+JSON) and every ``data:`` line of
an event stream is read back and each whole-number float written as an integer: the same JSON
number, in the form schemas that say "integer" accept. A body that does not parse is sent as it
came.
"""

from __future__ import annotations

import json
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ....interop.a2a_x402 import whole_numbers


def _dumps(value: Any) -> bytes:
    """As Starlette's ``JSONResponse`` renders."""
    text = json.dumps(value, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    return text.encode("utf-8")


def rewrite_json(body: bytes) -> bytes:
    """``body`` with its whole-number floats as integers (unchanged when it has none, or is not
    JSON)."""
    if b".0" not in body and b"e+" not in body:
        return body  # Python writes a whole float as ``2.0`` or ``1e+16``
    try:
        value = json.loads(body)
    except (ValueError, RecursionError):
        return body
    return _dumps(whole_numbers(value))


def rewrite_events(chunk: bytes) -> bytes:
    """Each ``data:`` line of an event-stream chunk, its JSON rewritten."""
    lines = chunk.splitlines(keepends=True)
    for i, line in enumerate(lines):
        if line.startswith(b"data:"):
            content = line[5:].rstrip(b"\r\n")
            ending = line[5 + len(content) :]
            lead = b" " if content.startswith(b" ") else b""
            lines[i] = b"data:" + lead + rewrite_json(content[len(lead) :]) + ending
    return b"".join(lines)


_LENGTH = b"content-length"


def _header(start: Message, name: bytes) -> bytes:
    return next((bytes(v) for k, v in start.get("headers") or [] if bytes(k).lower() == name), b"")


class WholeNumbers:
    """ASGI middleware: JSON and event-stream responses with whole-number floats as integers."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope.get("type") != "http":
            await self.app(scope, receive, send)
            return
        kind = ""
        start: Message | None = None
        held: list[bytes] = []

        async def sending(message: Message) -> None:
            nonlocal kind, start
            if message["type"] == "http.response.start":
                ctype = _header(message, b"content-type").split(b";")[0].strip().lower()
                if ctype == b"application/json" or ctype.endswith(b"+json"):  # a2a+json too
                    kind, start = "json", message  # sent with the body: its length changes
                    return
                kind = "events" if ctype == b"text/event-stream" else ""
                await send(message)
                return
            if message["type"] != "http.response.body" or not kind:
                await send(message)
                return
            body = bytes(message.get("body") or b"")
            if kind == "events":
                await send({**message, "body": rewrite_events(body)})
                return
            held.append(body)
            if message.get("more_body"):
                return
            whole = rewrite_json(b"".join(held))
            assert start is not None
            headers = [(k, v) for k, v in start.get("headers") or [] if bytes(k).lower() != _LENGTH]
            headers.append((_LENGTH, str(len(whole)).encode()))
            await send({**start, "headers": headers})
            await send({"type": "http.response.body", "body": whole, "more_body": False})

        await self.app(scope, receive, sending)
